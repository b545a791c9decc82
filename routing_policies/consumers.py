"""DeviceConsumer: the `/ws/device/` end of PROTOCOL.md.

`hello` → `policy` or `up_to_date`; `ack` recorded; a malformed frame → `error` and the socket
stays open; a bad or revoked token → close 4401. Pushes arrive through the process's PushHub;
the consumer decides whether a fleet-wide change concerns its device. No business logic here:
reads and writes go through `fleet_ops` and `selectors`.
"""

import asyncio
import json
import logging
import time
from collections import OrderedDict
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from . import selectors, services
from .assignment import FleetAssignment
from .models import Device, FleetRouting, PolicyVersion
from .push import get_hub

logger = logging.getLogger(__name__)

MAX_FRAME_BYTES = 64 * 1024
CLOSE_UNAUTHORISED = 4401
CLOSE_SUPERSEDED = 4409
_FIELD_LIMITS = {"sdk": 64, "platform": 64, "model": 128}


class DocumentCache:
    """Published documents as JSON text, per process: versions never change, so never stale."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._texts: OrderedDict[tuple[int, int], str] = OrderedDict()
        self._pending: dict[tuple[int, int], asyncio.Future[str | None]] = {}

    async def body(self, fleet_id: int, number: int) -> str | None:
        """The document of `number` without its outer braces, ready to splice into a frame."""
        key = (fleet_id, number)
        text: str | None = self._texts.get(key)
        if text is not None:
            self._texts.move_to_end(key)
            return text
        pending = self._pending.get(key)
        if pending is not None:
            result: str | None = await pending
            return result
        future: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._pending[key] = future
        try:
            text = await database_sync_to_async(_document_body)(fleet_id, number)
            if text is not None:
                self._texts[key] = text
                while len(self._texts) > self.size:
                    self._texts.popitem(last=False)
            future.set_result(text)
            return text
        except BaseException as error:
            future.set_exception(error)
            raise
        finally:
            del self._pending[key]


def _document_body(fleet_id: int, number: int) -> str | None:
    version = (
        PolicyVersion.objects.select_related("fleet")
        .filter(fleet_id=fleet_id, number=number)
        .first()
    )
    if version is None:
        return None
    return json.dumps(selectors.version_document(version=version), separators=(",", ":"))[1:-1]


documents = DocumentCache()


def policy_frame(body: str, rollout: dict[str, Any] | None) -> str:
    """`{"type":"policy", …document…, "rollout": …}` built from cached text."""
    return f'{{"type":"policy",{body},"rollout":{json.dumps(rollout, separators=(",", ":"))}}}'


def _bearer(scope: dict[str, Any]) -> str:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer":
                return str(token).strip()
    return ""


def _connect_state(token: str) -> dict[str, Any] | None:
    device = services.device_authenticate(token)
    if device is None:
        return None
    services.device_seen(device_pk=device.pk, connected=True)
    return {
        "pk": device.pk,
        "device_id": device.device_id,
        "fleet_id": device.fleet_id,
        "token_hash": device.token_hash,
    }


def _hello_state(device_pk: int, fleet_id: int, fields: dict[str, Any]) -> dict[str, Any]:
    services.device_seen(device_pk=device_pk, **fields)
    assignment = selectors.fleet_assignment(fleet_id)
    routing = (
        FleetRouting.objects.filter(fleet_id=fleet_id)
        .only("cloud_pressure_offset", "cloud_pressure_until")
        .first()
    )
    pressure = None
    if routing and routing.cloud_pressure_until:
        remaining = routing.cloud_pressure_until.timestamp() - time.time()
        if remaining >= 1:
            pressure = {"theta_offset": routing.cloud_pressure_offset, "ttl_s": int(remaining)}
    revoked = Device.objects.filter(pk=device_pk, revoked_at__isnull=False).exists()
    return {"assignment": assignment, "pressure": pressure, "revoked": revoked}


class DeviceConsumer(AsyncWebsocketConsumer):  # type: ignore[misc]  # channels is untyped
    """One connected device."""

    # No channel layer: pushes come from the process's PushHub (one Redis subscription per
    # process), not from a per-socket channel-layer receive, which is what made fan-out slow.
    channel_layer_alias = "__device_push_uses_push_hub__"

    fleet_id: int
    device_pk: int
    device_id: str
    token_hash: str

    async def connect(self) -> None:
        self.authenticated = False
        self.assigned_version: int | None = None
        self.hello_done = False
        state = await database_sync_to_async(_connect_state)(_bearer(self.scope))
        await self.accept()
        if state is None:
            await self.close(code=CLOSE_UNAUTHORISED)
            return
        self.authenticated = True
        self.device_pk, self.device_id = state["pk"], state["device_id"]
        self.fleet_id, self.token_hash = state["fleet_id"], state["token_hash"]
        await get_hub().register(self)

    async def disconnect(self, code: int) -> None:
        if not getattr(self, "authenticated", False):
            return
        hub = get_hub()
        still_mine = hub.targets.get(self.fleet_id, {}).get(self.device_pk) is self
        hub.unregister(self)
        if still_mine:
            await database_sync_to_async(services.device_seen)(
                device_pk=self.device_pk, connected=False
            )

    async def send_error(self, code: str, detail: str) -> None:
        """PROTOCOL.md `error` frame; the socket stays open."""
        await self.send(text_data=json.dumps({"type": "error", "code": code, "detail": detail}))

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if not self.authenticated:
            return
        if text_data is None:
            await self.send_error("bad_message", "frames must be JSON text, not binary")
            return
        if len(text_data) > MAX_FRAME_BYTES:
            await self.send_error("too_large", f"frame over {MAX_FRAME_BYTES} bytes")
            return
        try:
            message = json.loads(text_data)
        except ValueError:
            await self.send_error("bad_message", "frame is not valid JSON")
            return
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
        if device_id != self.device_id:
            await self.send_error(
                "device_mismatch", "hello names another device than the token's; ignored"
            )
            return
        reported = message.get("policy_version")
        if reported is not None and (isinstance(reported, bool) or not isinstance(reported, int)):
            await self.send_error("bad_message", "policy_version must be a whole number or null")
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
        state = await database_sync_to_async(_hello_state)(self.device_pk, self.fleet_id, fields)
        if state["revoked"]:
            await self.close(code=CLOSE_UNAUTHORISED)
            return
        assignment: FleetAssignment = state["assignment"]
        self.assigned_version = assignment.version_for(self.device_id)
        self.hello_done = True
        if self.assigned_version is not None and reported != self.assigned_version:
            rollout = (
                {"id": assignment.rollout_id, "stage": assignment.percent}
                if assignment.rollout_id is not None
                else None
            )
            await self.send_policy(self.assigned_version, rollout)
        else:
            await self.send(
                text_data=json.dumps({"type": "up_to_date", "version": self.assigned_version})
            )
        if state["pressure"]:
            await self.send(text_data=json.dumps({"type": "cloud_pressure", **state["pressure"]}))

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
        await database_sync_to_async(services.device_ack)(device_pk=self.device_pk, version=version)

    async def send_policy(
        self, number: int, rollout: dict[str, Any] | None, cache: dict[Any, str] | None = None
    ) -> None:
        """Send the policy document of version `number`."""
        key = (number, json.dumps(rollout))
        frame = cache.get(key) if cache is not None else None
        if frame is None:
            body = await documents.body(self.fleet_id, number)
            if body is None:
                logger.error("device.policy_missing fleet=%s version=%s", self.fleet_id, number)
                return
            frame = policy_frame(body, rollout)
            if cache is not None:
                cache[key] = frame
        await self.send(text_data=frame)

    async def on_push(self, message: dict[str, Any]) -> None:
        """A fleet-wide change: act only when it concerns this device."""
        kind = message.get("kind")
        if kind == "assignment":
            if not self.hello_done:
                return  # it learns its assignment at hello
            assignment = message.get("_parsed")
            if assignment is None:
                assignment = message["_parsed"] = FleetAssignment.from_dict(message["assignment"])
            version = assignment.version_for(self.device_id)
            if version is None or version == self.assigned_version:
                return
            self.assigned_version = version
            await self.send_policy(
                version, message.get("rollout"), message.setdefault("_frames", {})
            )
        elif kind == "revoke":
            if message.get("token_hash") in (None, self.token_hash):
                await self.close(code=CLOSE_UNAUTHORISED)
        elif kind == "cloud_pressure":
            ttl = int(float(message.get("until", 0)) - time.time())
            if ttl >= 1:
                await self.send(
                    text_data=json.dumps(
                        {
                            "type": "cloud_pressure",
                            "theta_offset": message.get("theta_offset"),
                            "ttl_s": ttl,
                        }
                    )
                )
        elif kind == "superseded":
            await self.close(code=CLOSE_SUPERSEDED)
