"""What a device sends and asks for, by what the server offers (docs/PROTOCOL.md, "Binary
frames and compression"). Binary is negotiated, never imposed, and JSON stays the default:

- the socket offers the subprotocol `edge-routing.v1.protobuf`; a server that accepts it
  speaks protobuf frames on that socket (`ProtobufChannel`, `frame_text`);
- a poll, and an MQTT device's fetch of an immutable document or delta, asks `Accept:
  application/x-protobuf, application/json;q=0.5` (and the HTTP client's `Accept-Encoding`);
  the answer says in its `Content-Type` what it is (`document_of`, `json_answer`): a document,
  or with `IM: policy-delta` a delta;
- telemetry goes as JSON until an answer of the telemetry endpoint says, in `Accept-Post` and
  `Accept-Encoding`, that the server reads protobuf and which codings (`TelemetryWire`);
- over MQTT, where nothing answers, telemetry is protobuf only when the device's maker chose
  it (`DeviceConfig.wire_format = "protobuf"`), with MQTT 5's content type saying so.

`DeviceConfig.wire_format = "json"` turns all of it off.
"""

from __future__ import annotations

import json
from typing import Any, Final, Literal, Protocol

import msgspec

from edge_sdk.wire import PROTOBUF_MEDIA_TYPE, codec, compression

__all__ = [
    "DOCUMENT_ACCEPT",
    "WIRE_FORMATS",
    "ProtobufChannel",
    "TelemetryWire",
    "WireFormat",
    "document_of",
    "frame_text",
    "json_answer",
]

WireFormat = Literal["auto", "json", "protobuf"]
WIRE_FORMATS: Final = ("auto", "json", "protobuf")
DOCUMENT_ACCEPT: Final = f"{PROTOBUF_MEDIA_TYPE}, application/json;q=0.5"
# Telemetry bodies smaller than this are sent as they are: compressing them saves little.
COMPRESS_FROM_BYTES: Final = 512


def document_of(content_type: str, content: bytes, *, delta: bool = False) -> Any:
    """The document of a poll's 200, or with `delta` the delta of a `226` (protobuf or JSON by
    its `Content-Type`); ValueError when it is neither (counted by the caller as an unusable
    document)."""
    if content_type.partition(";")[0].strip().lower() == PROTOBUF_MEDIA_TYPE:
        if delta:
            return codec.delta_from_protobuf(content)
        return codec.document_from_protobuf(content)
    return json.loads(content)


def json_answer(content_type: str, content: bytes, *, delta: bool) -> bytes:
    """An answer's body as JSON: a protobuf one (by its `Content-Type`; a `PolicyDelta` with
    `delta`, the answer's `IM: policy-delta`, else a `PolicyDocument`) written as the JSON it
    stands for; a JSON one as it is. ValueError: protobuf that is not that message."""
    if content_type.partition(";")[0].strip().lower() != PROTOBUF_MEDIA_TYPE:
        return content
    value = codec.delta_from_protobuf(content) if delta else codec.document_from_protobuf(content)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def frame_text(raw: bytes) -> str | None:
    """A protobuf frame from the server as the JSON text frame it stands for (None: not a
    frame, dropped)."""
    try:
        frame = codec.frame_from_protobuf(raw)
    except codec.WireError:
        return None
    return frame if isinstance(frame, str) else json.dumps(frame, separators=(",", ":"))


class _BinarySocket(Protocol):
    async def send(self, message: bytes, /) -> None: ...


class ProtobufChannel:
    """A socket that speaks protobuf, as the connection's text `Channel`."""

    __slots__ = ("socket",)

    def __init__(self, socket: _BinarySocket) -> None:
        self.socket = socket

    async def send(self, text: str, /) -> None:
        """Send a frame built as JSON text (the `ack`) in protobuf."""
        await self.socket.send(codec.frame_to_protobuf(json.loads(text)))


class TelemetryWire:
    """How this device sends its telemetry batches, learnt from the server's answers."""

    __slots__ = ("coding", "protobuf", "wire_format")

    def __init__(self, wire_format: WireFormat) -> None:
        self.wire_format = wire_format
        self.protobuf = False  # the server said it reads protobuf batches
        self.coding = ""  # the content coding the server said it reads ("" none)

    def learn(self, headers: Any) -> None:
        """Read an answer's `Accept-Post` and `Accept-Encoding` (any mapping of headers)."""
        if self.wire_format == "json":
            return
        accept_post = str(headers.get("Accept-Post", "") or "")
        self.protobuf = PROTOBUF_MEDIA_TYPE in accept_post.lower()
        self.coding = compression.preferred_coding(str(headers.get("Accept-Encoding", "") or ""))

    def http_body(self, body: bytes) -> tuple[bytes, dict[str, str]]:
        """The body of `POST /api/v1/telemetry` (a JSON batch) as the server reads it best,
        with its Content-Type (and Content-Encoding)."""
        content, media = body, "application/json"
        if self.protobuf:
            converted = _protobuf_batch(body)
            if converted is not None:
                content, media = converted, PROTOBUF_MEDIA_TYPE
        headers = {"Content-Type": media}
        if self.coding and len(content) >= COMPRESS_FROM_BYTES:
            content = compression.compress(content, self.coding)
            headers["Content-Encoding"] = self.coding
        return content, headers

    def mqtt_payload(self, body: bytes) -> tuple[bytes, str]:
        """An MQTT telemetry payload and its content type: protobuf only when chosen."""
        if self.wire_format == "protobuf":
            converted = _protobuf_batch(body)
            if converted is not None:
                return converted, PROTOBUF_MEDIA_TYPE
        return body, "application/json"


def _protobuf_batch(body: bytes) -> bytes | None:
    """The JSON batch in protobuf, or None when the schema cannot hold it (sent as JSON)."""
    try:
        return codec.batch_to_protobuf(msgspec.json.decode(body))
    except (codec.NotRepresentable, msgspec.DecodeError):
        return None
