"""The database work of every device socket of this process, batched: connects, hellos, acks
and disconnects reach `devices.services` a batch at a time, through one sync-thread call."""

import asyncio
import logging
from typing import Any

from channels.db import database_sync_to_async
from django.utils import timezone

from ..devices.services import devices_ack, devices_connect, devices_disconnect, devices_hello
from .frames import superseded_message
from .publish import publish_many

logger = logging.getLogger(__name__)

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


def _connect(tokens: list[str]) -> list[dict[str, Any] | None]:
    """Sockets opening with these tokens: their devices (`devices_connect`), and every process
    told that older sockets of these devices, wherever they are (a half-open one on another
    process after a network switch), are superseded."""
    devices = devices_connect(tokens=tokens)
    publish_many(
        [
            superseded_message(
                fleet_id=device["fleet_id"],
                device_pk=device["pk"],
                connected_at=device["connected_at"],
            )
            for device in devices
            if device is not None
        ]
    )
    return devices


def _write_batch(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """One batch of every socket's requests, in `_BATCH_KINDS` order, on one connection."""
    if batch["disconnect"]:
        devices_disconnect(token_hashes=batch["disconnect"])
    if batch["ack"]:
        devices_ack(acks=batch["ack"])
    return {
        "disconnect": [None] * len(batch["disconnect"]),
        "connect": _connect(batch["connect"]) if batch["connect"] else [],
        "hello": devices_hello(requests=batch["hello"]) if batch["hello"] else [],
        "ack": [None] * len(batch["ack"]),
    }


class DeviceStore:
    """The database work of all sockets of this process (connect, hello, ack), in batches.

    A request that arrives while a batch is being written goes with the next one, in a few
    set-based statements on one connection (bench/fanout: one trip per socket left 5,000
    devices minutes to connect; docs/capacity.md). On a quiet server a request is written at
    once, alone, except an ack, which waits up to LAZY_WRITE_DELAY_S for the others of its push.
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
