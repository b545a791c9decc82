"""A fleet's telemetry history written straight into a bench database: raw events by COPY,
and the three rollup levels computed in memory (the worker's own `RollupAccumulator`) and
COPYed too. Used by bench/ingest's 24-hour query and by bench/dashboard; the event mix is
bench/ingest's device profiles (`_profiles`, `BenchEvent`).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from .run import BenchEvent, _profiles, _raw_row

# The cell columns of the minute rollup (the hour rollup has `hour` for `minute`).
CELL_COLUMNS = [
    "fleet_id",
    "minute",
    "policy_version",
    "cohort",
    "task_type",
    "latency_budget",
    "privacy_tier",
    "route",
    "segment",
]
FLEET_HOUR_COLUMNS = [
    "fleet_id",
    "hour",
    "policy_version",
    "cohort",
    "route",
    "decided_by",
    "segment",
]
CHUNK = 200_000


def copy_rollups(url: str, table: str, key_columns: list[str], tallies: dict[Any, Any]) -> int:
    """COPY rollup rows (key → tally) into `table` of the database at `url`; how many."""
    import psycopg

    from telemetry.rollups import METRIC_FIELDS
    from telemetry.rollups.schema import HISTOGRAM_FIELDS

    columns = [*key_columns, *METRIC_FIELDS, *HISTOGRAM_FIELDS, "compacted"]
    with psycopg.connect(url) as conn, conn.cursor() as cursor:
        with cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
            for key, tally in tallies.items():
                values = tally.columns()
                copy.write_row(
                    [
                        *key,
                        *(values[name] for name in METRIC_FIELDS),
                        *(json.dumps(values[name]) for name in HISTOGRAM_FIELDS),
                        True,
                    ]
                )
        conn.commit()
    return len(tallies)


def store_history(
    url: str,
    *,
    fleet_id: int,
    total: int,
    start: datetime,
    end: datetime,
    device_id: str,
    segments: Sequence[tuple[int, float]] = (),
) -> dict[str, Any]:
    """`total` events spread evenly from `start` to `end`, raw and rolled up; the counts.

    `segments`: (segment id, share of events): each event is in each segment with that
    probability (drawn apart from the events, so the events are the same with or without),
    counted in its rows as the worker counts it and kept in the raw row's `segments`.
    Deterministic (seeded); the tables are VACUUM ANALYZEd afterwards, as after a day of
    traffic, so the planner sees them as the product would.
    """
    import psycopg

    from telemetry.ingest.services.processing import EVENT_COLUMNS
    from telemetry.rollups import RollupAccumulator

    profiles, weights = _profiles()
    rng = random.Random(2)
    membership = random.Random(5)
    step = (end - start) / total
    accumulator = RollupAccumulator()
    began = time.perf_counter()
    with psycopg.connect(url) as conn, conn.cursor() as cursor:
        with cursor.copy(f"COPY telemetry_event ({', '.join(EVENT_COLUMNS)}) FROM STDIN") as copy:
            for offset in range(0, total, CHUNK):
                size = min(CHUNK, total - offset)
                for index, profile in enumerate(rng.choices(profiles, weights, k=size)):
                    event = BenchEvent(profile, start + step * (offset + index), rng)
                    row = _raw_row(event, fleet_id, device_id, profile.cohort)
                    if segments:
                        ids = tuple(i for i, share in segments if membership.random() < share)
                        accumulator.add(fleet_id, profile.cohort, event, segments=ids)
                        row = (*row[:-1], json.dumps(list(ids)))
                    else:
                        accumulator.add(fleet_id, profile.cohort, event)
                    copy.write_row(row)
                print(f"    … {offset + size:,} events", flush=True)
        conn.commit()
    hour_columns = ["hour" if c == "minute" else c for c in CELL_COLUMNS]
    counts = {
        "events": total,
        "minute_rollup_rows": copy_rollups(
            url, "telemetry_minuterollup", CELL_COLUMNS, accumulator.minutes()
        ),
        "hour_rollup_rows": copy_rollups(
            url, "telemetry_hourrollup", hour_columns, accumulator.hours()
        ),
        "fleet_hour_rollup_rows": copy_rollups(
            url, "telemetry_fleethourrollup", FLEET_HOUR_COLUMNS, accumulator.fleet_hours()
        ),
        "seconds": round(time.perf_counter() - began, 1),
    }
    with psycopg.connect(url, autocommit=True) as conn:
        for table in ("event", "minuterollup", "hourrollup", "fleethourrollup"):
            conn.execute(f"VACUUM ANALYZE telemetry_{table}")
    return counts
