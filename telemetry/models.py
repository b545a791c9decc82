"""Telemetry storage: landed batches, the event-id ledger, raw events and rollups.

Flow (docs/telemetry.md): `POST /api/v1/telemetry` validates a batch, records its new event
ids in `EventKey` and lands the new events as one `LandedBatch` row, in one transaction,
before answering 202. A Celery task then moves landed batches into `Event` (raw, partitioned
by day on PostgreSQL) and into partial rollup rows, and deletes them from the landing table,
again in one transaction: a worker killed half way leaves the batch landed, to be processed
again. Rollup rows are written append-only (`compacted=False`) and merged by the compaction
task; every reader sums over a key's rows, so compaction changes nothing a reader sees.
"""

from django.db import models
from django.db.models import Q

from routing_policies.models import Fleet


def _bulk_fleet_fk() -> "models.ForeignKey[Fleet, Fleet]":
    """A fleet reference on a bulk table: no per-row constraint check, no Python cascade.

    Deleting a fleet must not make Django load millions of telemetry rows to cascade them;
    retention removes them instead. The (fleet, time) indexes below serve every query.
    """
    return models.ForeignKey(
        Fleet, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )


class Cohort(models.TextChoices):
    """Which side of a rollout an event's policy version was on when it happened."""

    STABLE = "stable"
    CANDIDATE = "candidate"


class LandedBatch(models.Model):
    """A validated batch of new events, durable in PostgreSQL and not yet processed."""

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="+")
    device_pk = models.BigIntegerField()
    received_at = models.DateTimeField(db_index=True)
    event_count = models.PositiveIntegerField()
    # The events as a protocol batch body (telemetry.events.encode_landed); TOAST-compressed.
    payload = models.BinaryField()

    def __str__(self) -> str:
        return f"landed batch {self.pk} ({self.event_count} events)"


class EventKey(models.Model):
    """The ledger of stored event ids: a resend of an id already here is a duplicate.

    Kept apart from `Event` because a unique index on a partitioned PostgreSQL table must
    include the partition key (the day), which would let the same id land on two days.
    `day` is the event's own day; ids of events past retention are pruned with their events
    (a resend of such an event is refused as too old anyway).
    """

    event_id = models.UUIDField(primary_key=True)
    day = models.DateField()

    def __str__(self) -> str:
        return str(self.event_id)


class Event(models.Model):
    """One routing decision as a device reported it (PROTOCOL.md "Telemetry event").

    On PostgreSQL the table is partitioned by day of `ts` (migration 0002) and has no primary
    key; `EventKey` makes `event_id` unique. Kept for replaying drafts against what devices saw.
    """

    event_id = models.UUIDField(primary_key=True)
    fleet = _bulk_fleet_fk()
    device_id = models.CharField(max_length=128)
    ts = models.DateTimeField()
    received_at = models.DateTimeField()
    policy_version = models.IntegerField()
    cohort = models.CharField(max_length=9, choices=Cohort.choices)
    task_type = models.CharField(max_length=32)
    latency_budget = models.CharField(max_length=32)
    privacy_tier = models.CharField(max_length=32)
    route = models.CharField(max_length=12)
    decided_by = models.CharField(max_length=12)
    fallback = models.CharField(max_length=16)
    latency_ms = models.FloatField()
    cache_hit = models.BooleanField()
    ok = models.BooleanField()
    deidentified = models.BooleanField()
    score = models.FloatField(null=True)
    threshold = models.FloatField(null=True)
    tokens = models.IntegerField(null=True)
    intent_conf = models.FloatField(null=True)
    lm_conf = models.FloatField(null=True)
    upload_bytes = models.BigIntegerField(null=True)
    rtt_ms = models.FloatField(null=True)
    bandwidth_kbps = models.FloatField(null=True)
    device_load = models.FloatField(null=True)
    # Whether the task's data left the device, as the device said (None: it did not say).
    uploaded = models.BooleanField(null=True)

    class Meta:
        indexes = [models.Index(fields=["fleet", "ts"], name="telemetry_event_fleet_ts")]

    def __str__(self) -> str:
        return str(self.event_id)


class RollupMetrics(models.Model):
    """The figures every rollup row carries; all of them merge by addition."""

    events = models.BigIntegerField(default=0)
    fallback_cloud_to_device = models.BigIntegerField(default=0)
    fallback_device_to_cloud = models.BigIntegerField(default=0)
    cache_hits = models.BigIntegerField(default=0)
    errors = models.BigIntegerField(default=0)
    privacy_violations = models.BigIntegerField(default=0)
    latency_sum_ms = models.FloatField(default=0.0)
    score_count = models.BigIntegerField(default=0)
    score_sum = models.FloatField(default=0.0)
    tokens_sum = models.BigIntegerField(default=0)
    # {"<log bucket>": count} (telemetry.sketch) and {"<score bin 0..99>": count}.
    latency_hist = models.JSONField(default=dict)
    score_hist = models.JSONField(default=dict)
    # False for a partial row written by the ingest worker; the compaction task merges all
    # rows of a key into one compacted row.
    compacted = models.BooleanField(default=False)

    class Meta:
        abstract = True


class MinuteRollup(RollupMetrics):
    """Per minute × fleet × version × cohort × cell × route."""

    fleet = _bulk_fleet_fk()
    minute = models.DateTimeField()
    policy_version = models.IntegerField()
    cohort = models.CharField(max_length=9, choices=Cohort.choices)
    task_type = models.CharField(max_length=32)
    latency_budget = models.CharField(max_length=32)
    privacy_tier = models.CharField(max_length=32)
    route = models.CharField(max_length=12)

    class Meta:
        indexes = [
            models.Index(fields=["fleet", "minute"], name="tel_minute_fleet_time"),
            models.Index(
                fields=["minute"], condition=Q(compacted=False), name="tel_minute_partial"
            ),
        ]

    def __str__(self) -> str:
        return f"minute rollup {self.pk}"


class HourRollup(RollupMetrics):
    """Per hour × fleet × version × cohort × cell × route: long windows grouped by cell."""

    fleet = _bulk_fleet_fk()
    hour = models.DateTimeField()
    policy_version = models.IntegerField()
    cohort = models.CharField(max_length=9, choices=Cohort.choices)
    task_type = models.CharField(max_length=32)
    latency_budget = models.CharField(max_length=32)
    privacy_tier = models.CharField(max_length=32)
    route = models.CharField(max_length=12)

    class Meta:
        indexes = [
            models.Index(fields=["fleet", "hour"], name="tel_hour_fleet_time"),
            models.Index(fields=["hour"], condition=Q(compacted=False), name="tel_hour_partial"),
        ]

    def __str__(self) -> str:
        return f"hour rollup {self.pk}"


class FleetHourRollup(RollupMetrics):
    """Per hour × fleet × version × cohort × route × decided_by, without the cell.

    Long windows not grouped or filtered by cell read these: a fleet's 24 hours is about
    24 × (versions × routes × deciding steps) rows instead of that × every cell.
    """

    fleet = _bulk_fleet_fk()
    hour = models.DateTimeField()
    policy_version = models.IntegerField()
    cohort = models.CharField(max_length=9, choices=Cohort.choices)
    route = models.CharField(max_length=12)
    decided_by = models.CharField(max_length=12)

    class Meta:
        indexes = [
            models.Index(fields=["fleet", "hour"], name="tel_fleethour_fleet_time"),
            models.Index(
                fields=["hour"], condition=Q(compacted=False), name="tel_fleethour_partial"
            ),
        ]

    def __str__(self) -> str:
        return f"fleet hour rollup {self.pk}"


class RouteCounter(models.Model):
    """Totals since the start per fleet × route × deciding step, for Prometheus counters.

    Monotonic (never pruned), added to by the compaction task from the partial minute rows it
    merges, so each event counts once. `latency_le` holds cumulative-ready counts per
    telemetry.prometheus.LATENCY_BUCKETS_MS bound (not yet cumulative; +Inf is `events`).
    """

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="+")
    route = models.CharField(max_length=12)
    decided_by = models.CharField(max_length=12)
    events = models.BigIntegerField(default=0)
    errors = models.BigIntegerField(default=0)
    fallbacks = models.BigIntegerField(default=0)
    cache_hits = models.BigIntegerField(default=0)
    privacy_violations = models.BigIntegerField(default=0)
    latency_sum_ms = models.FloatField(default=0.0)
    latency_le = models.JSONField(default=list)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["fleet", "route", "decided_by"], name="route_counter_unique_key"
            )
        ]

    def __str__(self) -> str:
        return f"{self.fleet_id}/{self.route}/{self.decided_by}"


# Alert rules, webhooks and rollout guards live in their own module; Django finds them here.
from .alert_models import (  # noqa: E402
    AlertEvent,
    AlertRule,
    AlertWebhook,
    RolloutGuard,
    RolloutGuardSet,
    WebhookDelivery,
)

__all__ = [
    "AlertEvent",
    "AlertRule",
    "AlertWebhook",
    "Cohort",
    "Event",
    "EventKey",
    "FleetHourRollup",
    "HourRollup",
    "LandedBatch",
    "MinuteRollup",
    "RolloutGuard",
    "RolloutGuardSet",
    "RouteCounter",
    "WebhookDelivery",
]
