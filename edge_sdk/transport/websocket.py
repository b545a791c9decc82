"""`WebSocketTransport`: the device socket of PROTOCOL.md (`/ws/device/`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Final

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI
from websockets.typing import Subprotocol

from edge_sdk.backoff import Backoff
from edge_sdk.config import DeviceConfig
from edge_sdk.transport import Channel, DeviceRevoked, Link, SessionEnd
from edge_sdk.wire import PROTOBUF_SUBPROTOCOL
from edge_sdk.wire.codec import frame_to_protobuf
from edge_sdk.wire.negotiation import ProtobufChannel, frame_text

__all__ = ["CLOSE_SUPERSEDED", "CLOSE_UNAUTHORISED", "MAX_FRAME_BYTES", "WebSocketTransport"]

CLOSE_UNAUTHORISED: Final = 4401
CLOSE_SUPERSEDED: Final = 4409
MAX_FRAME_BYTES: Final = 4 * 1024 * 1024
_OFFERED: Final = [Subprotocol(PROTOBUF_SUBPROTOCOL)]


class WebSocketTransport:
    """Sessions over one WebSocket each, with our own keepalive (no extra task per socket)."""

    __slots__ = ("config", "socket")

    def __init__(self, config: DeviceConfig) -> None:
        self.config = config
        self.socket: ClientConnection | None = None  # open during a session

    @property
    def channel(self) -> Channel | None:
        """The open socket of the current session; None between sessions."""
        return self.socket

    async def session(self, link: Link, backoff: Backoff) -> SessionEnd:
        """One socket, from connect to close (see `Transport.session`)."""
        config = self.config
        try:
            ws = await connect(
                config.ws_url,
                additional_headers=link.auth_headers(),
                user_agent_header=config.sdk,
                open_timeout=config.http_timeout_s,
                ping_interval=None,  # our own keepalive below: no extra task per socket
                close_timeout=2,
                max_size=MAX_FRAME_BYTES,
                compression=None,
                proxy=None,
                # Protobuf frames when the server accepts it (docs/PROTOCOL.md, "Binary frames").
                subprotocols=None
                if config.wire_format == "json"
                else [Subprotocol(PROTOBUF_SUBPROTOCOL)],
            )
        except InvalidStatus as error:
            status = error.response.status_code
            if status == 401:
                raise DeviceRevoked("socket upgrade refused with 401") from None
            link.last_error = f"socket upgrade refused with {status}"
            return "refused"
        except (OSError, TimeoutError, InvalidHandshake, InvalidURI) as error:
            link.last_error = f"socket: {error!r}"
            return "failed"
        self.socket = ws
        link.opened()
        try:
            if ws.subprotocol == PROTOBUF_SUBPROTOCOL:
                await ws.send(frame_to_protobuf(link.hello()))
                return await self._receive(ws, link, backoff, ProtobufChannel(ws))
            await ws.send(json.dumps(link.hello()))
            return await self._receive(ws, link, backoff, ws)
        except ConnectionClosed as closed:
            code = closed.rcvd.code if closed.rcvd is not None else None
            if code == CLOSE_UNAUTHORISED:
                raise DeviceRevoked("socket closed with 4401") from None
            if code == CLOSE_SUPERSEDED:
                link.last_error = "superseded by a newer connection of this device (4409)"
                return "superseded"
            link.last_error = f"socket closed ({code})"
            return "closed"
        except (OSError, TimeoutError) as error:
            link.last_error = f"socket: {error!r}"
            return "failed"
        finally:
            self.socket = None
            await _quietly_close(ws)

    async def _receive(
        self, ws: ClientConnection, link: Link, backoff: Backoff, channel: Channel
    ) -> SessionEnd:
        """Frames until stopped or offline; a ping after `keepalive_s` of silence, and no
        pong within `keepalive_s` ends the session (TimeoutError)."""
        config = self.config
        last_frame = time.monotonic()
        while not link.stopping:
            if not link.online():
                link.set_state("offline")
                return "offline"
            try:
                async with asyncio.timeout(config.online_check_s):
                    frame = await ws.recv()
            except TimeoutError:
                if time.monotonic() - last_frame >= config.keepalive_s:
                    pong = await ws.ping()
                    async with asyncio.timeout(config.keepalive_s):
                        await pong
                    last_frame = time.monotonic()
                continue
            last_frame = time.monotonic()
            if isinstance(frame, bytes):  # a protobuf socket's frame (else: dropped)
                if channel is ws:
                    continue
                # A binary message that is not a `Frame` (truncated, garbage, a delta past the
                # schema's limits) is counted and dropped as an unreadable text frame is.
                frame = frame_text(frame) or ""
            if await link.on_frame(channel, frame):
                backoff.reset()
        return "closed"

    async def close(self) -> None:
        """Close the socket of the current session, if any."""
        ws, self.socket = self.socket, None
        if ws is not None:
            await _quietly_close(ws)


async def _quietly_close(ws: ClientConnection) -> None:
    with contextlib.suppress(Exception):
        await ws.close()
