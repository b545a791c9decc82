"""The binary encoding of the protocol (docs/PROTOCOL.md, "Binary frames and compression").

`edge_sdk/wire/*.proto` are the schemas (the policy document, the `/ws/device/` frames and
the telemetry batch); `*_pb2.py` are generated from them by `make proto` and checked in. The
`codec` turns each protobuf message into exactly the JSON value it stands for, and back, so the
server validates a protobuf body by the JSON rules it already has and a device decides from a
protobuf document exactly as from the JSON one. `compression` inflates a body with a cap on its
inflated size, and compresses one. Shared by the server and the SDK, like `decision`.
"""

from __future__ import annotations

from typing import Final

__all__ = ["PROTOBUF_MEDIA_TYPE", "PROTOBUF_SUBPROTOCOL"]

# The media type of a protobuf body (Content-Type, Accept; MQTT 5's content type).
PROTOBUF_MEDIA_TYPE: Final = "application/x-protobuf"
# The WebSocket subprotocol of protobuf frames on `/ws/device/`.
PROTOBUF_SUBPROTOCOL: Final = "edge-routing.v1.protobuf"
