"""Reading rollup rows: the SQL, typed rows, and the SQLite/PostgreSQL differences, here only.

Every reader of rollups (the metrics API, the dashboard, alert rules and rollout guards) reads
through `read_rows`, which selects the level's time and key columns, every summed metric column
(METRIC_FIELDS) and the sketches asked for, so that no caller keeps a column list of its own;
the compaction reads the rows it merges through `rows_to_compact`.
What differs by database stays here: a bucket time is read as whole seconds since the epoch
(`EXTRACT(EPOCH …)` on PostgreSQL, `strftime('%s', …)` on SQLite, which stores text) and
typed as an aware UTC datetime; a stored histogram comes back as text or as a mapping, and a
bad one reads as empty (sketch.stored_histogram); the compaction's rows are locked on
PostgreSQL only.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import connection

from .schema import (
    ALL_DEVICES,
    FIELD_INDEX,
    HISTOGRAM_FIELDS,
    METRIC_FIELDS,
    SCORE_HISTOGRAMS,
    Level,
)
from .sketch import stored_histogram

_EVENTS = FIELD_INDEX["events"]
_C2D = FIELD_INDEX["fallback_cloud_to_device"]
_D2C = FIELD_INDEX["fallback_device_to_cloud"]
_ERRORS = FIELD_INDEX["errors"]
_VIOLATIONS = FIELD_INDEX["privacy_violations"]


@dataclass(slots=True)
class RollupRow:
    """One stored rollup row: its bucket, keys, summed columns and the sketches read.

    A key a level does not keep reads as "" (the cell at the fleet-hour level, the deciding
    step at the cell levels). `sums` holds the METRIC_FIELDS columns in that order; a sketch
    that was not read is None.
    """

    bucket: datetime
    # ROW_KEYS, in that order:
    policy_version: int
    cohort: str
    route: str
    task_type: str
    latency_budget: str
    privacy_tier: str
    decided_by: str
    sums: tuple[float, ...]
    latency_hist: dict[str, int] | None = None
    score_hist: dict[str, int] | None = None
    # Scores of the events reporting `refine_changed`, and of those the cloud kept (read with
    # the score histogram).
    refine_hist: dict[str, int] | None = None
    kept_hist: dict[str, int] | None = None

    @property
    def minute(self) -> datetime:
        """The bucket's start (the name the alert rules use for minute rows)."""
        return self.bucket

    @property
    def events(self) -> int:
        """How many events the row counts."""
        return int(self.sums[_EVENTS])

    @property
    def fallbacks(self) -> int:
        """Fallbacks either way."""
        return int(self.sums[_C2D] + self.sums[_D2C])

    @property
    def errors(self) -> int:
        """Failed tasks."""
        return int(self.sums[_ERRORS])

    @property
    def privacy_violations(self) -> int:
        """Privacy violations (PROTOCOL.md)."""
        return int(self.sums[_VIOLATIONS])


def _epoch_seconds(column: str) -> str:
    """SQL for a bucket time as whole seconds since the epoch: read as an integer, it costs a
    fraction of what parsing the timestamp text costs (Django's PostgreSQL loader is Python)."""
    if connection.vendor == "postgresql":
        return f"CAST(EXTRACT(EPOCH FROM {column}) AS bigint)"
    return f"CAST(strftime('%%s', {column}) AS integer)"  # %% : the query takes parameters


def as_utc(value: Any) -> datetime:
    """A stored bucket time as an aware UTC datetime (SQLite hands back text or naive UTC)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)  # type: ignore[no-any-return]
    return value.astimezone(UTC)  # type: ignore[no-any-return]


# Every row is read with the same layout: a key the level does not keep is selected as ''.
ROW_KEYS = (
    "policy_version",
    "cohort",
    "route",
    "task_type",
    "latency_budget",
    "privacy_tier",
    "decided_by",
)
_FIRST_SUM = 1 + len(ROW_KEYS)
_AFTER_SUMS = _FIRST_SUM + len(METRIC_FIELDS)


def read_rows(
    level: Level,
    *,
    fleet_id: int,
    since: datetime,
    until: datetime | None = None,
    where: Mapping[str, Any] | None = None,
    latency: bool = False,
    latency_since: datetime | None = None,
    scores: bool = False,
    ordered: bool = False,
    segment: int = ALL_DEVICES,
) -> Iterator[RollupRow]:
    """The fleet's rows of `level` with `since <= bucket` (and `<= until`), in one query.

    `segment`: the rows of one of the fleet's named segments (its id), or, by default, the
    all-devices rows (every event once); never both, so no figure counts an event twice.

    `where`: key column → value, all must match. `latency`: with the latency sketches (only of
    the rows from `latency_since` on, when given); `scores`: with the score histograms (of all
    events, of those reporting `refine_changed` and of those kept: schema.SCORE_HISTOGRAMS);
    `ordered`: by bucket. The query runs at once; each row is typed (its sketches decoded) as
    it is iterated, so a fold holds one decoded row at a time, not the window's.
    """
    adapt = connection.ops.adapt_datetimefield_value
    time_column = level.time_column
    keys = [name if name in level.key_columns else "''" for name in ROW_KEYS]
    columns = [_epoch_seconds(time_column), *keys, *METRIC_FIELDS]
    params: list[Any] = []
    if latency and latency_since is not None:
        columns.append(f"CASE WHEN {time_column} >= %s THEN latency_hist END")
        params.append(adapt(latency_since))
    elif latency:
        columns.append("latency_hist")
    if scores:
        columns.extend(SCORE_HISTOGRAMS)
    conditions = ["fleet_id = %s", "segment = %s", f"{time_column} >= %s"]
    params += [fleet_id, segment, adapt(since)]
    if until is not None:
        conditions.append(f"{time_column} <= %s")
        params.append(adapt(until))
    for name, value in (where or {}).items():
        if name not in level.key_columns or name == "segment":
            raise ValueError(f"{level.name} rollups have no column {name!r}")
        conditions.append(f"{name} = %s")
        params.append(value)
    sql = (
        f"SELECT {', '.join(columns)} FROM {level.table} "  # noqa: S608  # names are ours
        f"WHERE {' AND '.join(conditions)}"
    )
    if ordered:
        sql += f" ORDER BY {time_column}"
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        fetched = cursor.fetchall()
    return _typed(fetched, latency=latency, scores=scores)


def _typed(fetched: list[Any], *, latency: bool, scores: bool) -> Iterator[RollupRow]:
    score_at = _AFTER_SUMS + 1 if latency else _AFTER_SUMS
    from_epoch = datetime.fromtimestamp
    for row in fetched:
        yield RollupRow(
            from_epoch(row[0], UTC),
            row[1],
            row[2],
            row[3],
            row[4],
            row[5],
            row[6],
            row[7],
            row[_FIRST_SUM:_AFTER_SUMS],
            stored_histogram(row[_AFTER_SUMS]) if latency else None,
            stored_histogram(row[score_at]) if scores else None,
            stored_histogram(row[score_at + 1]) if scores else None,
            stored_histogram(row[score_at + 2]) if scores else None,
        )


def rows_to_compact(level: Level, *, max_buckets: int) -> list[dict[str, Any]]:
    """Every row of up to `max_buckets` (fleet, time) buckets of `level` that hold partial
    rows, oldest buckets first, as column dicts (id, fleet_id, time, keys, METRIC_FIELDS, the
    sketches read as `stored_histogram`, compacted); locked for update on PostgreSQL. Two
    queries; for the compaction, inside its transaction."""
    table, time_column = level.table, level.time_column
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT DISTINCT fleet_id, {time_column} FROM {table} "  # noqa: S608
            f"WHERE NOT compacted ORDER BY {time_column} LIMIT %s",
            [max_buckets],
        )
        buckets = cursor.fetchall()
        if not buckets:
            return []
        columns = ["id", "fleet_id", time_column, *level.key_columns, *METRIC_FIELDS]
        columns += [*HISTOGRAM_FIELDS, "compacted"]
        pairs = ", ".join(["(%s, %s)"] * len(buckets))
        lock = " FOR UPDATE" if connection.vendor == "postgresql" else ""
        cursor.execute(
            f"SELECT {', '.join(columns)} FROM {table} "  # noqa: S608
            f"WHERE (fleet_id, {time_column}) IN ({pairs}){lock}",
            [value for bucket in buckets for value in bucket],
        )
        rows = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
    for row in rows:
        row[time_column] = as_utc(row[time_column])
        for name in HISTOGRAM_FIELDS:
            row[name] = stored_histogram(row[name])
    return rows
