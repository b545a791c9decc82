"""Protobuf frames on `/ws/device/` (docs/PROTOCOL.md, "Binary frames and compression"): a
socket opened with the subprotocol `edge-routing.v1.protobuf` sends and receives binary
messages, each a `Frame` of edge_sdk/wire/edge_routing.proto. Only the boundary changes: a frame
received is decoded to the JSON object it stands for and handled as a text frame is (the same
checks and `error` answers); a frame sent is built as JSON text (`frames`) and encoded here,
once per distinct frame however many sockets it goes to."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any, NamedTuple

from controlplane import json_guard
from controlplane.wire import count_refused
from edge_sdk.wire import PROTOBUF_SUBPROTOCOL
from edge_sdk.wire.codec import WireError, frame_from_protobuf, frame_to_protobuf

__all__ = ["PROTOBUF_SUBPROTOCOL", "Refused", "binary_event", "frame_bytes", "frame_of"]


class Refused(NamedTuple):
    """Why a binary frame was dropped: the `error` frame's code, detail and field."""

    code: str
    detail: str
    field: str | None = None


def frame_of(raw: bytes, limit: int) -> dict[str, Any] | str | Refused:
    """The frame a binary message stands for: a JSON object, the JSON text of a `json` frame
    (read as a text frame), or why it is refused (counted for /metrics)."""
    if len(raw) > limit:
        count_refused("websocket", "too_large")
        return Refused("too_large", f"frame over {limit} bytes")
    try:
        frame = frame_from_protobuf(raw)
    except WireError as error:
        count_refused("websocket", "malformed_protobuf")
        return Refused("bad_message", f"frame is not a protobuf Frame: {error}"[:300])
    if isinstance(frame, str):
        return frame
    # Strings may hold NUL (protobuf allows it); numbers NaN: the JSON guard's rules apply.
    problem = json_guard.value_problem(frame)
    if problem is not None:
        count_refused("websocket", "refused_value")
        return Refused(
            "bad_message", f"{problem.field or 'frame'}: {problem.message}", problem.field
        )
    return frame


@lru_cache(maxsize=64)
def frame_bytes(text: str) -> bytes:
    """A frame built as JSON text (`frames`), as a protobuf `Frame`."""
    return frame_to_protobuf(json.loads(text))


def binary_event(event: dict[str, Any]) -> dict[str, Any]:
    """An ASGI `websocket.send` event of a text frame, as the same frame in protobuf."""
    return {"type": "websocket.send", "bytes": frame_bytes(event["text"])}
