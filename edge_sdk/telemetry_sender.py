"""`TelemetrySender`: a device's telemetry and feedback queues and the loop that delivers them.

The loop wakes every `telemetry_flush_s` (times `weak_link_telemetry_factor` on a weak link:
edge_sdk.delta_sync), or at once when a queue holds a full batch. Offline,
or before enrolment, the queues are only kept on disk. Online, the cloud-bound tasks held
while offline run first (their events join this flush), then telemetry is flushed; after a
failure it is retried after the back-off (or the server's Retry-After), not the interval.
Feedback goes after the events it refers to, and its failures back off on their own, never
holding telemetry back. A 401 on either raises TelemetryRevoked out of `run`.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from edge_sdk.backoff import Backoff
from edge_sdk.config import DeviceConfig
from edge_sdk.connection import Connection
from edge_sdk.feedback import FeedbackQueue
from edge_sdk.telemetry import Poster, TelemetryQueue

__all__ = ["TelemetrySender"]

_Queue = TypeVar("_Queue", bound=TelemetryQueue)


class TelemetrySender:
    """The queues of one device and its telemetry loop (the second of its two tasks)."""

    __slots__ = (
        "_before_flush",
        "_connection",
        "_feedback_retry_at",
        "_rng",
        "_wake",
        "config",
        "feedback_queue",
        "telemetry",
    )

    def __init__(
        self,
        config: DeviceConfig,
        *,
        connection: Connection,
        rng: random.Random,
        before_flush: Callable[[], Awaitable[None]],
    ) -> None:
        self.config = config
        self._connection = connection
        self._rng = rng
        self._before_flush = before_flush  # runs the tasks held while offline
        self.telemetry = self._queue(
            TelemetryQueue,
            config.telemetry_max_events,
            config.telemetry_batch_max,
            connection.post_telemetry,
        )
        self.feedback_queue = self._queue(
            FeedbackQueue,
            config.feedback_max_items,
            config.feedback_batch_max,
            connection.post_feedback,
        )
        self._wake: asyncio.Event | None = None
        self._feedback_retry_at = 0.0  # event-loop time before which feedback is not retried

    def _queue(self, kind: type[_Queue], max_items: int, batch_max: int, poster: Poster) -> _Queue:
        """A queue of this device: kept in its state_dir, posted by `poster`, and waking the
        loop when it holds a full batch."""
        return kind(
            max_events=max_items,
            batch_max=batch_max,
            state_dir=self.config.state_dir,
            poster=poster,
            on_full=self.wake,
        )

    def flush_interval(self) -> float:
        """`telemetry_flush_s`, times `weak_link_telemetry_factor` on a weak link
        (edge_sdk.delta_sync): fewer, larger batches where each request costs most."""
        config = self.config
        if self._connection.weak_link():
            return config.telemetry_flush_s * config.weak_link_telemetry_factor
        return config.telemetry_flush_s

    def wake(self) -> None:
        """Flush now rather than at the end of the interval (a queue holds a full batch)."""
        if self._wake is not None:
            self._wake.set()

    def load(self) -> None:
        """Queue what a previous run left unsent."""
        self.telemetry.load()
        self.feedback_queue.load()

    def open(self) -> None:
        """At each start, before the loop runs (the event belongs to the running loop)."""
        self._wake = asyncio.Event()

    async def save(self) -> None:
        """Write both queues to disk (on worker threads)."""
        await self.telemetry.save_async()
        await self.feedback_queue.save_async()

    async def last_flush(self) -> None:
        """At stop: one try to send what is pending, each queue cut at `http_timeout_s`."""
        for queue in (self.telemetry, self.feedback_queue):
            if queue.pending:
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(self.config.http_timeout_s):
                        await queue.flush()

    async def run(self) -> None:
        """The telemetry loop, until stopped; TelemetryRevoked on a 401."""
        config = self.config
        connection = self._connection
        backoff = Backoff(config.backoff_base_s, config.backoff_max_s, self._rng)
        feedback_backoff = Backoff(config.backoff_base_s, config.backoff_max_s, self._rng)
        wake = self._wake
        assert wake is not None
        retry = False  # after a failed flush: try again after the back-off, not the interval
        while not connection.stopping:
            if not retry:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.flush_interval()):
                        await wake.wait()
                wake.clear()
            retry = False
            if not connection.online():
                await self.save()  # held until online: kept on disk meanwhile
                continue
            await self._before_flush()
            if connection.token is None:
                await self.save()
                continue
            if self.telemetry.pending:
                if await self.telemetry.flush():
                    # While deliveries succeed events are not written to disk (a crash loses
                    # at most one flush interval); a file left by failures is brought up to
                    # date.
                    await self.telemetry.refresh_saved()
                    backoff.reset()
                else:
                    await self.save()
                    retry = True
                    await asyncio.sleep(max(self.telemetry.retry_after, backoff.next_delay()))
                    continue
            if self.feedback_queue.pending:
                await self._flush_feedback(feedback_backoff)

    async def _flush_feedback(self, backoff: Backoff) -> None:
        """One attempt to deliver pending feedback unless backing off."""
        loop = asyncio.get_running_loop()
        if loop.time() < self._feedback_retry_at:
            return
        if await self.feedback_queue.flush():
            await self.feedback_queue.refresh_saved()
            backoff.reset()
            self._feedback_retry_at = 0.0
        else:
            await self.feedback_queue.save_async()
            delay = max(self.feedback_queue.retry_after, backoff.next_delay())
            self._feedback_retry_at = loop.time() + delay
