"""A telemetry batch sent as protobuf or compressed (docs/PROTOCOL.md, "Binary frames and
compression"): turned into the JSON batch it stands for before the JSON path reads it, so the
validation, the limits, the 400 naming `events[n].field`, the landing and the stored payload
are the JSON path's. A column-wise protobuf batch is passed on as its columns (its shape
checked), which the landing checks column by column (`columns.accepted`) and lands as it came
when every event is surely valid, else reads as its JSON batch.
Refused here only: a body that inflates past MAX_REQUEST_BYTES (413), a content coding the
server does not read (415), bytes that are not gzip, zstd or protobuf (400).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from controlplane.exceptions import error_body
from controlplane.wire import JSON_MEDIA_TYPE, BodyFormat, BodyRefused, count_refused
from edge_sdk.wire import PROTOBUF_MEDIA_TYPE
from edge_sdk.wire.codec import (
    BatchColumns,
    TooManyEvents,
    batch_columns_from_protobuf,
    batch_events_from_protobuf,
)
from edge_sdk.wire.compression import CODINGS

__all__ = ["ACCEPTS", "BodyFormat", "BodyRefused", "batch_json"]

# On every answer of `POST /api/v1/telemetry`: what the endpoint reads, so that a device learns
# it may send protobuf and compress (`Accept-Post`, and `Accept-Encoding` as RFC 9110 lets a
# server say which codings it reads in requests).
ACCEPTS = {
    "Accept-Post": f"{JSON_MEDIA_TYPE}, {PROTOBUF_MEDIA_TYPE}",
    "Accept-Encoding": ", ".join(CODINGS),
}


def batch_json(
    body: bytes, body_format: BodyFormat, *, channel: str
) -> tuple[bytes, list[Any] | None, BatchColumns | None]:
    """(body, events as read, columns) of a protobuf or compressed body: for a column-wise
    protobuf batch, the inflated protobuf bytes and its columns
    (`codec.batch_columns_from_protobuf`); else its JSON batch, with the events of a row-wise
    one as read (None). BodyRefused (counted) when it is no batch."""
    limit: int = settings.MAX_REQUEST_BYTES
    read: list[list[Any] | None] = [None]
    columns: list[BatchColumns | None] = [None]

    def to_json(raw: bytes) -> bytes:
        columns[0] = batch_columns_from_protobuf(raw)
        if columns[0] is not None:
            return raw
        text, read[0] = batch_events_from_protobuf(raw)
        return text

    try:
        return body_format.json_body(body, limit=limit, to_json=to_json), read[0], columns[0]
    except TooManyEvents as exc:
        # The JSON path's 413 for over MAX_EVENTS events (`fastpath.ingest_outcome`).
        refused = BodyRefused((413, error_body("payload_too_large", str(exc)), {}), "too_large")
        count_refused(channel, refused.reason)
        raise refused from None
    except BodyRefused as refused:
        count_refused(channel, refused.reason)
        raise
