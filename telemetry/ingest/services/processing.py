"""Processing: landed batches → raw events and partial rollup rows, in one transaction.

The transaction claims batches by deleting them from the landing table (`FOR UPDATE SKIP
LOCKED` on PostgreSQL, so workers never wait on each other), copies their events into the raw
table (COPY on PostgreSQL), appends partial rollup rows, and commits. A worker killed at any
point before the commit rolls all of it back: the batches are landed again and the next task
(or the sweeper) processes them. After the commit they are gone from the landing table. So
each landed event is stored and rolled up exactly once. Quality feedback that arrived before
its event and was held for it (telemetry.feedback) joins the event's tally in the same
transaction.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from psycopg.types.json import Jsonb

from controlplane.queue import task_send

from ...feedback.joining import feedback_join_folding
from ...rollups import SENSITIVE_TIER, RollupAccumulator, is_privacy_violation
from ...rollups.fold import event_cell
from ...rollups.store import CELL_COLUMN_TYPES, copy_binary, store_rollups
from ...signals import send_rollups_stored
from .. import partitions, wakeup
from ..events import TelemetryEvent, decode_landed
from ..models import Event, LandedBatch
from ..selectors import CellPrivacy, CohortResolver, SegmentResolver
from .landing import retention_start

logger = logging.getLogger(__name__)

# (column, PostgreSQL type) of the raw table, in COPY order; binary COPY needs the types.
EVENT_COLUMN_TYPES = (
    ("event_id", "uuid"),
    ("fleet_id", "int8"),
    ("device_id", "text"),
    ("ts", "timestamptz"),
    ("received_at", "timestamptz"),
    *CELL_COLUMN_TYPES,
    ("decided_by", "text"),
    ("fallback", "text"),
    ("latency_ms", "float8"),
    ("cache_hit", "bool"),
    ("ok", "bool"),
    ("deidentified", "bool"),
    ("score", "float8"),
    ("threshold", "float8"),
    ("tokens", "int4"),
    ("intent_conf", "float8"),
    ("lm_conf", "float8"),
    ("upload_bytes", "int8"),
    ("rtt_ms", "float8"),
    ("bandwidth_kbps", "float8"),
    ("device_load", "float8"),
    ("uploaded", "bool"),
    ("online", "bool"),
    ("cloud_infer_ms", "float8"),
    ("cloud_pressure", "float8"),
    ("refine_changed", "bool"),
    ("refine_edit_ratio", "float8"),
    ("quality", "float8"),
    ("shadow_refine", "bool"),
    ("segments", "jsonb"),
)
EVENT_COLUMNS = tuple(name for name, _ in EVENT_COLUMN_TYPES)


@dataclass(frozen=True, slots=True)
class ProcessResult:
    """How many landed batches and events one transaction processed."""

    batches: int
    events: int
    expired: int


_partition_days_lock = threading.Lock()
_partition_days_ready: set[date] = set()


def partitions_ensure_window(today: date | None = None) -> None:
    """Make sure the raw table has a partition for every day an event may carry now."""
    today = today or timezone.now().astimezone(UTC).date()
    days: int = settings.TELEMETRY_RETENTION_DAYS
    wanted = {today + timedelta(days=offset) for offset in range(-days - 1, 3)}
    with _partition_days_lock:
        missing = wanted - _partition_days_ready
    if not missing or not partitions.is_partitioned():
        return
    partitions.partitions_create(missing)
    with _partition_days_lock:
        _partition_days_ready.update(missing)


# A claimed batch: (id, fleet id, received at, payload, device pk).
Claimed = tuple[int, int, datetime, bytes, int]


def _claim(batch_ids: Sequence[int], limit: int) -> list[Claimed]:
    """Delete up to `limit` landed batches (the named ones first) and return them.

    On PostgreSQL rows locked by another worker are skipped. The delete is undone if the
    transaction does not commit.
    """
    table = LandedBatch._meta.db_table
    lock = " FOR UPDATE SKIP LOCKED" if connection.vendor == "postgresql" else ""
    claimed: list[Claimed] = []
    with connection.cursor() as cursor:
        if batch_ids:
            placeholders = ", ".join(["%s"] * len(batch_ids))
            cursor.execute(
                f"DELETE FROM {table} WHERE id IN (SELECT id FROM {table} "  # noqa: S608
                f"WHERE id IN ({placeholders}){lock}) "
                "RETURNING id, fleet_id, received_at, payload, device_pk",
                list(batch_ids),
            )
            claimed.extend(cursor.fetchall())
        room = limit - len(claimed)
        if room > 0:
            cursor.execute(
                f"DELETE FROM {table} WHERE id IN (SELECT id FROM {table} "  # noqa: S608
                f"ORDER BY id LIMIT %s{lock}) "
                "RETURNING id, fleet_id, received_at, payload, device_pk",
                [room],
            )
            claimed.extend(cursor.fetchall())
    return claimed


def _event_row(
    event: TelemetryEvent, fleet_id: int, received_at: datetime, cohort: str, segments: Any
) -> tuple[Any, ...]:
    return (
        event.event_id,
        fleet_id,
        event.device_id,
        event.ts,
        received_at,
        *event_cell(event, cohort),
        event.fallback,
        event.latency_ms,
        event.cache_hit,
        event.ok,
        event.deidentified,
        event.score,
        event.threshold,
        event.tokens,
        event.intent_conf,
        event.lm_conf,
        event.upload_bytes,
        event.rtt_ms,
        event.bandwidth_kbps,
        event.device_load,
        event.uploaded,
        event.online,
        event.cloud_infer_ms,
        event.cloud_pressure,
        event.refine_changed,
        event.refine_edit_ratio,
        event.quality,
        event.shadow_refine,
        segments,
    )


def _store_raw(rows: list[tuple[Any, ...]]) -> None:
    """Insert raw event rows: binary COPY on PostgreSQL, executemany elsewhere."""
    table = Event._meta.db_table
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            copy_binary(cursor, table, EVENT_COLUMN_TYPES, rows)
            return
        ops = connection.ops
        adapted = [
            (
                row[0].hex,
                *row[1:3],
                ops.adapt_datetimefield_value(row[3]),
                ops.adapt_datetimefield_value(row[4]),
                *row[5:],
            )
            for row in rows
        ]
        columns = ", ".join(EVENT_COLUMNS)
        placeholders = ", ".join(["%s"] * len(EVENT_COLUMNS))
        cursor.executemany(
            f"INSERT INTO {table} ({columns}) VALUES ({placeholders})",  # noqa: S608
            adapted,
        )


def _json_column(value: list[int]) -> Any:
    """A JSON value as the raw table's insert takes it: jsonb for binary COPY, text else."""
    if connection.vendor == "postgresql":
        return Jsonb(value)
    return json.dumps(value)


def landed_batches_process(
    *, batch_ids: Iterable[int] = (), max_batches: int | None = None
) -> ProcessResult:
    """Process the named landed batches, topped up with the oldest others, in one transaction.

    Events older than retention by now (landed long ago and never processed) are dropped
    and counted as expired: their day's partition may be gone.
    """
    limit = max_batches or settings.TELEMETRY_PROCESS_MAX_BATCHES
    now = timezone.now()
    partitions_ensure_window(now.astimezone(UTC).date())
    oldest = retention_start(now)
    with transaction.atomic():
        claimed = _claim(list(batch_ids)[:limit], limit)
        if not claimed:
            return ProcessResult(batches=0, events=0, expired=0)
        resolver = CohortResolver(fleet_id for _, fleet_id, _, _, _ in claimed)
        members = SegmentResolver((fleet_id, device) for _, fleet_id, _, _, device in claimed)
        privacy = CellPrivacy()
        accumulator = RollupAccumulator()
        rows: list[tuple[Any, ...]] = []
        # event id → (fleet, cohort, event, segments): the events whose held feedback joins
        # them now.
        folding: dict[uuid.UUID, tuple[int, str, TelemetryEvent, tuple[int, ...]]] = {}
        expired = 0
        for _, fleet_id, received_at, payload, device_pk in claimed:
            known = members.segments(device_pk)
            segments = known or ()
            stored = None if known is None else _json_column(list(known))
            for event in decode_landed(bytes(payload)):
                if event.ts < oldest:
                    expired += 1
                    continue
                cohort = resolver.cohort(fleet_id, event.policy_version, event.ts)
                rows.append(_event_row(event, fleet_id, received_at, cohort, stored))
                violation = event.privacy_tier == SENSITIVE_TIER and is_privacy_violation(
                    event,
                    privacy.handling(
                        fleet_id,
                        event.policy_version,
                        event.task_type,
                        event.latency_budget,
                        event.privacy_tier,
                    ),
                )
                accumulator.add(fleet_id, cohort, event, violation, segments)
                folding[event.event_id] = (fleet_id, cohort, event, segments)
        if rows:
            feedback_join_folding(accumulator=accumulator, folding=folding)
            _store_raw(rows)
            store_rollups(accumulator)
            fleet_ids = frozenset(fleet_id for _, fleet_id, _, _, _ in claimed)
            transaction.on_commit(lambda: send_rollups_stored(fleet_ids))
    if expired:
        logger.warning("telemetry.events_expired count=%d", expired)
    logger.info("telemetry.batches_processed batches=%d events=%d", len(claimed), len(rows))
    return ProcessResult(batches=len(claimed), events=len(rows), expired=expired)


def landed_drain(*, slot: int = 0, budget_s: float = 60.0) -> int:
    """Process landed batches until none is left (the wake-up protocol of ingest.wakeup).

    When a transaction found fewer than half the maximum, it waits TELEMETRY_PROCESS_LINGER_S
    before the next, so that transactions stay large (fewer, fuller partial rollup rows) at a
    cost of that much latency. When it found the maximum (a backlog), it wakes a helper drain in
    the next slot, up to TELEMETRY_DRAINS. After `budget_s` it hands over to a fresh task.
    Slot 0 is the drain requests wake; helpers (slot > 0) stop when they find nothing.
    """
    limit: int = settings.TELEMETRY_PROCESS_MAX_BATCHES
    linger: float = settings.TELEMETRY_PROCESS_LINGER_S
    drains: int = settings.TELEMETRY_DRAINS
    deadline = time.monotonic() + budget_s
    events = 0
    while time.monotonic() < deadline:
        wakeup.keep_awake(slot)
        result = landed_batches_process(max_batches=limit)
        events += result.events
        if result.batches == 0:
            wakeup.release(slot)
            if slot > 0:
                return events
            # A request that saw the key before the release enqueued nothing: look once more.
            result = landed_batches_process(max_batches=limit)
            events += result.events
            if result.batches == 0:
                return events
        elif result.batches >= limit and slot + 1 < drains:
            wakeup.wake_helper(slot + 1)
        elif result.batches < limit // 2 and linger > 0:
            time.sleep(linger)
    wakeup.release(slot)
    if slot == 0:
        task_send("telemetry.drain_landed")
    return events
