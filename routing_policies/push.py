"""Push to connected devices: one Redis subscription per process, writing to its local sockets.

Why not a Channels group per fleet or `group_send` per device: measured here before the
project existed, `group_send` per connection took 18–35× a bare websockets broadcast at 5,000
devices. Instead every ASGI process keeps its own sockets in memory, subscribes once to one
Redis channel, and each assignment change is published ONCE (ids and version numbers, never
documents); each process then works out which of its own devices changed and writes to them.

In embedded mode (no REDIS_URL) the same hub dispatches in-process.

Redis pub/sub delivers at most once: a message published while a process's subscription is
down (Redis restarting, a network cut) or while Redis cannot be reached from the publisher is
lost for good. So each process also reconciles: when its subscription comes back, and every
PUSH_RECONCILE_S besides, it reads each of its fleets' current assignment (one query per fleet)
and dispatches it like a push (only devices whose version differs get a frame), passes on a
live cloud-pressure nudge it never passed on, and closes sockets whose device was revoked or
enrolled again meanwhile. A lost push is late by at most
PUSH_RECONCILE_S, never lost; a failed PUBLISH is logged, not raised, since the change it
announces is committed already.
"""

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, Protocol

from django.conf import settings

logger = logging.getLogger(__name__)

PUSH_CHANNEL = "controlplane:push"
HEARTBEAT_S = 30.0


def push_channel() -> str:
    """The pub/sub channel of this deployment.

    Redis pub/sub ignores the database number of REDIS_URL, so two deployments (or two test
    runs) on one Redis with different databases would hear each other's pushes, whose fleet ids
    mean different fleets in their databases. The database number is part of the name.
    """
    from urllib.parse import urlparse

    database = (urlparse(settings.REDIS_URL).path or "/0").strip("/") or "0"
    return f"{PUSH_CHANNEL}:{database}"


class PushTarget(Protocol):
    """What the hub needs of a connected device (the DeviceConsumer)."""

    fleet_id: int
    device_pk: int
    device_id: str
    token_hash: str  # of the token the socket was opened with
    hello_done: bool  # the socket said `hello`: only then is its device online
    closing: bool  # being closed (revoked, superseded): no longer its device's socket

    async def on_push(self, message: dict[str, Any]) -> None:
        """Handle one fleet-wide push message (decide whether it concerns this device)."""


Handler = Callable[[dict[str, Any], list[PushTarget]], Awaitable[None]]


class PushHub:
    """This process's connected devices by fleet, fed by one subscription."""

    def __init__(self) -> None:
        self.targets: dict[int, dict[int, PushTarget]] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self._listener: asyncio.Task[None] | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self.fleet_handlers: dict[str, Handler] = {}
        self._stragglers: set[asyncio.Task[None]] = set()
        # Per fleet: when an assignment was last dispatched here (monotonic clock), and the
        # cloud-pressure nudge (its end, a timestamp) last dispatched here.
        self.dispatched_at: dict[int, float] = {}
        self.pressure_until: dict[int, float] = {}
        self._reconciler: asyncio.Task[None] | None = None

    async def register(self, target: PushTarget) -> None:
        """Hold this socket; start listening on first use."""
        await self.start()
        fleet = self.targets.setdefault(target.fleet_id, {})
        previous = fleet.get(target.device_pk)
        fleet[target.device_pk] = target
        if previous is not None and previous is not target:
            # The same device connected twice: the newer socket wins.
            await previous.on_push({"kind": "superseded", "fleet_id": target.fleet_id})

    def unregister(self, target: PushTarget) -> None:
        """Forget this socket (only if it is still the registered one for its device)."""
        fleet = self.targets.get(target.fleet_id)
        if fleet is not None and fleet.get(target.device_pk) is target:
            del fleet[target.device_pk]
            if not fleet:
                del self.targets[target.fleet_id]

    async def start(self) -> None:
        """Subscribe once per process (Redis mode); remember the loop (embedded mode)."""
        if self.loop is None:
            self.loop = asyncio.get_running_loop()
        if self._heartbeat is None:
            self._heartbeat = self.loop.create_task(self._beat())
        if self._reconciler is None:
            self._reconciler = self.loop.create_task(self._reconcile_every())
        if settings.REDIS_URL and self._listener is None:
            ready: asyncio.Future[None] = self.loop.create_future()
            self._listener = self.loop.create_task(self._listen(ready))
            await ready

    async def _listen(self, ready: "asyncio.Future[None]") -> None:
        import redis.asyncio as aioredis

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
        from channels.db import database_sync_to_async

        from .services import devices_seen_by_token

        def touch(token_hashes: list[str]) -> None:
            devices_seen_by_token(token_hashes=token_hashes, connected=True)

        while True:
            await asyncio.sleep(HEARTBEAT_S)
            hashes = [
                target.token_hash
                for fleet in self.targets.values()
                for target in fleet.values()
                if target.hello_done and not target.closing
            ]
            for start in range(0, len(hashes), 5000):
                try:
                    await database_sync_to_async(touch)(hashes[start : start + 5000])
                except Exception:
                    logger.warning("push.heartbeat_failed", exc_info=True)

    def _spawn(self, work: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._stragglers.add(task)
        task.add_done_callback(self._straggler_done)

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
        from channels.db import database_sync_to_async

        began = time.monotonic()
        local = dict(self.targets.get(fleet_id, {}))
        if not local:
            return 0
        assignment, tokens, pressure = await database_sync_to_async(_fleet_now)(
            fleet_id, list(local)
        )
        for device_pk, target in local.items():
            token_hash = getattr(target, "token_hash", None)
            if tokens.get(device_pk) != token_hash:  # revoked, or enrolled again since
                # Closed before the assignment below, which then passes the socket by.
                with contextlib.suppress(Exception):  # a socket already gone
                    await target.on_push(
                        {"kind": "revoke", "fleet_id": fleet_id, "token_hash": token_hash}
                    )
        if pressure is not None and pressure["until"] != self.pressure_until.get(fleet_id):
            # A live nudge this process never passed on (its push was lost).
            await self.dispatch({"kind": "cloud_pressure", "fleet_id": fleet_id, **pressure})
        if self.dispatched_at.get(fleet_id, float("-inf")) >= began:
            return 0
        rollout = (
            {"id": assignment.rollout_id, "stage": assignment.percent}
            if assignment.rollout_id is not None
            else None
        )
        await self.dispatch(
            {
                "kind": "assignment",
                "fleet_id": fleet_id,
                "assignment": assignment.as_dict(),
                "rollout": rollout,
                "sent_at": time.time(),
                "reconcile": True,
            }
        )
        return 1

    async def dispatch(self, message: dict[str, Any]) -> None:
        """Hand one message to every local socket of its fleet (or one device)."""
        fleet_id = message.get("fleet_id")
        if not isinstance(fleet_id, int):
            return
        if message.get("kind") == "assignment":
            self.dispatched_at[fleet_id] = time.monotonic()
        elif message.get("kind") == "cloud_pressure" and isinstance(message.get("until"), float):
            self.pressure_until[fleet_id] = message["until"]
        fleet = self.targets.get(fleet_id, {})
        device_pk = message.get("device_pk")
        if isinstance(device_pk, int):
            # One device (revoke, superseded: one per connect): a lookup, not a fleet scan.
            target = fleet.get(device_pk)
            targets = [target] if target is not None else []
        else:
            targets = list(fleet.values())
        if not targets:
            return
        handler = self.fleet_handlers.get(str(message.get("kind")))
        if handler is not None:
            # A kind with a fleet-wide handler (assignment): one decision for all sockets.
            await handler(message, targets)
        else:
            self.deliver(t.on_push(message) for t in targets)

    def deliver(self, sends: Iterable[Coroutine[Any, Any, None]]) -> int:
        """Run each send now, up to where it would wait; only those that wait become tasks.

        Measured here: `asyncio.gather` over 5,000 sockets creates 5,000 tasks and costs more
        than the writes themselves, and awaiting the sends one after another would let one
        stalled device (a full socket buffer) hold up the rest of the fleet. A send that does
        not need to wait (nearly all: the frame goes to the transport's buffer) finishes
        inside this loop; one that waits for its socket carries on as a task of its own.
        Returns how many had to wait.
        """
        waited = 0
        for send in sends:
            try:
                awaited = send.send(None)
            except StopIteration:
                continue
            except Exception as error:
                logger.warning("push.deliver_failed error=%r", error)
                continue
            except BaseException:
                send.close()
                raise
            waited += 1
            task = asyncio.get_running_loop().create_task(_resume(send, awaited))
            self._stragglers.add(task)
            task.add_done_callback(self._straggler_done)
        return waited

    def _straggler_done(self, task: "asyncio.Task[None]") -> None:
        self._stragglers.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.warning("push.deliver_failed error=%r", task.exception())


async def _resume(send: Coroutine[Any, Any, None], awaited: Any) -> None:
    """Carry on a coroutine that `deliver` started and that stopped at `awaited`.

    `awaited` is what the coroutine yielded to the event loop: an asyncio future, or None for
    a bare yield. Once it is done the coroutine is resumed, and inside it the await returns the
    future's result or raises its exception, exactly as under a task of its own.
    """
    try:
        while True:
            if awaited is None:
                await asyncio.sleep(0)
            else:
                await _wait_done(awaited)
            try:
                awaited = send.send(None)
            except StopIteration:
                return
    except asyncio.CancelledError:
        with contextlib.suppress(BaseException):
            send.throw(asyncio.CancelledError())
        raise
    finally:
        send.close()


async def _wait_done(future: "asyncio.Future[Any]") -> None:
    """Wait until `future` is done without taking its result (the resumed coroutine does)."""
    if not future.done():
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake(_: "asyncio.Future[Any]") -> None:
            if not waiter.done():
                waiter.set_result(None)

        future.add_done_callback(wake)
        await waiter


def _fleet_now(
    fleet_id: int, device_pks: list[int]
) -> tuple[Any, dict[int, str], dict[str, float] | None]:
    """The fleet's assignment, the current token hash of each live (unrevoked) device, and
    the cloud-pressure nudge in force (theta_offset, until), if any."""
    from .models import Device
    from .selectors import cloud_pressure_live, fleet_assignment

    tokens: dict[int, str] = {}
    for start in range(0, len(device_pks), 5000):  # bounded IN lists, however many sockets
        tokens.update(
            Device.objects.filter(
                pk__in=device_pks[start : start + 5000], revoked_at__isnull=True
            ).values_list("pk", "token_hash")
        )
    return fleet_assignment(fleet_id), tokens, cloud_pressure_live(fleet_id)


_hub: PushHub | None = None
_hub_lock = threading.Lock()


def get_hub() -> PushHub:
    """The process's hub."""
    global _hub
    with _hub_lock:
        if _hub is None:
            _hub = PushHub()
        return _hub


_redis_clients: dict[str, Any] = {}


def _redis() -> Any:
    client = _redis_clients.get(settings.REDIS_URL)
    if client is None:
        import redis

        client = _redis_clients[settings.REDIS_URL] = redis.Redis.from_url(
            settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=5
        )
    return client


def _publish_failed(messages: list[dict[str, Any]]) -> None:
    logger.warning(
        "push.publish_failed kinds=%s fleets=%s: the change is committed; connected devices "
        "get it at their processes' next reconcile (PUSH_RECONCILE_S=%s)",
        sorted({str(m.get("kind")) for m in messages}),
        sorted({str(m.get("fleet_id")) for m in messages}),
        settings.PUSH_RECONCILE_S,
        exc_info=True,
    )


def publish(message: dict[str, Any]) -> None:
    """Send one push message to every process (call after the transaction commits).

    Never raises for Redis being away: what it announces is committed, and the processes'
    reconcile delivers it (see the module's docstring).
    """
    if settings.REDIS_URL:
        import redis

        try:
            _redis().publish(push_channel(), json.dumps(message, separators=(",", ":")))
        except (redis.RedisError, OSError):
            _publish_failed([message])
        return
    hub = get_hub()
    if hub.loop is not None and not hub.loop.is_closed():
        future = asyncio.run_coroutine_threadsafe(hub.dispatch(message), hub.loop)
        del future


def publish_many(messages: list[dict[str, Any]]) -> None:
    """Several push messages, in order, in one round trip to Redis."""
    if not messages:
        return
    if not settings.REDIS_URL:
        for message in messages:
            publish(message)
        return
    import redis

    channel = push_channel()
    try:
        with _redis().pipeline(transaction=False) as pipe:
            for message in messages:
                pipe.publish(channel, json.dumps(message, separators=(",", ":")))
            pipe.execute()
    except (redis.RedisError, OSError):
        _publish_failed(messages)
