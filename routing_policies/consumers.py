"""DeviceConsumer: the `/ws/device/` end of PROTOCOL.md.

`hello` → `policy` or `up_to_date`; `ack` recorded; a malformed frame → `error` and the socket
stays open; a bad or revoked token → close 4401. Pushes arrive through the process's PushHub;
the consumer decides whether a fleet-wide change concerns its device. No business logic here:
reads go through `selectors` and `services.device_authenticate`; the per-socket writes
(presence, hello fields, acks: through `services.devices_seen` and `devices_ack`) are
batched for all sockets of the process by `DeviceStore`.
"""

import asyncio
import json
import logging
import time
from collections import OrderedDict
from typing import Any

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncWebsocketConsumer
from django.utils import timezone

from controlplane import json_guard

from . import selectors, services
from .assignment import FleetAssignment, bucket
from .models import Device, PolicyVersion
from .push import get_hub, publish_many

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


def _connect_states(tokens: list[str]) -> list[dict[str, Any] | None]:
    """Authenticate sockets; supersede their devices' older sockets.

    A device is online only once this socket says `hello` (`_hello_states`): until then it is
    marked offline, as its only live socket (the new one supersedes any older) has not.
    """
    devices = [services.device_authenticate(token) for token in tokens]
    live = [device for device in devices if device is not None]
    if not live:
        return [None] * len(tokens)
    services.devices_seen(device_pks=[device.pk for device in live], connected=False)
    connected_at = time.time()
    # Tell every process: an older socket of this device, wherever it is (a half-open one on
    # another process after a network switch), is superseded. Locally `register` does it too.
    publish_many(
        [
            {
                "kind": "superseded",
                "fleet_id": device.fleet_id,
                "device_pk": device.pk,
                "connected_at": connected_at,
            }
            for device in live
        ]
    )
    return [
        None
        if device is None
        else {
            "pk": device.pk,
            "device_id": device.device_id,
            "fleet_id": device.fleet_id,
            "token_hash": device.token_hash,
            "connected_at": connected_at,
        }
        for device in devices
    ]


def _hello_states(requests: list[tuple[int, int, dict[str, Any], str]]) -> list[dict[str, Any]]:
    """Record what each device said and mark it online; read its fleet's assignment (once per
    fleet) and more. Only a socket whose token is still the device's current one, not
    revoked, counts: one opened with a token that a re-enrolment replaced is told `revoked`."""
    by_fields: dict[tuple[tuple[str, Any], ...], list[str]] = {}
    for _, _, fields, token_hash in requests:
        by_fields.setdefault(tuple(sorted(fields.items())), []).append(token_hash)
    for key, token_hashes in by_fields.items():
        services.devices_seen_by_token(token_hashes=token_hashes, connected=True, **dict(key))
    fleets = {
        fleet_id: (selectors.fleet_assignment(fleet_id), selectors.cloud_pressure_live(fleet_id))
        for fleet_id in {fleet_id for _, fleet_id, _, _ in requests}
    }
    current = set(
        Device.objects.filter(
            token_hash__in=[token_hash for _, _, _, token_hash in requests],
            revoked_at__isnull=True,
        ).values_list("token_hash", flat=True)
    )
    return [
        {
            "assignment": fleets[fleet_id][0],
            "pressure": fleets[fleet_id][1],
            "revoked": token_hash not in current,
        }
        for _, fleet_id, _, token_hash in requests
    ]


# The order of writes within a batch: a socket's disconnect before a (newer) connect.
_BATCH_KINDS = ("disconnect", "connect", "hello", "ack")
# Requests per batch: a connect costs a query each (token lookup), the rest are set-based.
BATCH_LIMITS = {"disconnect": 5000, "connect": 500, "hello": 1000, "ack": 5000}
# Acks are held this long for company: the acks of a push arrive within milliseconds of each
# other while the push is still reaching the rest of the fleet, and one UPDATE for all of them
# then costs less CPU than a batch every few acks. (Each keeps its own receipt time.)
# Disconnects are not held: a device that drops and reconnects at once to another process
# must not be marked offline after its new socket was marked online.
LAZY_WRITE_DELAY_S = 0.1


def _write_batch(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
    if batch["disconnect"]:
        # By token hash, not device: a socket opened with a token that a re-enrolment has
        # since replaced must not mark offline the device now connected with the new token.
        Device.objects.filter(token_hash__in=batch["disconnect"]).update(
            connected=False, last_seen_at=timezone.now()
        )
    if batch["ack"]:
        services.devices_ack(acks=batch["ack"])
    return {
        "disconnect": [None] * len(batch["disconnect"]),
        "connect": _connect_states(batch["connect"]) if batch["connect"] else [],
        "hello": _hello_states(batch["hello"]) if batch["hello"] else [],
        "ack": [None] * len(batch["ack"]),
    }


class DeviceStore:
    """The database work of all sockets of this process (connect, hello, ack), in batches.

    After a push or a restart thousands of devices connect, say hello and ack within seconds.
    One `database_sync_to_async` call per socket runs them one after another on Django's one
    sync thread, each on a new PostgreSQL connection (CONN_MAX_AGE=0): measured with
    bench/fanout, 5,000 devices took minutes to connect and a restart did not recover in
    two minutes. Here a request that arrives while a batch is being written waits for the
    next batch and goes with the others, in a few set-based statements on one connection;
    on a quiet server a request is written at once, alone, except an ack, which waits up to
    LAZY_WRITE_DELAY_S for the others of its push.
    """

    def __init__(self) -> None:
        self._queues: dict[str, list[tuple[Any, asyncio.Future[Any] | None]]] = {
            kind: [] for kind in _BATCH_KINDS
        }
        self._worker: asyncio.Task[None] | None = None
        self._lazy_timer: asyncio.TimerHandle | None = None
        self._lazy_loop: asyncio.AbstractEventLoop | None = None
        self.batches_written = 0  # for the logs and the tests: how many batches went out

    def _submit(self, kind: str, item: Any, wait: bool) -> "asyncio.Future[Any] | None":
        loop = asyncio.get_running_loop()
        future = loop.create_future() if wait else None
        self._queues[kind].append((item, future))
        if self._draining(loop):
            return future  # the running drain takes it in its next batch
        if wait or kind != "ack":
            self._start_drain()
        elif self._lazy_timer is None or self._lazy_loop is not loop:
            self._lazy_timer = loop.call_later(LAZY_WRITE_DELAY_S, self._start_drain)
            self._lazy_loop = loop
        return future

    def _draining(self, loop: asyncio.AbstractEventLoop) -> bool:
        # A worker of another (since closed) event loop never finishes: not draining.
        return (
            self._worker is not None and not self._worker.done() and self._worker.get_loop() is loop
        )

    def _start_drain(self) -> None:
        loop = asyncio.get_running_loop()
        if self._lazy_timer is not None:
            self._lazy_timer.cancel()
            self._lazy_timer = None
        if not self._draining(loop):
            self._worker = loop.create_task(self._drain())

    async def connect(self, token: str) -> dict[str, Any] | None:
        """The socket's device (see `_connect_states`), or None for a bad or revoked token."""
        future = self._submit("connect", token, wait=True)
        assert future is not None
        result: dict[str, Any] | None = await future
        return result

    async def hello(
        self, device_pk: int, fleet_id: int, fields: dict[str, Any], token_hash: str
    ) -> dict[str, Any]:
        """Record the hello (the device is online from now); the fleet's assignment, cloud
        pressure and the revoked flag (the token is revoked or no longer the device's)."""
        future = self._submit("hello", (device_pk, fleet_id, fields, token_hash), wait=True)
        assert future is not None
        result: dict[str, Any] = await future
        return result

    def ack(self, device_pk: int, version: int) -> None:
        """Record the ack, with the moment it arrived (in the next batch; nothing to wait for)."""
        self._submit("ack", (device_pk, version, timezone.now()), wait=False)

    def disconnected(self, token_hash: str) -> None:
        """Mark offline the device whose current token this is (in the next batch)."""
        self._submit("disconnect", token_hash, wait=False)

    async def _drain(self) -> None:
        while any(self._queues.values()):
            batch: dict[str, list[tuple[Any, asyncio.Future[Any] | None]]] = {}
            for kind, queue in self._queues.items():
                limit = BATCH_LIMITS[kind]
                batch[kind], self._queues[kind] = queue[:limit], queue[limit:]
            items = {kind: [item for item, _ in entries] for kind, entries in batch.items()}
            try:
                results = await database_sync_to_async(_write_batch)(items)
                self.batches_written += 1
            except Exception as error:
                logger.warning(
                    "device.batch_failed sizes=%s",
                    {kind: len(entries) for kind, entries in batch.items()},
                    exc_info=True,
                )
                for entries in batch.values():
                    for _, future in entries:
                        if future is not None and not future.done():
                            future.set_exception(error)
                continue
            for kind, entries in batch.items():
                for (_, future), result in zip(entries, results[kind], strict=True):
                    if future is not None and not future.done():
                        future.set_result(result)


store = DeviceStore()


async def push_assignment(message: dict[str, Any], targets: list[Any]) -> None:
    """A fleet's assignment changed: decide per socket, build each frame once, write.

    The hub's handler for `assignment` pushes (instead of one `on_push` per socket): the
    assignment is parsed once, a device's bucket is kept per rollout salt, the frame of each
    version is built once from the per-process document cache, and the writes go out through
    `PushHub.deliver` without a task per socket.
    """
    started = time.time()
    assignment = FleetAssignment.from_dict(message["assignment"])
    rollout = message.get("rollout")
    changed: dict[int, list[DeviceConsumer]] = {}
    for target in targets:
        if target.closing:
            continue
        if not target.hello_done:
            target.pushes_before_hello += 1  # it learns its assignment at hello
            continue
        version = target.version_under(assignment)
        if version is not None and version != target.assigned_version:
            changed.setdefault(version, []).append(target)
    hub = get_hub()
    written = waited = 0
    for version, group in changed.items():
        fleet_id = group[0].fleet_id
        body = await documents.body(fleet_id, version)
        if body is None:
            logger.error("device.policy_missing fleet=%s version=%s", fleet_id, version)
            continue
        # One ASGI event shared by all the sockets (the server still frames it per socket).
        event = {"type": "websocket.send", "text": policy_frame(body, rollout)}
        waited += hub.deliver(target.push_policy(version, event) for target in group)
        written += len(group)
    sent_at = message.get("sent_at")
    logger.info(
        "push.assignment fleet=%s sockets=%d written=%d waited=%d since_sent_ms=%.1f took_ms=%.1f",
        message.get("fleet_id"),
        len(targets),
        written,
        waited,
        (started - sent_at) * 1000 if isinstance(sent_at, int | float) else -1.0,
        (time.time() - started) * 1000,
    )


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
        self.closing = False
        self.superseded = False
        self.connected_at = 0.0
        # Pushes that arrived while a hello was reading the assignment (see on_hello).
        self.pushes_before_hello = 0
        # One decision-and-send at a time: a hello's answer and a push never cross on the wire.
        self.send_lock = asyncio.Lock()
        # The device's bucket under the last rollout salt seen (see `version_under`).
        self.bucket_salt: str | None = None
        self.bucket = 0
        state = await store.connect(_bearer(self.scope))
        await self.accept()
        if state is None:
            await self.close(code=CLOSE_UNAUTHORISED)
            return
        self.authenticated = True
        self.device_pk, self.device_id = state["pk"], state["device_id"]
        self.fleet_id, self.token_hash = state["fleet_id"], state["token_hash"]
        self.connected_at = state["connected_at"]
        hub = get_hub()
        hub.fleet_handlers.setdefault("assignment", push_assignment)
        await hub.register(self)

    async def disconnect(self, code: int) -> None:
        if not getattr(self, "authenticated", False):
            return
        hub = get_hub()
        still_mine = hub.targets.get(self.fleet_id, {}).get(self.device_pk) is self
        hub.unregister(self)
        # A superseded socket's device is connected through its newer socket: still online.
        if still_mine and not self.superseded:
            store.disconnected(self.token_hash)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        # Channels' own loop waits for each frame with `asyncio.wait` and a new task, to
        # listen to a channel layer as well; this consumer has none (see above). A plain
        # receive loop costs less per frame (thousands at once: the acks after a push) and
        # keeps one task fewer per socket.
        self.scope = scope
        self.channel_layer = None
        self.base_send = send
        try:
            while True:
                await self.dispatch(await receive())
        except StopConsumer:
            pass

    async def dispatch(self, message: dict[str, Any]) -> None:
        # Channels closes stale database connections before every handler, a trip to the sync
        # thread for each frame (thousands at once: the acks after a push). This consumer uses
        # the database only through `store` and `documents`, whose database_sync_to_async
        # calls do that themselves.
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    def version_under(self, assignment: FleetAssignment) -> int | None:
        """`assignment.version_for(device_id)`, with the bucket kept per rollout salt.

        The bucket (PROTOCOL.md) is a SHA-256 of salt and device id, and a rollout keeps its
        salt for all stages: kept here, a stage change hashes nothing for a connected device.
        """
        if assignment.candidate is None or not 0 < assignment.percent < 100:
            return assignment.version_for(self.device_id)
        if self.bucket_salt != assignment.salt:
            self.bucket = bucket(assignment.salt, self.device_id)
            self.bucket_salt = assignment.salt
        return assignment.candidate if self.bucket < assignment.percent * 100 else assignment.stable

    async def push_policy(self, version: int, event: dict[str, Any]) -> None:
        """Send a pushed `policy` frame (an ASGI event shared by all sockets) if still news."""
        if self.send_lock.locked():
            # A hello is being answered: after it, and only if its answer was older.
            async with self.send_lock:
                if self.closing or version == self.assigned_version:
                    return
                self.assigned_version = version
                await self.base_send(event)
            return
        if self.closing or version == self.assigned_version:
            return
        # Without taking the lock, which is not needed here: the hub runs this eagerly, so
        # nothing runs between the decision and the write; and if the socket is not writable,
        # a hello's answer waits behind this frame for the same socket.
        self.assigned_version = version
        await self.base_send(event)

    async def close_once(self, code: int) -> None:
        """Close with `code`; a second close (two pushes racing) would be an ASGI error."""
        if not self.closing:
            self.closing = True
            await self.close(code=code)

    async def send_error(self, code: str, detail: str, field: str | None = None) -> None:
        """PROTOCOL.md `error` frame (with the `field` at fault when known); the socket stays
        open."""
        frame: dict[str, Any] = {"type": "error", "code": code, "detail": detail}
        if field is not None:
            frame["field"] = field
        await self.send(text_data=json.dumps(frame))

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if not self.authenticated:
            return
        if text_data is None:
            await self.send_error("bad_message", "frames must be JSON text, not binary")
            return
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
        assigned = self.version_under(assignment)
        self.assigned_version = assigned
        self.hello_done = True
        async with self.send_lock:
            if assigned is not None and reported != assigned:
                rollout = (
                    {"id": assignment.rollout_id, "stage": assignment.percent}
                    if assignment.rollout_id is not None
                    else None
                )
                await self.send_policy(assigned, rollout)
            else:
                await self.send(text_data=json.dumps({"type": "up_to_date", "version": assigned}))
            pressure = state["pressure"]
            ttl = int(pressure["until"] - time.time()) if pressure else 0
            if ttl >= 1:
                await self.send(
                    text_data=json.dumps(
                        {
                            "type": "cloud_pressure",
                            "theta_offset": pressure["theta_offset"],
                            "ttl_s": ttl,
                        }
                    )
                )

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
        if self.closing:
            return
        if kind == "assignment":
            if not self.hello_done:
                self.pushes_before_hello += 1
                return  # it learns its assignment at hello
            assignment = message.get("_parsed")
            if assignment is None:
                assignment = message["_parsed"] = FleetAssignment.from_dict(message["assignment"])
            version = self.version_under(assignment)
            if version is None or version == self.assigned_version:
                return
            async with self.send_lock:
                if version == self.assigned_version:
                    return
                self.assigned_version = version
                await self.send_policy(
                    version, message.get("rollout"), message.setdefault("_frames", {})
                )
        elif kind == "revoke":
            if message.get("token_hash") in (None, self.token_hash):
                await self.close_once(CLOSE_UNAUTHORISED)
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
            # From another process (or this one's hub): only a socket older than the new one.
            newer_at = message.get("connected_at")
            if isinstance(newer_at, int | float) and newer_at <= self.connected_at:
                return
            self.superseded = True
            await self.close_once(CLOSE_SUPERSEDED)
