"""DeviceConsumer: the `/ws/device/` end of PROTOCOL.md.

`hello` → `policy` or `up_to_date`; `ack` recorded; a malformed frame → `error` and the socket
stays open; a bad or revoked token → close 4401. Pushes reach it from the process's `PushHub`,
one method per kind. No ORM and no business logic here: the database work goes through the
batched `store` (devices.services) and the `documents` cache (policies.selectors), the version
choice through `assignment.DeviceBucket`, every frame through `frames`.
"""

import asyncio
import logging
from typing import Any

from channels.consumer import get_handler_name
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncWebsocketConsumer

from controlplane import json_guard

from ..assignment import DeviceBucket, FleetAssignment
from ..segments.rules import AttributeProblem, attributes_parse
from ..validation import MAX_VERSION
from . import binary, frames
from .deltas import policy_frame_text
from .hub import CLOSE_SUPERSEDED, CLOSE_UNAUTHORISED, get_hub
from .store import store

logger = logging.getLogger(__name__)

MAX_FRAME_BYTES = 64 * 1024
_FIELD_LIMITS = {"sdk": 64, "platform": 64, "model": 128}


def _bearer(scope: dict[str, Any]) -> str:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer":
                return str(token).strip()
    return ""


class DeviceConsumer(AsyncWebsocketConsumer):  # type: ignore[misc]  # channels is untyped
    """One connected device."""

    # No channel layer: pushes come from the process's PushHub (one Redis subscription per
    # process), not from a per-socket channel-layer receive, which is what made fan-out slow.
    channel_layer_alias = "__device_push_uses_push_hub__"

    fleet_id: int
    device_pk: int
    device_id: str
    token_hash: str
    binary = False  # the socket speaks protobuf frames (set in `connect`)

    # --- the socket ------------------------------------------------------------------------

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        # A plain receive loop instead of Channels' own, which waits for each frame with
        # `asyncio.wait` and a new task to listen to a channel layer this consumer has none of
        # (bench/fanout: thousands of acks arrive at once after a push; docs/capacity.md).
        self.scope = scope
        self.channel_layer = None
        self.base_send = send
        try:
            while True:
                await self.dispatch(await receive())
        except StopConsumer:
            pass

    async def dispatch(self, message: dict[str, Any]) -> None:
        # Without Channels' close of stale database connections before every handler (a trip
        # to the sync thread per frame; bench/fanout): this consumer reaches the database only
        # through `store` and `documents`, whose database_sync_to_async calls do that.
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    async def connect(self) -> None:
        self.authenticated = False
        self.assigned_version: int | None = None
        self.hello_done = False
        self.closing = False
        self.superseded = False
        self.connected_at = 0.0
        # Pushes that arrived while a hello was reading the assignment (see `on_hello`).
        self.pushes_before_hello = 0
        # Policy deltas (push/deltas.py): whether its hello said `"delta": true`, and the
        # version it holds (the one its hello named, then each it acks).
        self.takes_deltas = False
        self.held_version: int | None = None
        # One decision-and-send at a time: a hello's answer and a push never cross on the wire.
        self.send_lock = asyncio.Lock()
        # Protobuf frames when the device offers the subprotocol (`binary`); JSON text else.
        self.binary = binary.PROTOBUF_SUBPROTOCOL in self.scope.get("subprotocols", ())
        state = await store.connect(_bearer(self.scope))
        await self.accept(subprotocol=binary.PROTOBUF_SUBPROTOCOL if self.binary else None)
        if state is None:
            await self.close(code=CLOSE_UNAUTHORISED)
            return
        self.authenticated = True
        self.device_pk, self.device_id = state["pk"], state["device_id"]
        self.fleet_id, self.token_hash = state["fleet_id"], state["token_hash"]
        self.connected_at = state["connected_at"]
        self.bucket = DeviceBucket(self.device_id)
        await get_hub().register(self)

    async def disconnect(self, code: int) -> None:
        if not getattr(self, "authenticated", False):
            return
        hub = get_hub()
        still_mine = hub.holds(self)
        hub.unregister(self)
        # A superseded socket's device is connected through its newer socket: still online.
        if still_mine and not self.superseded:
            store.disconnected(self.token_hash)

    async def close_once(self, code: int) -> None:
        """Close with `code`; a second close (two pushes racing) would be an ASGI error."""
        if not self.closing:
            self.closing = True
            await self.close(code=code)

    async def send_error(self, code: str, detail: str, field: str | None = None) -> None:
        """PROTOCOL.md `error` frame; the socket stays open."""
        await self.send(text_data=frames.error_frame(code, detail, field))

    async def send(
        self, text_data: str | None = None, bytes_data: bytes | None = None, close: bool = False
    ) -> None:
        # Every frame is built as JSON text (`frames`); a protobuf socket gets its protobuf form.
        if self.binary and text_data is not None:
            text_data, bytes_data = None, binary.frame_bytes(text_data)
        await super().send(text_data=text_data, bytes_data=bytes_data, close=close)

    # --- frames from the device ------------------------------------------------------------

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if not self.authenticated:
            return
        if text_data is None:
            if not self.binary:
                await self.send_error("bad_message", "frames must be JSON text, not binary")
                return
            frame = binary.frame_of(bytes_data or b"", MAX_FRAME_BYTES)
            if isinstance(frame, binary.Refused):
                await self.send_error(*frame)
                return
            if isinstance(frame, dict):
                await self.handle(frame)
                return
            text_data = frame  # a `json` frame: read as a text frame
        # Characters undercount bytes (up to 4 per character); encode only when it matters.
        if len(text_data) > MAX_FRAME_BYTES or (
            len(text_data) > MAX_FRAME_BYTES // 4 and len(text_data.encode()) > MAX_FRAME_BYTES
        ):
            await self.send_error("too_large", f"frame over {MAX_FRAME_BYTES} bytes")
            return
        try:
            message = json_guard.loads(text_data)
        except json_guard.JsonRefused as refused:
            # Too deep, NUL / lone surrogate, NaN: refused before any handler (or the database)
            # sees it, naming the field.
            problem = refused.problem
            await self.send_error(
                "bad_message", f"{problem.field or 'frame'}: {problem.message}", field=problem.field
            )
            return
        except ValueError:
            await self.send_error("bad_message", "frame is not valid JSON")
            return
        await self.handle(message)

    async def handle(self, message: Any) -> None:
        """One frame from the device, parsed (from JSON text or protobuf): its type's handler."""
        if not isinstance(message, dict) or not isinstance(message.get("type"), str):
            await self.send_error("bad_message", "frame must be an object with a string `type`")
            return
        handler = {"hello": self.on_hello, "ack": self.on_ack}.get(message["type"])
        if handler is None:
            await self.send_error("unknown_type", f"unknown message type {message['type'][:40]!r}")
            return
        await handler(message)

    async def on_hello(self, message: dict[str, Any]) -> None:
        """Tell the device what it must run (a policy) or that it is up to date."""
        device_id = message.get("device_id")
        if not isinstance(device_id, str):
            await self.send_error("bad_message", "device_id must be a string")
            return
        if device_id != self.device_id:
            await self.send_error(
                "device_mismatch", "hello names another device than the token's; ignored"
            )
            return
        reported = message.get("policy_version")
        if reported is not None and (
            isinstance(reported, bool)
            or not isinstance(reported, int)
            or not 0 <= reported <= MAX_VERSION
        ):
            await self.send_error(
                "bad_message",
                f"policy_version must be a whole number 0-{MAX_VERSION} or null",
                field="policy_version",
            )
            return
        accepts_delta = message.get("delta", False)
        if not isinstance(accepts_delta, bool):
            await self.send_error("bad_message", "delta must be true or false", field="delta")
            return
        fields: dict[str, Any] = {"reported_version": reported}
        for name, limit in _FIELD_LIMITS.items():
            value = message.get(name)
            if value is not None:
                if not isinstance(value, str) or len(value) > limit:
                    await self.send_error(
                        "bad_message", f"{name} must be a string of at most {limit}"
                    )
                    return
                fields[name] = value
        if message.get("attributes") is not None:  # left out: the device's stay as they are
            try:
                fields["attributes"] = attributes_parse(message["attributes"])
            except AttributeProblem as problem:
                field = f"attributes.{problem.field}" if problem.field else "attributes"
                await self.send_error("bad_message", f"{field}: {problem.message}", field=field)
                return
        # A push that arrives while the assignment is being read may describe a change the read
        # did not see yet (its commit came just after); before hello it is dropped, so read
        # again until no push slipped in. Pushes after `hello_done` go the normal way. (A second
        # hello on the same socket re-reads too, so it cannot undo a push that came meanwhile.)
        self.hello_done = False
        for _ in range(3):
            seen = self.pushes_before_hello
            state = await store.hello(self.device_pk, self.fleet_id, fields, self.token_hash)
            if self.pushes_before_hello == seen:
                break
        if state["revoked"]:
            await self.close_once(CLOSE_UNAUTHORISED)
            return
        assignment: FleetAssignment = state["assignment"]
        self.bucket.attributes = state["attributes"]
        assigned = self.bucket.version_under(assignment)
        self.assigned_version = assigned
        self.takes_deltas, self.held_version = accepts_delta, reported
        self.hello_done = True
        async with self.send_lock:
            if assigned is not None and reported != assigned:
                await self._send_policy(assigned, frames.rollout_of(assignment))
            else:
                await self.send(text_data=frames.up_to_date_frame(assigned))
            pressure = state["pressure"]
            text = frames.cloud_pressure_frame(**pressure) if pressure else None
            if text is not None:
                await self.send(text_data=text)

    async def on_ack(self, message: dict[str, Any]) -> None:
        """Record that the device applied a version it was assigned."""
        version = message.get("version")
        if isinstance(version, bool) or not isinstance(version, int):
            await self.send_error("bad_message", "ack needs a whole-number `version`")
            return
        if version != self.assigned_version:
            await self.send_error(
                "not_assigned", f"version {version} is not assigned to this device; ack ignored"
            )
            return
        # Written in the next batch (see DeviceStore): a burst of acks after a push is a
        # few UPDATEs, not one trip to the database each while the push is going out.
        store.ack(self.device_pk, version)
        self.held_version = version  # the device holds it now: the next delta is from it

    async def _send_policy(self, number: int, rollout: dict[str, Any] | None) -> None:
        text = await policy_frame_text(self.fleet_id, number, self.delta_base, rollout)
        if text is None:
            logger.error("device.policy_missing fleet=%s version=%s", self.fleet_id, number)
            return
        await self.send(text_data=text)

    # --- pushes from the hub (PushTarget) --------------------------------------------------

    @property
    def delta_base(self) -> int | None:
        """The version a delta for this device starts from; None: whole documents only."""
        return self.held_version if self.takes_deltas else None

    def version_to_push(self, assignment: FleetAssignment) -> int | None:
        """The version to send for this assignment, or None: no news, closing, or before hello
        (then the device learns its assignment at hello, which reads it again)."""
        if self.closing:
            return None
        if not self.hello_done:
            self.pushes_before_hello += 1
            return None
        version = self.bucket.version_under(assignment)
        return None if version is None or version == self.assigned_version else version

    async def push_policy(self, version: int, event: dict[str, Any]) -> None:
        """Send a pushed `policy` frame (an ASGI event shared by all sockets) if still news."""
        if self.send_lock.locked():
            # A hello is being answered: after it, and only if its answer was older.
            async with self.send_lock:
                if self.closing or version == self.assigned_version:
                    return
                self.assigned_version = version
                await self.base_send(binary.binary_event(event) if self.binary else event)
            return
        if self.closing or version == self.assigned_version:
            return
        # Without the lock (bench/fanout: a lock per socket per push, docs/capacity.md): the
        # hub runs this eagerly, so nothing runs between the decision and the write; and if
        # the socket is not writable, a hello's answer waits behind this frame.
        self.assigned_version = version
        await self.base_send(binary.binary_event(event) if self.binary else event)

    async def push_text(self, text: str) -> None:
        """Send a frame as it is (the hub built it once for all sockets)."""
        if not self.closing:
            await self.send(text_data=text)

    async def revoke(self, token_hash: str | None) -> None:
        """Close with 4401 when the revoked token is this socket's (None: any)."""
        if not self.closing and token_hash in (None, self.token_hash):
            await self.close_once(CLOSE_UNAUTHORISED)

    async def supersede(self, newer_connected_at: float | None) -> None:
        """Close with 4409, unless this socket is the newer one (from another process's
        connect, or from this hub's when the same device connects twice)."""
        if self.closing:
            return
        if newer_connected_at is not None and newer_connected_at <= self.connected_at:
            return
        self.superseded = True
        await self.close_once(CLOSE_SUPERSEDED)
