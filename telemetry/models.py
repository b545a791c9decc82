"""Telemetry's rollups, and where Django finds every model of the app.

Rollup rows (minute, hour, fleet-hour) are written append-only (`compacted=False`) by the
ingest worker and merged by the compaction task; every reader sums over a key's rows, so
compaction changes nothing a reader sees (docs/telemetry.md). The models of the parts live
with them, `telemetry/ingest/models.py` and `telemetry/alerts/models.py`, and are imported
here: Django loads `telemetry.models` and files them under the app label `telemetry`
(late quality feedback: `telemetry/feedback/models.py`). Alerting's models are imported
from `telemetry.alerts.models`, never from here.
"""

from django.db import models
from django.db.models import Q

from routing_policies.models import Fleet

from .alerts import models as alert_models  # noqa: F401  (Django files them under `telemetry`)
from .feedback.models import Feedback, FeedbackState
from .ingest.models import CellKeyed, Cohort, Event, EventKey, LandedBatch
from .model_fields import bulk_fleet_fk


def rollup_indexes(time_field: str, short_name: str) -> list[models.Index]:
    """A rollup level's indexes: its reads, by fleet, segment and time (every read names the
    segment: 0 for the all-devices rows); the partial rows compaction merges
    (`tel_<short_name>_fleet_seg_time`, `tel_<short_name>_partial`)."""
    return [
        models.Index(
            fields=["fleet", "segment", time_field], name=f"tel_{short_name}_fleet_seg_time"
        ),
        models.Index(
            fields=[time_field], condition=Q(compacted=False), name=f"tel_{short_name}_partial"
        ),
    ]


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
    # The quality signals (telemetry.rollups.schema.MetricField says what each counts).
    refine_reported = models.BigIntegerField(default=0)
    refine_kept = models.BigIntegerField(default=0)
    refine_edit_sum = models.FloatField(default=0.0)
    refine_edit_count = models.BigIntegerField(default=0)
    quality_count = models.BigIntegerField(default=0)
    quality_sum = models.FloatField(default=0.0)
    shadow_refines = models.BigIntegerField(default=0)
    # {"<log bucket>": count} (telemetry.rollups.sketch) and {"<score bin 0..99>": count}: the
    # scores of all events, of those reporting `refine_changed` and of those the cloud kept.
    latency_hist = models.JSONField(default=dict)
    score_hist = models.JSONField(default=dict)
    refine_hist = models.JSONField(default=dict)
    kept_hist = models.JSONField(default=dict)
    # False for a partial row written by the ingest worker; the compaction task merges all
    # rows of a key into one compacted row.
    compacted = models.BooleanField(default=False)
    # What a row is called in logs and the admin: "minute rollup 42".
    label = "rollup"

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"{self.label} {self.pk}"


def segment_field() -> "models.BigIntegerField[int, int]":
    """A rollup row's segment: 0 for the all-devices row (every event counts there, and every
    row stored before segments were a dimension is one), else the id of one of the fleet's named
    segments (routing_policies Segment) the event's device was in when its batch was processed
    (docs/telemetry.md, "Segments"). Never a raw attribute value: bounded by the fleet's
    segments."""
    return models.BigIntegerField(default=0, db_default=0)


class CellRollup(RollupMetrics, CellKeyed):
    """The rollups that keep the policy cell: keyed as an event is (fleet × version × cohort ×
    cell × route), by the segment, and by the time, which each level names."""

    segment = segment_field()

    class Meta:
        abstract = True


class MinuteRollup(CellRollup):
    """Per minute × fleet × version × cohort × cell × route × segment."""

    minute = models.DateTimeField()
    label = "minute rollup"

    class Meta:
        indexes = rollup_indexes("minute", "minute")


class HourRollup(CellRollup):
    """Per hour × fleet × version × cohort × cell × route × segment: long windows by cell."""

    hour = models.DateTimeField()
    label = "hour rollup"

    class Meta:
        indexes = rollup_indexes("hour", "hour")


class FleetHourRollup(RollupMetrics):
    """Per hour × fleet × version × cohort × route × decided_by × segment, without the cell.

    Long windows not grouped or filtered by cell read these: a fleet's 24 hours is about
    24 × (versions × routes × deciding steps) rows instead of that × every cell.
    """

    fleet = bulk_fleet_fk()
    hour = models.DateTimeField()
    policy_version = models.IntegerField()
    cohort = models.CharField(max_length=9, choices=Cohort.choices)
    route = models.CharField(max_length=12)
    decided_by = models.CharField(max_length=12)
    segment = segment_field()
    label = "fleet hour rollup"

    class Meta:
        indexes = rollup_indexes("hour", "fleethour")


class RouteCounter(models.Model):
    """Totals since the start per fleet × route × deciding step, for Prometheus counters.

    Monotonic (never pruned), added to by the compaction task from the partial minute rows it
    merges, so each event counts once. `latency_le` holds cumulative-ready counts per
    telemetry.rollups.prometheus.LATENCY_BUCKETS_MS bound (not yet cumulative; +Inf is `events`).
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


__all__ = [
    "Cohort",
    "Event",
    "EventKey",
    "Feedback",
    "FeedbackState",
    "FleetHourRollup",
    "HourRollup",
    "LandedBatch",
    "MinuteRollup",
    "RouteCounter",
]
