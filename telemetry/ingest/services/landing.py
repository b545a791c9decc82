"""Landing: validate a batch and make it durable (landed in the database) before the 202."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import psycopg
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from edge_sdk.wire.codec import BatchColumns
from routing_policies.models import Device

from ..columns import accepted
from ..events import BatchContext, TelemetryEvent, decode_batch, encode_landed
from ..models import EventKey, LandedBatch
from ..selectors import VersionCatalog
from ..wakeup import wake_worker

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class IngestResult:
    """What the 202 says: events newly stored, events already stored (or repeated)."""

    accepted: int
    duplicates: int
    batch_id: int | None


def retention_start(now: datetime) -> datetime:
    """The oldest event timestamp still kept (and accepted)."""
    days: int = settings.TELEMETRY_RETENTION_DAYS
    return now - timedelta(days=days)


def _day_numbers(events: dict[str, TelemetryEvent]) -> str:
    """The events' UTC days as days since 1970, an int[] literal."""
    return "{" + ",".join([str(int(e.ts.timestamp()) // 86400) for e in events.values()]) + "}"


def _ledger_insert(events: dict[str, TelemetryEvent]) -> set[str]:
    """Record the events' ids (keyed by hex) in the ledger; the ids that were not there before.

    The ids go in as one array literal, sorted by the database, so that two batches sharing ids
    lock them in the same order (no deadlock); a concurrent request holding the same id makes
    this one wait for its outcome, so an id is new to exactly one of them.
    """
    table = EventKey._meta.db_table
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                f"INSERT INTO {table} (event_id, day) "  # noqa: S608  # table name is ours
                "SELECT id, DATE '1970-01-01' + d FROM unnest(%s::uuid[], %s::int[]) AS u(id, d) "
                "ORDER BY id ON CONFLICT DO NOTHING RETURNING replace(event_id::text, '-', '')",
                ["{" + ",".join(events) + "}", _day_numbers(events)],
            )
            return {row[0] for row in cursor.fetchall()}
        # SQLite: the first INSERT takes the database's write lock, so the rest is serialised.
        new: set[str] = set()
        for hex_id, event in sorted(events.items()):
            cursor.execute(
                f"INSERT OR IGNORE INTO {table} (event_id, day) VALUES (%s, %s)",  # noqa: S608
                [hex_id, event.ts.astimezone(UTC).date().isoformat()],
            )
            if cursor.rowcount == 1:
                new.add(hex_id)
        return new


def _server_cursor() -> psycopg.Cursor[Any]:
    """A server-binding cursor on Django's connection (Django's own cursors bind on the client
    side, which would escape ~100 KB of bytea into ~200 KB of hex text on every request)."""
    connection.ensure_connection()
    raw = connection.connection
    assert raw is not None
    return psycopg.Cursor(raw)


# Table names are ours, not input.
_LEDGER_AND_LANDING_SQL: Final = (
    "WITH new AS ("  # noqa: S608
    f"INSERT INTO {EventKey._meta.db_table} (event_id, day) "
    "SELECT id, DATE '1970-01-01' + d FROM unnest(%s::uuid[], %s::int[]) AS u(id, d) "
    "ORDER BY id ON CONFLICT DO NOTHING RETURNING event_id), "
    f"landed AS (INSERT INTO {LandedBatch._meta.db_table} "
    "(fleet_id, device_pk, received_at, event_count, payload) "
    "SELECT %s, %s, %s, %s, %b WHERE (SELECT count(*) FROM new) = %s RETURNING id) "
    "SELECT (SELECT id FROM landed), CASE WHEN NOT EXISTS (SELECT FROM landed) THEN "
    "(SELECT array_agg(replace(event_id::text, '-', '')) FROM new) END"
)


def _ledger_insert_and_land_all(
    device: Device, now: datetime, ids: list[str], days: str, body: bytes
) -> tuple[int | None, set[str]]:
    """PostgreSQL, one statement: the ledger insert of `ids` (hex, no two alike; `days` their
    UTC days as an int[] literal), and the landing of the whole body when every event is new.
    (landed batch id, new ids); the id is None when some were not new, and the caller lands
    those (re-encoded) in the same transaction.
    """
    # Pipeline mode: the transaction's BEGIN goes in the same round trip as the statement.
    with _server_cursor() as cursor, cursor.connection.pipeline():
        cursor.execute(
            _LEDGER_AND_LANDING_SQL,
            [
                *("{" + ",".join(ids) + "}", days, device.fleet_id, device.pk, now),
                *(len(ids), body, len(ids)),
            ],
        )
        row = cursor.fetchone()
    assert row is not None
    landed_id, new_ids = row
    if landed_id is not None:
        return int(landed_id), set(ids)
    return None, set(new_ids or ())


def _land(device: Device, now: datetime, events: list[TelemetryEvent], payload: bytes) -> int:
    """Insert the landed batch; its id (the payload as a binary parameter on PostgreSQL)."""
    if connection.vendor != "postgresql":
        return LandedBatch.objects.create(
            fleet_id=device.fleet_id,
            device_pk=device.pk,
            received_at=now,
            event_count=len(events),
            payload=payload,
        ).pk
    with _server_cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {LandedBatch._meta.db_table} "  # noqa: S608  # table name is ours
            "(fleet_id, device_pk, received_at, event_count, payload) "
            "VALUES (%s, %s, %s, %s, %b) RETURNING id",
            [device.fleet_id, device.pk, now, len(events), payload],
        )
        row = cursor.fetchone()
    assert row is not None
    return int(row[0])


def telemetry_batch_ingest(
    *,
    device: Device,
    body: bytes,
    now: datetime | None = None,
    read: list[Any] | None = None,
    columns: BatchColumns | None = None,
) -> IngestResult:
    """Validate a device's batch and land its new events durably; names every bad event.

    Raises ValidationFailed (400, nothing stored) or BatchTooLarge (413). Events whose id is
    already stored, or repeated inside the batch, are counted as duplicates and not stored
    again. `read`: the body's events as a column-wise protobuf batch was read into
    (`events.decode_batch`), `body` being its JSON text. `columns`: the body is a column-wise
    protobuf batch, these its columns; checked column by column (`columns.accepted`) and, when
    every event is surely valid and new, landed as it came (protobuf), else read as its JSON
    batch and checked event by event as any body.
    """
    now = now or timezone.now()
    context = BatchContext(
        device_id=device.device_id,
        now=now,
        oldest=retention_start(now),
        versions=VersionCatalog(device.fleet_id),
    )
    if columns is not None and connection.vendor == "postgresql":
        whole = accepted(columns, context)
        if whole is not None:
            with transaction.atomic():
                batch_id, new_ids = _ledger_insert_and_land_all(
                    device, now, whole.ids, whole.days, body
                )
                if batch_id is not None:
                    return _landed(device, batch_id, len(whole.ids), 0)
                # Some were stored before (a batch sent again): the event path, same ledger.
                text, read = columns.json_events()
                events = decode_batch(text, context, read)
                new_events = [e for e in events if e.event_id.hex in new_ids]
                return _land_new(device, now, events, new_events, None)
    if columns is not None:
        body, read = columns.json_events()
    events = decode_batch(body, context, read)
    unique: dict[str, TelemetryEvent] = {}
    for event in events:
        unique.setdefault(event.event_id.hex, event)
    if not unique:
        return IngestResult(accepted=0, duplicates=len(events), batch_id=None)
    with transaction.atomic():
        if connection.vendor == "postgresql" and len(unique) == len(events):
            # The common case, a batch of new events: one statement lands the body as it came.
            ids = list(unique)
            batch_id, new_ids = _ledger_insert_and_land_all(
                device, now, ids, _day_numbers(unique), body
            )
            if batch_id is not None:
                return _landed(device, batch_id, len(events), 0)
        else:
            new_ids = _ledger_insert(unique)
        new_events = [event for hex_id, event in unique.items() if hex_id in new_ids]
        return _land_new(device, now, events, new_events, body)


def _land_new(
    device: Device,
    now: datetime,
    events: list[TelemetryEvent],
    new_events: list[TelemetryEvent],
    body: bytes | None,
) -> IngestResult:
    """Land the batch's new events (in the caller's transaction): `body` (its JSON text) as
    the payload when every event is new, else the new events encoded again."""
    batch_id = None
    if new_events:
        every_event = len(new_events) == len(events)
        payload = encode_landed(new_events, body if every_event else None)
        batch_id = _land(device, now, new_events, payload)
    return _landed(device, batch_id, len(new_events), len(events) - len(new_events))


def _landed(device: Device, batch_id: int | None, accepted: int, duplicates: int) -> IngestResult:
    """The result of a landing (in the caller's transaction): the worker woken at commit."""
    if batch_id is not None:
        landed_id = batch_id
        transaction.on_commit(lambda: wake_worker(landed_id))
    logger.debug(
        "telemetry.batch_landed batch=%s device=%s accepted=%d", batch_id, device.pk, accepted
    )
    return IngestResult(accepted=accepted, duplicates=duplicates, batch_id=batch_id)
