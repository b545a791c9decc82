"""Day partitions of the raw event table on PostgreSQL (other databases keep one plain table).

`telemetry_event` is `PARTITION BY RANGE (ts)` with one partition per UTC day, named
`telemetry_event_pYYYYMMDD`. Partitions are created ahead by Celery beat (and on demand by the
worker) and dropped whole once past retention: dropping a day costs no DELETE and no VACUUM.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import date, datetime, timedelta

from django.db import connection

PARENT = "telemetry_event"
_NAME_RE = re.compile(r"\Atelemetry_event_p(\d{8})\Z")


def partition_name(day: date) -> str:
    """The partition holding events of `day` (UTC)."""
    return f"{PARENT}_p{day:%Y%m%d}"


def is_partitioned() -> bool:
    """True on PostgreSQL, where the raw table is partitioned by day."""
    return connection.vendor == "postgresql"


def partitions_existing() -> dict[date, str]:
    """The day partitions that exist, by day."""
    if not is_partitioned():
        return {}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = %s",
            [PARENT],
        )
        names = [row[0] for row in cursor.fetchall()]
    out: dict[date, str] = {}
    for name in names:
        match = _NAME_RE.match(name)
        if match:
            out[datetime.strptime(match.group(1), "%Y%m%d").date()] = name
    return out


def partitions_create(days: Iterable[date]) -> list[str]:
    """Create the partitions of these days that do not exist yet; their names."""
    if not is_partitioned():
        return []
    existing = partitions_existing()
    created = []
    with connection.cursor() as cursor:
        for day in sorted(set(days)):
            if day in existing:
                continue
            name = partition_name(day)
            start = f"{day.isoformat()} 00:00:00+00"
            end = f"{(day + timedelta(days=1)).isoformat()} 00:00:00+00"
            cursor.execute(
                f"CREATE TABLE IF NOT EXISTS {name} PARTITION OF {PARENT} "
                f"FOR VALUES FROM ('{start}') TO ('{end}')"
            )
            created.append(name)
    return created


def partitions_drop_before(day: date) -> list[str]:
    """Drop every partition of a day before `day`; their names."""
    if not is_partitioned():
        return []
    dropped = []
    with connection.cursor() as cursor:
        for partition_day, name in sorted(partitions_existing().items()):
            if partition_day < day:
                cursor.execute(f"DROP TABLE IF EXISTS {name}")
                dropped.append(name)
    return dropped
