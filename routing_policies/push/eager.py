"""Run many socket writes in one pass of the event loop, a task only for those that must wait.

Why (bench/fanout, docs/capacity.md): `asyncio.gather` over 5,000 sockets costs more than the
writes, and awaiting them one by one would let one stalled device hold up the fleet.
"""

import asyncio
import contextlib
import logging
from collections.abc import Coroutine, Iterable
from typing import Any

logger = logging.getLogger(__name__)


class EagerSender:
    """Starts sends at once; keeps the few that had to wait until they finish."""

    def __init__(self) -> None:
        self._waiting: set[asyncio.Task[None]] = set()

    def send_all(self, sends: Iterable[Coroutine[Any, Any, None]]) -> int:
        """Run each send now, up to where it would wait; those that wait carry on as tasks of
        their own. Returns how many had to wait."""
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
            self.keep(asyncio.get_running_loop().create_task(_resume(send, awaited)))
        return waited

    def keep(self, task: "asyncio.Task[None]") -> None:
        """Hold a task until it is done, logging its failure."""
        self._waiting.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: "asyncio.Task[None]") -> None:
        self._waiting.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.warning("push.deliver_failed error=%r", task.exception())


async def _resume(send: Coroutine[Any, Any, None], awaited: Any) -> None:
    """Carry on a coroutine that `send_all` started and that stopped at `awaited`.

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
