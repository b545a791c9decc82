"""A telemetry batch sent as protobuf or compressed (docs/PROTOCOL.md, "Binary frames and
compression"): turned into the JSON batch it stands for before the JSON path reads it, so the
validation, the limits, the 400 naming `events[n].field`, the landing and the stored payload
are the JSON path's. Refused here only: a body that inflates past MAX_REQUEST_BYTES (413), a
content coding the server does not read (415), bytes that are not gzip, zstd or protobuf (400).
"""

from __future__ import annotations

from django.conf import settings

from controlplane.wire import JSON_MEDIA_TYPE, BodyFormat, BodyRefused, count_refused
from edge_sdk.wire import PROTOBUF_MEDIA_TYPE
from edge_sdk.wire.codec import batch_from_protobuf
from edge_sdk.wire.compression import CODINGS

__all__ = ["ACCEPTS", "BodyFormat", "BodyRefused", "batch_json"]

# On every answer of `POST /api/v1/telemetry`: what the endpoint reads, so that a device learns
# it may send protobuf and compress (`Accept-Post`, and `Accept-Encoding` as RFC 9110 lets a
# server say which codings it reads in requests).
ACCEPTS = {
    "Accept-Post": f"{JSON_MEDIA_TYPE}, {PROTOBUF_MEDIA_TYPE}",
    "Accept-Encoding": ", ".join(CODINGS),
}


def batch_json(body: bytes, body_format: BodyFormat, *, channel: str) -> bytes:
    """The JSON batch of a protobuf or compressed body; BodyRefused (counted) when it is none."""
    limit: int = settings.MAX_REQUEST_BYTES
    try:
        return body_format.json_body(body, limit=limit, to_json=batch_from_protobuf)
    except BodyRefused as refused:
        count_refused(channel, refused.reason)
        raise
