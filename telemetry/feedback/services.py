"""Feedback writes: storing a device's batch, and the late join of feedback with folded events.

`feedback_batch_ingest` stores each new (event, device) item once, held, and after the commit
asks the worker to join it (`telemetry.join_feedback`). `feedback_join` joins held rows whose
event is already stored: it adds partial rollup rows carrying only the quality, at the event's
minute, hour and fleet-hour keys; the compaction merges them into the event's rows like any
partial row, so a join after compaction counts too. Feedback whose event has not been folded
yet stays held; the fold of that event joins it (joining.feedback_join_folding). The sweep
(`feedback_sweep`, with the landed-batch sweep) retries held rows whose event was received,
for the one race the two paths leave: feedback committed while its event's fold was running.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from controlplane.queue import task_send
from routing_policies.models import Device

from ..models import Event, EventKey
from ..rollups import RollupAccumulator
from ..rollups.fold import EVENT_KEY_FIELDS
from ..rollups.store import store_rollups
from ..signals import send_rollups_stored
from .joining import HeldFeedback, held_for_update, mark_settled, settle
from .messages import TelemetryFeedbackItem, decode_feedback
from .models import Feedback, FeedbackState

logger = logging.getLogger(__name__)

SWEEP_LIMIT = 2000


@dataclass(frozen=True, slots=True)
class FeedbackResult:
    """What the 202 says: items newly stored, items already stored (or repeated)."""

    accepted: int
    duplicates: int
    ids: tuple[int, ...]


def _insert(device: Device, now: datetime, items: Sequence[TelemetryFeedbackItem]) -> list[int]:
    """Store the items that are new for this device (first value wins); their row ids."""
    table = Feedback._meta.db_table
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # Sorted by id, so two batches sharing items lock them in the same order.
            cursor.execute(
                f"INSERT INTO {table} "  # noqa: S608  # the table name is ours
                "(event_id, fleet_id, device_pk, device_id, quality, received_at, state) "
                "SELECT e, %s, %s, %s, q, %s, %s FROM unnest(%s::uuid[], %s::float8[]) AS u(e, q) "
                "ORDER BY e ON CONFLICT (event_id, device_pk) DO NOTHING RETURNING id",
                [
                    device.fleet_id,
                    device.pk,
                    device.device_id,
                    now,
                    FeedbackState.HELD,
                    "{" + ",".join(str(item.event_id) for item in items) + "}",
                    "{" + ",".join(repr(float(item.quality)) for item in items) + "}",
                ],
            )
            return [row[0] for row in cursor.fetchall()]
    ids: list[int] = []
    for item in sorted(items, key=lambda i: i.event_id.hex):
        if Feedback.objects.filter(event_id=item.event_id, device_pk=device.pk).exists():
            continue
        ids.append(
            Feedback.objects.create(
                event_id=item.event_id,
                fleet_id=device.fleet_id,
                device_pk=device.pk,
                device_id=device.device_id,
                quality=item.quality,
                received_at=now,
            ).pk
        )
    return ids


def feedback_batch_ingest(
    *, device: Device, body: bytes, now: datetime | None = None
) -> FeedbackResult:
    """Validate a device's feedback and store its new items, held for the join.

    Raises ValidationFailed (400, nothing stored) or FeedbackTooLarge (413). An item whose
    event id this device already sent, or repeated inside the batch, is a duplicate: the first
    value stays. Items are stored whatever event they name; the join decides (models).
    """
    now = now or timezone.now()
    items = decode_feedback(body)
    unique: dict[uuid.UUID, TelemetryFeedbackItem] = {}
    for item in items:
        unique.setdefault(item.event_id, item)
    with transaction.atomic():
        ids = _insert(device, now, list(unique.values()))
        if ids:
            new_ids = list(ids)
            transaction.on_commit(lambda: _wake_join(new_ids))
    return FeedbackResult(accepted=len(ids), duplicates=len(items) - len(ids), ids=tuple(ids))


def _wake_join(ids: list[int]) -> None:
    try:
        task_send("telemetry.join_feedback", args=[ids])
    except Exception:  # the rows are durable; the sweep joins them
        logger.warning("telemetry.feedback_enqueue_failed items=%d", len(ids), exc_info=True)


def _stored_events(
    event_ids: Sequence[uuid.UUID],
) -> dict[uuid.UUID, tuple[int, str, Any, tuple[int, ...]]]:
    """The stored events of these ids: event id → (fleet id, cohort, event row, the segments
    its rollups counted it in)."""
    found: dict[uuid.UUID, tuple[int, str, Any, tuple[int, ...]]] = {}
    columns = (
        "event_id",
        "fleet_id",
        "device_id",
        "cohort",
        *EVENT_KEY_FIELDS,
        "quality",
        "segments",
    )
    for start in range(0, len(event_ids), 1000):
        chunk = event_ids[start : start + 1000]
        for event in Event.objects.filter(event_id__in=chunk).only(*columns):
            segments = tuple(event.segments) if isinstance(event.segments, list) else ()
            found[event.event_id] = (event.fleet_id, event.cohort, event, segments)
    return found


def _join(held: list[HeldFeedback]) -> int:
    """Join these locked held rows with their stored events (in the caller's transaction)."""
    if not held:
        return 0
    events = _stored_events(sorted({row.event_id for row in held}))
    accumulator = RollupAccumulator()
    settled = settle(held, events, accumulator)
    joined = mark_settled(settled)
    if joined:
        store_rollups(accumulator)
        fleet_ids = frozenset(key[0] for key in accumulator)
        transaction.on_commit(lambda: send_rollups_stored(fleet_ids))
    return joined


def feedback_join(*, ids: Sequence[int]) -> int:
    """Join these feedback rows (those still held) with their events where stored; how many
    were joined. Rows a concurrent fold holds are skipped: it joins them."""
    wanted = set(ids)
    with transaction.atomic():
        event_ids = list(
            Feedback.objects.filter(pk__in=wanted, state=FeedbackState.HELD).values_list(
                "event_id", flat=True
            )
        )
        held = [row for row in held_for_update(event_ids, skip_locked=True) if row.pk in wanted]
        joined = _join(held)
    if joined:
        logger.info("telemetry.feedback_joined items=%d", joined)
    return joined


def feedback_sweep(*, limit: int = SWEEP_LIMIT) -> int:
    """Join held feedback whose event was received (its id is in the ledger); how many joined.

    A held row whose event never came is not looked at again here: the event's fold joins it.
    """
    with transaction.atomic():
        event_ids = list(
            Feedback.objects.filter(
                state=FeedbackState.HELD,
                event_id__in=EventKey.objects.values("event_id"),
            )
            .order_by("id")
            .values_list("event_id", flat=True)[:limit]
        )
        joined = _join(held_for_update(event_ids, skip_locked=True))
    if joined:
        logger.info("telemetry.feedback_swept items=%d", joined)
    return joined
