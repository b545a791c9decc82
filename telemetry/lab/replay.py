"""Recorded events as decision inputs: what the backtest and calibration replay (docs/lab.md).

`recorded_events` streams a fleet's raw events of a window in batches of `RecordedEvent`:
plain frozen dataclasses built straight from database rows (a server-side cursor on
PostgreSQL, chunks of a plain cursor on SQLite), never one Django model object per event, so
a day of a million events is read in bounded memory.

Inputs the decision needs and older events lack (PROTOCOL.md extensions, "Telemetry: the
decision's inputs"):
- `cloud_pressure`: as recorded, else the fleet's audited nudge history (`fleet.cloud_pressure`
  audit entries of routing_policies' rollout service: the offset held from the entry's time
  for its `ttl_s`; a later nudge replaces an earlier one);
- `online`: as recorded, else `decided_by != "offline"`;
- `cloud_infer_ms`: as recorded, else 0 (unknown). Such an event is not `replayable`: its
  step 7 is not known exactly.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from django.db import connection

from edge_sdk.decision import DeviceState, TaskSignals
from routing_policies.models import AuditEntry

__all__ = [
    "CLOUD_PRESSURE_ACTION",
    "CellKey",
    "NudgeHistory",
    "RecordedEvent",
    "recorded_events",
]

CellKey = tuple[str, str, str]  # (task_type, latency_budget, privacy_tier)
CLOUD_PRESSURE_ACTION: Final = "fleet.cloud_pressure"

# The raw table's columns the replay reads, in this order (`_event_of` unpacks them).
_COLUMNS: Final = (
    "ts",
    "policy_version",
    "cohort",
    "task_type",
    "latency_budget",
    "privacy_tier",
    "route",
    "decided_by",
    "fallback",
    "cache_hit",
    "ok",
    "latency_ms",
    "tokens",
    "intent_conf",
    "lm_conf",
    "upload_bytes",
    "rtt_ms",
    "bandwidth_kbps",
    "device_load",
    "online",
    "cloud_infer_ms",
    "cloud_pressure",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordedEvent:
    """One raw event as the decision's inputs and what happened to it."""

    ts: datetime
    policy_version: int
    cohort: str
    cell: tuple[str, str, str]  # (task_type, latency_budget, privacy_tier)
    task: TaskSignals
    device: DeviceState  # cloud_pressure and online as recorded or reconstructed
    route: str
    decided_by: str
    fallback: str
    cache_hit: bool
    ok: bool
    latency_ms: float
    tokens: int
    replayable: bool  # every decision input was recorded


class NudgeHistory:
    """The fleet's cloud-pressure nudges from its audit log: the offset in force at a time."""

    __slots__ = ("_ends", "_offsets", "_starts")

    def __init__(self, nudges: Sequence[tuple[float, float, float]]) -> None:
        """`nudges`: (start, end, offset) in epoch seconds, ordered by start."""
        self._starts = [start for start, _, _ in nudges]
        self._ends = [end for _, end, _ in nudges]
        self._offsets = [offset for _, _, offset in nudges]

    @classmethod
    def of_fleet(cls, *, fleet_id: int, end: datetime) -> NudgeHistory:
        """Every nudge the fleet's audit log records up to `end`."""
        nudges: list[tuple[float, float, float]] = []
        entries = (
            AuditEntry.objects.filter(
                fleet_id=fleet_id, action=CLOUD_PRESSURE_ACTION, created_at__lte=end
            )
            .order_by("created_at", "id")
            .values_list("created_at", "after")
        )
        for created_at, after in entries:
            if not isinstance(after, dict):
                continue
            offset, ttl_s = after.get("theta_offset"), after.get("ttl_s")
            if isinstance(offset, bool) or not isinstance(offset, int | float):
                continue
            if isinstance(ttl_s, bool) or not isinstance(ttl_s, int | float):
                continue
            start = created_at.timestamp()
            nudges.append((start, start + float(ttl_s), float(offset)))
        return cls(nudges)

    def __bool__(self) -> bool:
        return bool(self._starts)

    def offset_at(self, ts: float) -> float:
        """The θ offset in force at `ts` (epoch seconds): the latest nudge's, until it lapses."""
        index = bisect.bisect_right(self._starts, ts) - 1
        if index < 0 or ts >= self._ends[index]:
            return 0.0
        return self._offsets[index]


def recorded_events(
    *,
    fleet_id: int,
    start: datetime,
    end: datetime,
    versions: Collection[int] | None = None,
    cohort: str | None = None,
    cells: Collection[tuple[str, str, str]] | None = None,
    batch_size: int = 5000,
) -> Iterator[list[RecordedEvent]]:
    """The fleet's raw events with `start <= ts < end`, in batches of at most `batch_size`.

    Filters: policy versions, cohort (`stable` / `candidate`), cells. Order is the storage
    order (not by time): every consumer folds the events into sums.
    """
    nudges = NudgeHistory.of_fleet(fleet_id=fleet_id, end=end)
    for rows in _rows(
        fleet_id=fleet_id,
        start=start,
        end=end,
        versions=versions,
        cohort=cohort,
        cells=cells,
        batch_size=batch_size,
    ):
        yield [_event_of(row, nudges) for row in rows]


def _rows(
    *,
    fleet_id: int,
    start: datetime,
    end: datetime,
    versions: Collection[int] | None,
    cohort: str | None,
    cells: Collection[tuple[str, str, str]] | None,
    batch_size: int,
) -> Iterator[Sequence[tuple[Any, ...]]]:
    where = ["fleet_id = %s", "ts >= %s", "ts < %s"]
    params: list[Any] = [fleet_id, start, end]
    if versions is not None:
        numbers = sorted({int(v) for v in versions})
        if not numbers:
            return
        where.append(f"policy_version IN ({', '.join(['%s'] * len(numbers))})")
        params.extend(numbers)
    if cohort is not None:
        where.append("cohort = %s")
        params.append(cohort)
    wanted = None if cells is None else {tuple(cell) for cell in cells}
    if wanted is not None:
        if not wanted:
            return
        # Narrow by task type in SQL; the exact cell test is in Python (few cells, cheap).
        task_types = sorted({cell[0] for cell in wanted})
        where.append(f"task_type IN ({', '.join(['%s'] * len(task_types))})")
        params.extend(task_types)
    # Only constant column names and placeholders are formatted in; values go as parameters.
    sql = f"SELECT {', '.join(_COLUMNS)} FROM telemetry_event WHERE {' AND '.join(where)}"  # noqa: S608
    # chunked_cursor: a named (server-side) cursor on PostgreSQL, a plain one on SQLite.
    with connection.chunked_cursor() as cursor:
        cursor.execute(sql, params)
        while True:
            rows = cursor.fetchmany(batch_size)
            if not rows:
                return
            if wanted is not None:
                rows = [row for row in rows if (row[3], row[4], row[5]) in wanted]
                if not rows:
                    continue
            yield rows


def _as_datetime(value: Any) -> datetime:
    moment: datetime = datetime.fromisoformat(value) if isinstance(value, str) else value
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _event_of(row: tuple[Any, ...], nudges: NudgeHistory) -> RecordedEvent:
    (
        ts,
        policy_version,
        cohort,
        task_type,
        latency_budget,
        privacy_tier,
        route,
        decided_by,
        fallback,
        cache_hit,
        ok,
        latency_ms,
        tokens,
        intent_conf,
        lm_conf,
        upload_bytes,
        rtt_ms,
        bandwidth_kbps,
        device_load,
        online,
        cloud_infer_ms,
        cloud_pressure,
    ) = row
    ts = _as_datetime(ts)
    replayable = not (
        tokens is None
        or intent_conf is None
        or lm_conf is None
        or rtt_ms is None
        or bandwidth_kbps is None
        or device_load is None
        or online is None
        or cloud_infer_ms is None
        or cloud_pressure is None
    )
    if cloud_pressure is None:
        cloud_pressure = nudges.offset_at(ts.timestamp()) if nudges else 0.0
    return RecordedEvent(
        ts=ts,
        policy_version=policy_version,
        cohort=cohort,
        cell=(task_type, latency_budget, privacy_tier),
        task=TaskSignals(
            tokens=tokens or 0,
            intent_conf=1.0 if intent_conf is None else intent_conf,
            lm_conf=1.0 if lm_conf is None else lm_conf,
            upload_bytes=upload_bytes or 0,
        ),
        device=DeviceState(
            rtt_ms=rtt_ms or 0.0,
            bandwidth_kbps=0.0 if bandwidth_kbps is None else bandwidth_kbps,
            device_load=device_load or 0.0,
            online=decided_by != "offline" if online is None else bool(online),
            cloud_infer_ms=cloud_infer_ms or 0.0,
            cloud_pressure=cloud_pressure,
        ),
        route=route,
        decided_by=decided_by,
        fallback=fallback,
        cache_hit=bool(cache_hit),
        ok=bool(ok),
        latency_ms=latency_ms,
        tokens=tokens or 0,
        replayable=replayable,
    )
