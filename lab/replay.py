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
import operator
import uuid
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, NotRequired, TypedDict, Unpack

from django.db import connection

from edge_sdk.decision import DeviceState, TaskSignals
from routing_policies.cell_schema import DIMENSIONS as CELL_DIMENSIONS
from routing_policies.models import AuditEntry

from .segments import segment_members_sql

__all__ = [
    "CLOUD_PRESSURE_ACTION",
    "COLUMNS",
    "DEFAULT_HOURS",
    "NO_FILTERS",
    "SIGNAL_COLUMNS",
    "CellKey",
    "EventFilters",
    "NudgeHistory",
    "RecordedEvent",
    "RecordedWhere",
    "ReplayInputs",
    "recorded_count",
    "recorded_events",
    "recorded_rows",
]

CellKey = tuple[str, str, str]  # (task_type, latency_budget, privacy_tier)
CLOUD_PRESSURE_ACTION: Final = "fleet.cloud_pressure"
# The window a replay reads unless asked otherwise: the last day (calibration and backtests).
DEFAULT_HOURS: Final = 24

# The task's signals and the device's link and load an event recorded, in this order (the
# playground's sample tasks are read from them too).
SIGNAL_COLUMNS: Final = (
    "tokens",
    "intent_conf",
    "lm_conf",
    "upload_bytes",
    "rtt_ms",
    "bandwidth_kbps",
    "device_load",
)
# The raw table's columns the replay reads, in this order (`ReplayInputs.load` unpacks them).
COLUMNS: Final = (
    "ts",
    "policy_version",
    "cohort",
    *CELL_DIMENSIONS,  # the cell's key, in its order
    "route",
    "decided_by",
    "fallback",
    "cache_hit",
    "ok",
    "latency_ms",
    *SIGNAL_COLUMNS,
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


@dataclass(frozen=True, slots=True, kw_only=True)
class EventFilters:
    """Which of a window's events: of these policy versions, cohort (`stable` / `candidate`),
    cells and a segment's devices only (None: all). A backtest keeps them as `Backtest.filters`."""

    versions: Collection[int] | None = None
    cohort: str | None = None
    cells: Collection[CellKey] | None = None
    # Only events of the devices this segment rule matches now (lab.segments).
    segment_rule: Mapping[str, Any] | None = None


NO_FILTERS: Final = EventFilters()


class RecordedWhere(TypedDict):
    """Which recorded events a replay reads: the fleet's with `start <= ts < end`, filtered."""

    fleet_id: int
    start: datetime
    end: datetime
    filters: NotRequired[EventFilters]


def recorded_events(
    *, batch_size: int = 5000, **where: Unpack[RecordedWhere]
) -> Iterator[list[RecordedEvent]]:
    """The fleet's raw events with `start <= ts < end`, in batches of at most `batch_size`.

    Filtered by `filters` (`EventFilters`). Order is the storage
    order (not by time): every consumer folds the events into sums.
    """
    nudges = NudgeHistory.of_fleet(fleet_id=where["fleet_id"], end=where["end"])
    inputs = ReplayInputs(nudges)
    for rows in recorded_rows(batch_size=batch_size, **where):
        yield [inputs.load(row).event() for row in rows]


def recorded_rows(
    *, batch_size: int = 5000, **where: Unpack[RecordedWhere]
) -> Iterator[Sequence[tuple[Any, ...]]]:
    """The raw rows behind `recorded_events` (columns `COLUMNS`), for a hot loop that fills one
    `ReplayInputs` per row instead of building a `RecordedEvent`."""
    query = _where(**where)
    if query is None:
        return
    clause, params = query
    # Only constant column names and placeholders are formatted in; values go as parameters.
    sql = f"SELECT {', '.join(COLUMNS)} FROM telemetry_event WHERE {clause}"  # noqa: S608
    if connection.vendor == "postgresql":
        # A server-side cursor in binary format: rows come FETCH by FETCH (other queries may
        # run on the connection between batches, e.g. a backtest's progress), and timestamps
        # and numbers are read in C, not parsed from text (3x faster than Django's cursor).
        connection.ensure_connection()
        raw = connection.connection
        name = f"lab_replay_{uuid.uuid4().hex[:12]}"
        with raw.cursor(name=name, binary=True, withhold=connection.get_autocommit()) as cursor:
            cursor.execute(sql, params)
            while rows := cursor.fetchmany(batch_size):
                yield rows
        return
    with connection.chunked_cursor() as plain:
        plain.execute(sql, params)
        while rows := plain.fetchmany(batch_size):
            yield rows


def recorded_count(**where: Unpack[RecordedWhere]) -> int:
    """How many events `recorded_rows` would yield: the total of a backtest's progress."""
    query = _where(**where)
    if query is None:
        return 0
    clause, params = query
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM telemetry_event WHERE {clause}", params)  # noqa: S608
        return int(cursor.fetchone()[0])


def _where(
    *, fleet_id: int, start: datetime, end: datetime, filters: EventFilters = NO_FILTERS
) -> tuple[str, list[Any]] | None:
    """The WHERE clause and its parameters; None when nothing can match."""
    where = ["fleet_id = %s", "ts >= %s", "ts < %s"]
    params: list[Any] = [fleet_id, start, end]
    versions, cohort, cells = filters.versions, filters.cohort, filters.cells
    if versions is not None:
        numbers = sorted({int(v) for v in versions})
        if not numbers:
            return None
        where.append(f"policy_version IN ({', '.join(['%s'] * len(numbers))})")
        params.extend(numbers)
    if cohort is not None:
        where.append("cohort = %s")
        params.append(cohort)
    wanted = None if cells is None else {tuple(cell) for cell in cells}
    if wanted is not None:
        if not wanted:
            return None
        where.append(
            "(task_type, latency_budget, privacy_tier) IN "
            f"({', '.join(['(%s, %s, %s)'] * len(wanted))})"
        )
        for cell in sorted(wanted):
            params.extend(cell)
    if filters.segment_rule is not None:
        members = segment_members_sql(fleet_id=fleet_id, rule=dict(filters.segment_rule))
        if members is None:
            return None
        where.append(f"device_id IN ({members[0]})")
        params.extend(members[1])
    return " AND ".join(where), params


class EventSpan:
    """The first and the last event time of the rows `recorded_rows` yields, batch by batch:
    the span a cost per day is figured over (routing_policies.pricing.data_span_hours)."""

    __slots__ = ("_first", "_last")

    def __init__(self) -> None:
        self._first: Any = None
        self._last: Any = None

    def add(self, rows: Sequence[tuple[Any, ...]]) -> None:
        """Widen the span to a batch's rows (its `ts`, the first column)."""
        if not rows:
            return
        first = min(rows, key=_TS)[0]
        last = max(rows, key=_TS)[0]
        if self._first is None or first < self._first:
            self._first = first
        if self._last is None or last > self._last:
            self._last = last

    @property
    def first(self) -> datetime | None:
        """The first event's time; None before any."""
        return None if self._first is None else _as_datetime(self._first)

    @property
    def last(self) -> datetime | None:
        """The last event's time; None before any."""
        return None if self._last is None else _as_datetime(self._last)


_TS = operator.itemgetter(0)


def _as_datetime(value: Any) -> datetime:
    moment: datetime = datetime.fromisoformat(value) if isinstance(value, str) else value
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


class ReplayInputs:
    """One row's decision inputs, reconstructed where not recorded (module docstring).

    Mutable and reused row after row: it has the attributes of both `TaskSignals` and
    `DeviceState`, so a hot loop passes it to `decide(cell, inputs, inputs)` without building
    two frozen objects per event (the SDK's Router does the same for steps 1-3).
    """

    __slots__ = (
        "bandwidth_kbps",
        "cache_hit",
        "cell",
        "cloud_infer_ms",
        "cloud_pressure",
        "cohort",
        "decided_by",
        "device_load",
        "fallback",
        "intent_conf",
        "latency_ms",
        "lm_conf",
        "nudges",
        "ok",
        "online",
        "policy_version",
        "replayable",
        "route",
        "rtt_ms",
        "tokens",
        "ts",
        "upload_bytes",
    )

    def __init__(self, nudges: NudgeHistory) -> None:
        self.nudges = nudges

    def load(self, row: tuple[Any, ...]) -> ReplayInputs:
        """Fill from one row of `recorded_rows`; returns self."""
        (
            ts,
            self.policy_version,
            self.cohort,
            task_type,
            latency_budget,
            privacy_tier,
            self.route,
            decided_by,
            self.fallback,
            cache_hit,
            ok,
            self.latency_ms,
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
        self.ts = ts
        self.cell = (task_type, latency_budget, privacy_tier)
        self.decided_by = decided_by
        self.cache_hit = bool(cache_hit)
        self.ok = bool(ok)
        self.replayable = not (
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
            nudges = self.nudges
            cloud_pressure = nudges.offset_at(_as_datetime(ts).timestamp()) if nudges else 0.0
        self.tokens = tokens or 0
        self.intent_conf = 1.0 if intent_conf is None else intent_conf
        self.lm_conf = 1.0 if lm_conf is None else lm_conf
        self.upload_bytes = upload_bytes or 0
        self.rtt_ms = rtt_ms or 0.0
        self.bandwidth_kbps = 0.0 if bandwidth_kbps is None else bandwidth_kbps
        self.device_load = device_load or 0.0
        self.online = decided_by != "offline" if online is None else bool(online)
        self.cloud_infer_ms = cloud_infer_ms or 0.0
        self.cloud_pressure = cloud_pressure
        return self

    def event(self) -> RecordedEvent:
        """These inputs as a `RecordedEvent`."""
        return RecordedEvent(
            ts=_as_datetime(self.ts),
            policy_version=self.policy_version,
            cohort=self.cohort,
            cell=self.cell,
            task=TaskSignals(
                tokens=self.tokens,
                intent_conf=self.intent_conf,
                lm_conf=self.lm_conf,
                upload_bytes=self.upload_bytes,
            ),
            device=DeviceState.of(self, cloud_pressure=self.cloud_pressure),
            route=self.route,
            decided_by=self.decided_by,
            fallback=self.fallback,
            cache_hit=self.cache_hit,
            ok=self.ok,
            latency_ms=self.latency_ms,
            tokens=self.tokens,
            replayable=self.replayable,
        )
