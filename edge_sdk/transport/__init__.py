"""Transports: how a device's push channel to the control plane is carried.

The connection (`edge_sdk.connection.Connection`) keeps at most one session of its
`Transport` open at a time. A transport opens the channel, says `hello` (the message is the
connection's: `Link.hello()`), hands each text frame it receives to `Link.on_frame`, keeps
the channel alive, and says how the session ended (`SessionEnd`). What the frames mean
(PROTOCOL.md: `policy`, `up_to_date`, `cloud_pressure`, `error`, the `ack`), enrolment, the
polling fallback, back-off and the device's state belong to the connection, so a second
transport (e.g. MQTT) plugs in beside `WebSocketTransport` without touching them.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from edge_sdk.backoff import Backoff

__all__ = ["Channel", "DeviceRevoked", "Link", "SessionEnd", "Transport"]

# "refused": the server answered the opening with an HTTP status (the connection polls);
# "failed": no connection, or it broke; "closed": closed by the server or by `stop`;
# "superseded": another connection of this device id replaced it (never reconnect);
# "offline": `readings().online` went false (the session set the state "offline").
SessionEnd = Literal["refused", "failed", "closed", "superseded", "offline"]


class DeviceRevoked(Exception):
    """The server refused the device token."""


class Channel(Protocol):
    """An open push channel: the connection answers on it (the `ack` of a policy)."""

    async def send(self, text: str, /) -> None:
        """Send one text frame."""
        ...


class Link(Protocol):
    """What a transport's session needs from the device's connection."""

    last_error: str | None  # a session that fails says why here
    stopping: bool  # `stop` was called: end the session

    def online(self) -> bool:
        """The app's `readings().online` now (False when the readings fail)."""
        ...

    def auth_headers(self) -> dict[str, str]:
        """The device token as an HTTP header."""
        ...

    def hello(self) -> dict[str, Any]:
        """The `hello` message to send first (with the version the device runs now)."""
        ...

    def opened(self) -> None:
        """A session's channel is open (the connection counts reconnects)."""
        ...

    def set_state(self, state: str) -> None:
        """Change the device's connection state (see `edge_sdk.connection.STATES`)."""
        ...

    async def on_frame(self, channel: Channel, frame: str) -> bool:
        """Handle one frame from the server; True when it answered `hello` (in sync)."""
        ...


class Transport(Protocol):
    """One kind of push channel (WebSocket today)."""

    @property
    def channel(self) -> Channel | None:
        """The open channel of the current session; None between sessions."""
        ...

    async def session(self, link: Link, backoff: Backoff) -> SessionEnd:
        """One session, from opening to its end: `hello` first, then every frame to
        `link.on_frame` (`backoff.reset()` once in sync) until it ends; DeviceRevoked when
        the server refuses the token."""
        ...

    async def close(self) -> None:
        """Close the current session's channel, if any (`stop`); never raises."""
        ...
