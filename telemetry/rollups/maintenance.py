"""Periodic work (Celery beat): sweep landed batches, compact rollups, apply retention."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from controlplane.queue import task_send

from ..feedback.models import Feedback
from ..ingest import partitions
from ..ingest.services.processing import partitions_ensure_window
from ..models import (
    Event,
    EventKey,
    FleetHourRollup,
    HourRollup,
    LandedBatch,
    MinuteRollup,
    RouteCounter,
)
from .fold import merge_columns
from .prometheus import latency_bins, stored_latency_bins
from .reader import rows_to_compact
from .schema import ALL_DEVICES, FLEET_HOUR, HISTOGRAM_FIELDS, LEVELS, Level

logger = logging.getLogger(__name__)

_COMPACTION_LOCK_KEY = 0x7E1E_0001  # pg advisory lock: one compaction at a time


def _bucket_counts(histogram: dict[str, int]) -> dict[str, int]:
    """A read histogram with only whole-number buckets (the merged row is clean even when a
    row an older version stored was not)."""
    return {key: count for key, count in histogram.items() if key.lstrip("-").isdigit()}


def _compact_level(level: Level, max_buckets: int) -> tuple[int, int]:
    """Merge every key's rows in up to `max_buckets` (fleet, time) buckets holding partial rows.

    Returns (rows read, rows written). Runs inside the caller's transaction.
    """
    model: Any = level.model  # one of the three concrete rollup models
    time_col = level.time_column
    rows = rows_to_compact(level, max_buckets=max_buckets)
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        # Robust to a bad row stored by an older version (counts kept only when whole and >= 0).
        for name in HISTOGRAM_FIELDS:
            row[name] = _bucket_counts(row[name])
        key = (row["fleet_id"], row[time_col], *(row[name] for name in level.key_columns))
        groups[key].append(row)
    doomed: list[int] = []
    merged_rows = []
    partials: list[dict[str, Any]] = []
    for key, group in groups.items():
        if len(group) == 1 and group[0]["compacted"]:
            continue
        partials.extend(row for row in group if not row["compacted"])
        doomed.extend(row["id"] for row in group)
        merged = merge_columns(group)
        identity = dict(zip(("fleet_id", time_col, *level.key_columns), key, strict=True))
        merged_rows.append(model(**identity, **merged, compacted=True))
    for start in range(0, len(doomed), 1000):
        model.objects.filter(pk__in=doomed[start : start + 1000]).delete()
    model.objects.bulk_create(merged_rows, batch_size=500)
    if level is FLEET_HOUR:
        # The all-devices rows alone: a segment's rows count the same events again.
        _count_for_prometheus([row for row in partials if row["segment"] == ALL_DEVICES])
    return (len(rows), len(merged_rows))


def _count_for_prometheus(partials: list[dict[str, Any]]) -> None:
    """Add newly compacted partial rows into the monotonic per-route counters."""
    totals: dict[tuple[int, str, str], dict[str, Any]] = {}
    for row in partials:
        key = (row["fleet_id"], row["route"], row["decided_by"])
        total = totals.get(key)
        if total is None:
            total = totals[key] = {
                "events": 0,
                "errors": 0,
                "fallbacks": 0,
                "cache_hits": 0,
                "privacy_violations": 0,
                "latency_sum_ms": 0.0,
                "latency_le": latency_bins({}),
            }
        total["events"] += row["events"]
        total["errors"] += row["errors"]
        total["fallbacks"] += row["fallback_cloud_to_device"] + row["fallback_device_to_cloud"]
        total["cache_hits"] += row["cache_hits"]
        total["privacy_violations"] += row["privacy_violations"]
        total["latency_sum_ms"] += row["latency_sum_ms"]
        bins = latency_bins(row["latency_hist"])
        total["latency_le"] = [a + b for a, b in zip(total["latency_le"], bins, strict=True)]
    for (fleet_id, route, decided_by), total in sorted(totals.items()):
        counter = (
            RouteCounter.objects.select_for_update()
            .filter(fleet_id=fleet_id, route=route, decided_by=decided_by)
            .first()
        )
        if counter is None:
            RouteCounter.objects.create(
                fleet_id=fleet_id, route=route, decided_by=decided_by, **total
            )
            continue
        counter.events += total["events"]
        counter.errors += total["errors"]
        counter.fallbacks += total["fallbacks"]
        counter.cache_hits += total["cache_hits"]
        counter.privacy_violations += total["privacy_violations"]
        counter.latency_sum_ms += total["latency_sum_ms"]
        old = stored_latency_bins(counter.latency_le)
        counter.latency_le = [a + b for a, b in zip(old, total["latency_le"], strict=True)]
        counter.save()


def rollups_compact(*, time_budget_s: float = 20.0, max_buckets: int = 50) -> int:
    """Merge partial rollup rows into one row per key; rows written. One run at a time."""
    deadline = time.monotonic() + time_budget_s
    written = 0
    while time.monotonic() < deadline:
        with transaction.atomic():
            if connection.vendor == "postgresql":
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [_COMPACTION_LOCK_KEY])
                    if not cursor.fetchone()[0]:
                        return written
            pass_written = 0
            pass_read = 0
            for level in LEVELS:
                read, wrote = _compact_level(level, max_buckets)
                pass_read += read
                pass_written += wrote
        written += pass_written
        if pass_read == 0:
            break
    if written:
        logger.info("telemetry.rollups_compacted rows=%d", written)
    return written


def landed_sweep(*, older_than_s: float | None = None, now: datetime | None = None) -> int:
    """Enqueue processing of batches landed more than `older_than_s` ago; how many batches.

    Catches batches whose task was lost: a Redis restart, a web process that died between
    commit and enqueue, a worker killed with the task unacknowledged.
    """
    now = now or timezone.now()
    age: float = settings.TELEMETRY_SWEEP_AFTER_S if older_than_s is None else older_than_s
    ids = list(
        LandedBatch.objects.filter(received_at__lte=now - timedelta(seconds=age))
        .order_by("id")
        .values_list("id", flat=True)[:5000]
    )
    chunk: int = settings.TELEMETRY_PROCESS_MAX_BATCHES
    for start in range(0, len(ids), chunk):
        task_send("telemetry.process_landed", args=[ids[start : start + chunk]])
    if ids:
        logger.info("telemetry.landed_swept batches=%d", len(ids))
    return len(ids)


@dataclass(frozen=True, slots=True)
class RetentionResult:
    """What one storage maintenance run did."""

    partitions_created: list[str]
    partitions_dropped: list[str]
    event_keys_deleted: int
    rollups_deleted: int
    feedback_deleted: int = 0


def storage_maintain(*, now: datetime | None = None) -> RetentionResult:
    """Create raw partitions ahead, drop raw days past retention, prune ids and old rollups."""
    now = now or timezone.now()
    today = now.astimezone(UTC).date()
    days: int = settings.TELEMETRY_RETENTION_DAYS
    first_kept = today - timedelta(days=days)
    partitions_ensure_window(today)
    created = partitions.partitions_create(
        first_kept + timedelta(days=offset) for offset in range(days + 3)
    )
    dropped = partitions.partitions_drop_before(first_kept)
    if not partitions.is_partitioned():
        Event.objects.filter(ts__lt=datetime.combine(first_kept, datetime.min.time(), UTC)).delete()
    keys_deleted = 0
    while True:
        doomed = list(
            EventKey.objects.filter(day__lt=first_kept).values_list("event_id", flat=True)[:20000]
        )
        if not doomed:
            break
        keys_deleted += EventKey.objects.filter(event_id__in=doomed).delete()[0]
    # Late feedback is kept as long as raw events: past that its event is gone, and the join
    # has either happened or can never happen.
    feedback_deleted = 0
    first_kept_moment = datetime.combine(first_kept, datetime.min.time(), UTC)
    while True:
        old = Feedback.objects.filter(received_at__lt=first_kept_moment)
        doomed_rows = list(old.values_list("id", flat=True)[:20000])
        if not doomed_rows:
            break
        feedback_deleted += Feedback.objects.filter(pk__in=doomed_rows).delete()[0]
    minute_cutoff = now - timedelta(days=settings.TELEMETRY_MINUTE_ROLLUP_RETENTION_DAYS)
    hour_cutoff = now - timedelta(days=settings.TELEMETRY_HOUR_ROLLUP_RETENTION_DAYS)
    rollups_deleted = MinuteRollup.objects.filter(minute__lt=minute_cutoff).delete()[0]
    rollups_deleted += HourRollup.objects.filter(hour__lt=hour_cutoff).delete()[0]
    rollups_deleted += FleetHourRollup.objects.filter(hour__lt=hour_cutoff).delete()[0]
    logger.info(
        "telemetry.storage_maintained created=%d dropped=%d keys=%d rollups=%d feedback=%d",
        len(created),
        len(dropped),
        keys_deleted,
        rollups_deleted,
        feedback_deleted,
    )
    return RetentionResult(created, dropped, keys_deleted, rollups_deleted, feedback_deleted)
