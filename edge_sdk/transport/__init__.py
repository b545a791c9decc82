"""Transports: how a device's push channel to the control plane is carried.

The connection (`edge_sdk.connection.Connection`) keeps at most one session of its
`Transport` open at a time. A transport opens the channel, says `hello` (the message is the
connection's: `Link.hello()`), hands each text frame it receives to `Link.on_frame`, keeps
the channel alive, and says how the session ended (`SessionEnd`). What the frames mean
(PROTOCOL.md: `policy`, `up_to_date`, `cloud_pressure`, `error`, the `ack`), enrolment, the
polling fallback, back-off and the device's state belong to the connection, so a second
transport (`MqttTransport`, edge_sdk.transport.mqtt) plugs in beside `WebSocketTransport`
without touching them. A transport that also carries telemetry has `publish_telemetry`
(`CarriesTelemetry`): the connection then sends the telemetry batches through it.

A device picks its transport by name (`Device(..., transport="websocket")`) through
`transport_named`: a new kind is one more entry in `_FACTORIES`, imported only when chosen
(a device that never uses it needs none of its libraries).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, Literal, Protocol, runtime_checkable

import httpx

from edge_sdk.backoff import Backoff
from edge_sdk.config import DeviceConfig
from edge_sdk.delta_sync import PolicyDeltas

__all__ = [
    "DEFAULT_TRANSPORT",
    "TRANSPORTS",
    "CarriesTelemetry",
    "Channel",
    "DeviceRevoked",
    "Link",
    "SessionEnd",
    "Transport",
    "transport_named",
]

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
    token: str | None  # the device token (the MQTT password)
    http: httpx.AsyncClient | None  # the device's HTTP client (MQTT: the document fallback)
    deltas: PolicyDeltas  # policy deltas: applies them, counts them (edge_sdk.delta_sync)

    def online(self) -> bool:
        """The app's `readings().online` now (False when the readings fail)."""
        ...

    def weak_link(self) -> bool:
        """The readings say the link is weak: deltas first (edge_sdk.delta_sync)."""
        ...

    def auth_headers(self) -> dict[str, str]:
        """The device token as an HTTP header."""
        ...

    def fleet(self) -> str | None:
        """The fleet's slug: configured, answered by enrolment, or named by the stored policy."""
        ...

    def hello(self) -> dict[str, Any]:
        """The `hello` message to send first (with the version the device runs now)."""
        ...

    def policy_document(self) -> Mapping[str, Any] | None:
        """The document of the version the device runs now (None before the first)."""
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
    """One kind of push channel (the WebSocket, MQTT)."""

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


@runtime_checkable
class CarriesTelemetry(Protocol):
    """A transport that carries the telemetry batches too (MQTT: the device's telemetry topic)."""

    async def publish_telemetry(self, body: bytes, /) -> bool:
        """Send one batch (the body of POST /api/v1/telemetry); True once it is durable."""
        ...


def _websocket(config: DeviceConfig) -> Transport:
    from edge_sdk.transport.websocket import WebSocketTransport

    return WebSocketTransport(config)


def _mqtt(config: DeviceConfig) -> Transport:
    from edge_sdk.transport.mqtt import MqttTransport

    return MqttTransport(config)


_FACTORIES: Final[dict[str, Callable[[DeviceConfig], Transport]]] = {
    "websocket": _websocket,
    "mqtt": _mqtt,
}
TRANSPORTS: Final = tuple(_FACTORIES)  # the names `transport_named` knows
DEFAULT_TRANSPORT: Final = "websocket"


def transport_named(name: str, config: DeviceConfig) -> Transport:
    """A new transport of the kind called `name` for this device; ValueError naming the
    kinds this SDK has when it has no such kind."""
    factory = _FACTORIES.get(name) if isinstance(name, str) else None
    if factory is None:
        raise ValueError(f"unknown transport {name!r}: this SDK has {', '.join(TRANSPORTS)}")
    return factory(config)
