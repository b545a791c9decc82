"""Ingest storage: landed batches, the event-id ledger and raw events (docs/telemetry.md).

`POST /api/v1/telemetry` validates a batch, records its new event ids in `EventKey` and lands
the new events as one `LandedBatch` row, in one transaction, before answering 202. A Celery
task then moves landed batches into `Event` (raw, partitioned by day on PostgreSQL) and into
partial rollup rows (telemetry.models), and deletes them from the landing table, again in one
transaction: a worker killed half way leaves the batch landed, to be processed again.
"""

from django.db import models

from routing_policies.models import Fleet

from ..model_fields import bulk_fleet_fk


class Cohort(models.TextChoices):
    """Which side of a rollout an event's policy version was on when it happened."""

    STABLE = "stable"
    CANDIDATE = "candidate"


class CellKeyed(models.Model):
    """What an event and a rollup row of the cell levels (minute, hour) are keyed by: the
    fleet, the policy version, the cohort, the policy cell and the route."""

    fleet = bulk_fleet_fk()
    policy_version = models.IntegerField()
    cohort = models.CharField(max_length=9, choices=Cohort.choices)
    task_type = models.CharField(max_length=32)
    latency_budget = models.CharField(max_length=32)
    privacy_tier = models.CharField(max_length=32)
    route = models.CharField(max_length=12)

    class Meta:
        abstract = True


class LandedBatch(models.Model):
    """A validated batch of new events, durable in PostgreSQL and not yet processed."""

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="+")
    device_pk = models.BigIntegerField()
    received_at = models.DateTimeField(db_index=True)
    event_count = models.PositiveIntegerField()
    # The events as a protocol batch body (ingest.events.encode_landed); TOAST-compressed.
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


class Event(CellKeyed):
    """One routing decision as a device reported it (PROTOCOL.md "Telemetry event").

    On PostgreSQL the table is partitioned by day of `ts` (migration 0002) and has no primary
    key; `EventKey` makes `event_id` unique. Kept for replaying drafts against what devices saw.
    """

    event_id = models.UUIDField(primary_key=True)
    device_id = models.CharField(max_length=128)
    ts = models.DateTimeField()
    received_at = models.DateTimeField()
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
    # The decision's other inputs, as the device said (PROTOCOL.md extensions; None: not sent).
    online = models.BooleanField(null=True)
    cloud_infer_ms = models.FloatField(null=True)
    cloud_pressure = models.FloatField(null=True)
    # The quality signals (PROTOCOL.md extensions; None: not sent). `quality` is the event's
    # own; quality sent later as feedback is kept in `Feedback`, not written back here.
    refine_changed = models.BooleanField(null=True)
    refine_edit_ratio = models.FloatField(null=True)
    quality = models.FloatField(null=True)
    shadow_refine = models.BooleanField(null=True)
    # The ids of the fleet's named segments the device was in when the event's batch was
    # processed (its stored attributes against the segments' rules then); its rollups count it
    # in each. None: not known (stored before segments were a rollup dimension, or its device
    # was gone), counted only in the all-devices rows.
    segments = models.JSONField(null=True)

    class Meta:
        indexes = [models.Index(fields=["fleet", "ts"], name="telemetry_event_fleet_ts")]

    def __str__(self) -> str:
        return str(self.event_id)
