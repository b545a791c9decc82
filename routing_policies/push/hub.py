"""The process's push hub: its connected devices by fleet, one Redis subscription, a handler per
message kind, the heartbeat and the reconcile (docs/capacity.md, "How a push travels").

Every process keeps its own sockets and hears each change once on the push channel; it works
out which of its devices the change concerns and writes only to those. Redis pub/sub delivers
at most once, so the hub also reconciles its fleets every PUSH_RECONCILE_S and after a lost
subscription: a lost push is late, never lost.
"""

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol

import redis.asyncio as aioredis
from channels.db import database_sync_to_async
from django.conf import settings

from ..assignment import FleetAssignment
from ..devices.selectors import fleet_sockets_state
from ..devices.services import devices_seen_by_token
from . import frames
from .deltas import policy_frame_text
from .eager import EagerSender
from .publish import deliver_locally, push_channel

logger = logging.getLogger(__name__)

HEARTBEAT_S = 30.0
CLOSE_UNAUTHORISED = 4401
CLOSE_SUPERSEDED = 4409
_HEARTBEAT_BATCH = 5000


class PushTarget(Protocol):
    """What the hub needs of a connected device (the DeviceConsumer)."""

    fleet_id: int
    device_pk: int
    token_hash: str  # of the token the socket was opened with
    hello_done: bool  # the socket said `hello`: only then is its device online
    closing: bool  # being closed (revoked, superseded): no longer its device's socket
    delta_base: int | None  # the version it holds when it takes deltas (push/deltas.py)

    def version_to_push(self, assignment: FleetAssignment) -> int | None:
        """The version to send this device for `assignment`, or None when it is no news."""

    async def push_policy(self, version: int, event: dict[str, Any]) -> None:
        """Send a `policy` frame (one ASGI event shared by the sockets), if still news."""

    async def push_text(self, text: str) -> None:
        """Send a frame as it is (cloud pressure)."""

    async def revoke(self, token_hash: str | None) -> None:
        """Close the socket if it was opened with this token (None: whatever its token)."""

    async def supersede(self, newer_connected_at: float | None) -> None:
        """Close the socket if it is older than the device's socket connected then."""


Handler = Callable[[dict[str, Any], list[PushTarget]], Awaitable[None]]


class PushHub:
    """This process's connected devices by fleet, fed by one subscription."""

    def __init__(self) -> None:
        self.targets: dict[int, dict[int, PushTarget]] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.sender = EagerSender()
        self._listener: asyncio.Task[None] | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._reconciler: asyncio.Task[None] | None = None
        # Per fleet: when an assignment was last dispatched here (monotonic clock), and the
        # cloud-pressure nudge (its end, a timestamp) last dispatched here.
        self.dispatched_at: dict[int, float] = {}
        self.pressure_until: dict[int, float] = {}
        self.handlers: dict[str, Handler] = {
            "assignment": self._on_assignment,
            "cloud_pressure": self._on_cloud_pressure,
            "revoke": self._on_revoke,
            "superseded": self._on_superseded,
        }

    # --- sockets ---------------------------------------------------------------------------

    async def register(self, target: PushTarget) -> None:
        """Hold this socket; start listening on first use."""
        await self.start()
        fleet = self.targets.setdefault(target.fleet_id, {})
        previous = fleet.get(target.device_pk)
        fleet[target.device_pk] = target
        if previous is not None and previous is not target:
            # The same device connected twice: the newer socket wins.
            await previous.supersede(None)

    def unregister(self, target: PushTarget) -> None:
        """Forget this socket (only if it is still the registered one for its device)."""
        fleet = self.targets.get(target.fleet_id)
        if fleet is not None and fleet.get(target.device_pk) is target:
            del fleet[target.device_pk]
            if not fleet:
                del self.targets[target.fleet_id]

    def holds(self, target: PushTarget) -> bool:
        """Whether this socket is (still) the registered one of its device."""
        return self.targets.get(target.fleet_id, {}).get(target.device_pk) is target

    # --- messages --------------------------------------------------------------------------

    async def dispatch(self, message: dict[str, Any]) -> None:
        """Hand one message to its kind's handler, with the local sockets it concerns: those
        of its fleet, or the one device it names."""
        fleet_id = message.get("fleet_id")
        if not isinstance(fleet_id, int):
            return
        kind = message.get("kind")
        if kind == "assignment":
            self.dispatched_at[fleet_id] = time.monotonic()
        elif kind == "cloud_pressure" and isinstance(message.get("until"), float):
            self.pressure_until[fleet_id] = message["until"]
        handler = self.handlers.get(str(kind))
        if handler is None:
            return
        fleet = self.targets.get(fleet_id, {})
        device_pk = message.get("device_pk")
        if isinstance(device_pk, int):
            # One device (revoke, superseded: one per connect): a lookup, not a fleet scan.
            target = fleet.get(device_pk)
            targets = [target] if target is not None else []
        else:
            targets = list(fleet.values())
        if targets:
            await handler(message, targets)

    async def _on_assignment(self, message: dict[str, Any], targets: list[PushTarget]) -> None:
        """A fleet's assignment changed: decide per socket, build each version's frame once
        (one ASGI event shared by its sockets), write without a task per socket (bench/fanout:
        no per-socket JSON, no task per socket; docs/capacity.md)."""
        started = time.time()
        assignment = FleetAssignment.from_dict(message["assignment"])
        # Grouped by (version, the version the sockets hold when they take deltas): each
        # group's frame, a delta or the whole document, is built once (push/deltas.py).
        changed: dict[tuple[int, int | None], list[PushTarget]] = {}
        for target in targets:
            version = target.version_to_push(assignment)
            if version is not None:
                changed.setdefault((version, target.delta_base), []).append(target)
        written = waited = 0
        for (version, base), group in changed.items():
            fleet_id = group[0].fleet_id
            text = await policy_frame_text(fleet_id, version, base, frames.rollout_of(assignment))
            if text is None:
                logger.error("device.policy_missing fleet=%s version=%s", fleet_id, version)
                continue
            event = {"type": "websocket.send", "text": text}
            waited += self.sender.send_all(target.push_policy(version, event) for target in group)
            written += len(group)
        sent_at = message.get("sent_at")
        logger.info(
            "push.assignment fleet=%s sockets=%d written=%d waited=%d since_sent_ms=%.1f "
            "took_ms=%.1f",
            message.get("fleet_id"),
            len(targets),
            written,
            waited,
            (started - sent_at) * 1000 if isinstance(sent_at, int | float) else -1.0,
            (time.time() - started) * 1000,
        )

    async def _on_cloud_pressure(self, message: dict[str, Any], targets: list[PushTarget]) -> None:
        until = message.get("until")
        if isinstance(until, bool) or not isinstance(until, int | float):
            return
        text = frames.cloud_pressure_frame(theta_offset=message.get("theta_offset"), until=until)
        if text is not None:
            self.sender.send_all(target.push_text(text) for target in targets)

    async def _on_revoke(self, message: dict[str, Any], targets: list[PushTarget]) -> None:
        token_hash = message.get("token_hash")
        self.sender.send_all(target.revoke(token_hash) for target in targets)

    async def _on_superseded(self, message: dict[str, Any], targets: list[PushTarget]) -> None:
        newer_at = message.get("connected_at")
        newer = float(newer_at) if isinstance(newer_at, int | float) else None
        self.sender.send_all(target.supersede(newer) for target in targets)

    # --- the subscription, heartbeat and reconcile -----------------------------------------

    async def start(self) -> None:
        """Subscribe once per process (Redis mode); remember the loop (embedded mode)."""
        if self.loop is None:
            self.loop = asyncio.get_running_loop()
            deliver_locally(self.dispatch, self.loop)
        if self._heartbeat is None:
            self._heartbeat = self.loop.create_task(self._beat())
        if self._reconciler is None:
            self._reconciler = self.loop.create_task(self._reconcile_every())
        if settings.REDIS_URL and self._listener is None:
            ready: asyncio.Future[None] = self.loop.create_future()
            self._listener = self.loop.create_task(self._listen(ready))
            await ready

    async def _listen(self, ready: "asyncio.Future[None]") -> None:
        backoff = 0.2
        subscribed_before = False
        while True:
            client = aioredis.Redis.from_url(settings.REDIS_URL)
            try:
                pubsub = client.pubsub(ignore_subscribe_messages=True)
                await pubsub.subscribe(push_channel())
                if not ready.done():
                    ready.set_result(None)
                backoff = 0.2
                if subscribed_before:
                    # Pushes published while the subscription was down are lost: catch up.
                    logger.warning("push.resubscribed: reconciling this process's sockets")
                    self._spawn(self.reconcile())
                subscribed_before = True
                async for raw in pubsub.listen():
                    if raw.get("type") != "message":
                        continue
                    try:
                        message = json.loads(raw["data"])
                    except ValueError:
                        logger.warning("push.bad_message")
                        continue
                    await self.dispatch(message)
            except asyncio.CancelledError:
                raise
            except Exception:  # Redis went away: keep serving sockets, resubscribe.
                logger.warning("push.subscription_lost retry_in=%.1fs", backoff, exc_info=True)
                if not ready.done():
                    ready.set_result(None)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
            finally:
                await client.aclose()

    async def _beat(self) -> None:
        """Mark this process's online devices as seen, in one UPDATE every interval: those
        whose socket said `hello`, by the socket's token, so a socket whose token a
        re-enrolment replaced (it is being closed) never marks its device online again."""
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            hashes = [
                target.token_hash
                for fleet in self.targets.values()
                for target in fleet.values()
                if target.hello_done and not target.closing
            ]
            for start in range(0, len(hashes), _HEARTBEAT_BATCH):
                try:
                    await database_sync_to_async(devices_seen_by_token)(
                        token_hashes=hashes[start : start + _HEARTBEAT_BATCH], connected=True
                    )
                except Exception:
                    logger.warning("push.heartbeat_failed", exc_info=True)

    def _spawn(self, work: Coroutine[Any, Any, Any]) -> None:
        self.sender.keep(asyncio.get_running_loop().create_task(work))

    async def _reconcile_every(self) -> None:
        while True:
            await asyncio.sleep(settings.PUSH_RECONCILE_S)
            try:
                await self.reconcile()
            except Exception:  # the database away for a moment: next round
                logger.warning("push.reconcile_failed", exc_info=True)

    async def reconcile(self) -> int:
        """Dispatch each local fleet's assignment as read now; close revoked devices' sockets.

        Returns how many fleets' assignments were dispatched. A fleet whose push arrives while
        its assignment is being read is skipped: that push is at least as new as the read.
        """
        dispatched = 0
        for fleet_id in list(self.targets):
            try:
                dispatched += await self._reconcile_fleet(fleet_id)
            except Exception:  # one fleet's trouble does not hold up the others
                logger.warning("push.reconcile_failed fleet=%s", fleet_id, exc_info=True)
        return dispatched

    async def _reconcile_fleet(self, fleet_id: int) -> int:
        began = time.monotonic()
        local = dict(self.targets.get(fleet_id, {}))
        if not local:
            return 0
        assignment, tokens, pressure = await database_sync_to_async(fleet_sockets_state)(
            fleet_id=fleet_id, device_pks=list(local)
        )
        for device_pk, target in local.items():
            if tokens.get(device_pk) != target.token_hash:  # revoked, or enrolled again since
                # Closed before the assignment below, which then passes the socket by.
                with contextlib.suppress(Exception):  # a socket already gone
                    await target.revoke(target.token_hash)
        if pressure is not None and pressure["until"] != self.pressure_until.get(fleet_id):
            # A live nudge this process never passed on (its push was lost).
            await self.dispatch(frames.cloud_pressure_message(fleet_id=fleet_id, **pressure))
        if self.dispatched_at.get(fleet_id, float("-inf")) >= began:
            return 0
        await self.dispatch(
            frames.assignment_message(fleet_id=fleet_id, assignment=assignment, reconcile=True)
        )
        return 1


_hub: PushHub | None = None
_hub_lock = threading.Lock()


def get_hub() -> PushHub:
    """The process's hub."""
    global _hub
    with _hub_lock:
        if _hub is None:
            _hub = PushHub()
        return _hub
