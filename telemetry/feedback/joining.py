"""The join of held feedback with events: the part the ingest worker runs while it folds.

Exactly once: a feedback row is joined only in a transaction that holds its row lock and moves
it from `held` to another state in the same transaction as the rollup rows it adds. The fold of
new events (`feedback_join_folding`, in ingest processing) locks the held rows of its events and
waits for a concurrent late join to finish with them; the late join (services.feedback_join)
skips rows locked by a fold (`SKIP LOCKED`) and leaves held what it cannot match yet.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.utils import timezone

from ..rollups import RollupAccumulator
from .models import Feedback, FeedbackState


@dataclass(frozen=True, slots=True)
class HeldFeedback:
    """One locked held feedback row, as the join reads it."""

    pk: int
    event_id: uuid.UUID
    fleet_id: int
    device_id: str
    quality: float


def held_for_update(event_ids: Iterable[uuid.UUID], *, skip_locked: bool) -> list[HeldFeedback]:
    """The held feedback rows of these events, locked (on PostgreSQL) until the transaction
    ends; with `skip_locked`, rows another transaction holds are left out instead of waited for.
    """
    ids = list(event_ids)
    if not ids:
        return []
    table = Feedback._meta.db_table
    columns = "id, event_id, fleet_id, device_id, quality"
    out: list[HeldFeedback] = []
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            lock = " FOR UPDATE SKIP LOCKED" if skip_locked else " FOR UPDATE"
            cursor.execute(
                f"SELECT {columns} FROM {table} "  # noqa: S608  # names are ours
                f"WHERE state = %s AND event_id = ANY(%s::uuid[]) ORDER BY id{lock}",
                [FeedbackState.HELD, "{" + ",".join(str(i) for i in ids) + "}"],
            )
            rows = cursor.fetchall()
        else:
            rows = []
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                placeholders = ", ".join(["%s"] * len(chunk))
                cursor.execute(
                    f"SELECT {columns} FROM {table} "  # noqa: S608
                    f"WHERE state = %s AND event_id IN ({placeholders}) ORDER BY id",
                    [FeedbackState.HELD, *(i.hex for i in chunk)],
                )
                rows.extend(cursor.fetchall())
    for pk, event_id, fleet_id, device_id, quality in rows:
        if not isinstance(event_id, uuid.UUID):
            event_id = uuid.UUID(str(event_id))
        out.append(HeldFeedback(pk, event_id, fleet_id, device_id, quality))
    return out


def settle(
    held: Iterable[HeldFeedback],
    events: Mapping[uuid.UUID, tuple[int, str, Any, tuple[int, ...]]],
    accumulator: RollupAccumulator,
) -> dict[str, list[int]]:
    """Judge each held row against its event (`events`: event id → (fleet id, cohort, event,
    the segments it was counted in));
    add the joined ones' quality to `accumulator`. The row ids by new state; a row whose event
    is not in `events` stays held."""
    settled: dict[str, list[int]] = {
        FeedbackState.JOINED: [],
        FeedbackState.REDUNDANT: [],
        FeedbackState.UNMATCHED: [],
    }
    for row in held:
        found = events.get(row.event_id)
        if found is None:
            continue
        fleet_id, cohort, event, segments = found
        if fleet_id != row.fleet_id or event.device_id != row.device_id:
            # Another device's or fleet's event: never a figure of that fleet.
            settled[FeedbackState.UNMATCHED].append(row.pk)
        elif event.quality is not None:
            # The event carried its own quality, already counted: not joined again.
            settled[FeedbackState.REDUNDANT].append(row.pk)
        else:
            accumulator.add_quality(fleet_id, cohort, event, row.quality, segments)
            settled[FeedbackState.JOINED].append(row.pk)
    return settled


def mark_settled(settled: Mapping[str, list[int]]) -> int:
    """Store the new states (in the caller's transaction); how many rows were joined."""
    now = timezone.now()
    for state, pks in settled.items():
        for start in range(0, len(pks), 1000):
            Feedback.objects.filter(pk__in=pks[start : start + 1000]).update(
                state=state, settled_at=now
            )
    return len(settled.get(FeedbackState.JOINED, ()))


def feedback_join_folding(
    *,
    accumulator: RollupAccumulator,
    folding: Mapping[uuid.UUID, tuple[int, str, Any, tuple[int, ...]]],
) -> int:
    """Join the feedback held for the events being folded (event id → (fleet id, cohort,
    event, segments)) into `accumulator`, in the caller's transaction; how many were joined."""
    fleet_ids = {fleet_id for fleet_id, *_ in folding.values()}
    if not Feedback.objects.filter(state=FeedbackState.HELD, fleet_id__in=fleet_ids).exists():
        # The common case: nothing is waiting in these fleets, no need to probe every id.
        return 0
    held = held_for_update(folding, skip_locked=False)
    if not held:
        return 0
    return mark_settled(settle(held, folding, accumulator))
