"""`ShadowRefines` (PROTOCOL.md extensions): device answers the cloud also refines, unseen.

A task answered on the device is drawn with its cell's `shadow_refine_rate`, within the SDK's
budget (`shadow_refines_per_minute` over any `SHADOW_WINDOW_S` of the device's clock). The
answer returns at once; the refine runs in the background, and the task's event is recorded
when it ends (with its outcome, or without it after a failure, a timeout or `stop`), exactly
once. Feedback on an answer whose event waits for its refine is queued after that event.
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from collections.abc import Callable
from typing import Any, Final

from edge_sdk.config import DeviceConfig
from edge_sdk.decision import Cell
from edge_sdk.policy import PolicyStore
from edge_sdk.task import RefineInfer, RefineOutcome, RefineRequest, Task
from edge_sdk.telemetry import refine_fields
from edge_sdk.telemetry_sender import TelemetrySender

__all__ = ["SHADOW_WINDOW_S", "ShadowRefines"]

SHADOW_WINDOW_S: Final = 60.0  # shadow_refines_per_minute counts starts in this window


class ShadowRefines:
    """The shadow refines of one device: drawn, started, recorded; counters say how many."""

    __slots__ = (
        "_clock",
        "_device_id",
        "_events",
        "_feedback_after",
        "_feedback_queue",
        "_per_minute",
        "_policy",
        "_refine_infer",
        "_rng",
        "_starts",
        "_tasks",
        "_telemetry",
        "failed",
        "over_budget",
        "started",
    )

    def __init__(
        self,
        config: DeviceConfig,
        *,
        refine_infer: RefineInfer | None,
        policy: PolicyStore,
        sender: TelemetrySender,
        rng: random.Random,
        clock: Callable[[], float],
    ) -> None:
        self._device_id = config.device_id
        self._per_minute = config.shadow_refines_per_minute
        self._refine_infer = refine_infer
        self._policy = policy
        # A refined answer's event goes to the device's queues, its feedback after it.
        self._telemetry = sender.telemetry
        self._feedback_queue = sender.feedback_queue
        self._rng = rng
        self._clock = clock
        self._tasks: set[asyncio.Task[None]] = set()  # running ones
        self._starts: deque[float] = deque()  # recent starts, for the budget
        # Events of running shadow refines, by event id, until recorded (exactly once).
        self._events: dict[str, dict[str, Any]] = {}
        # Feedback on an answer whose event waits for its shadow refine: queued after it.
        self._feedback_after: dict[str, dict[str, Any]] = {}
        self.started = 0  # shadow refines started
        self.over_budget = 0  # drawn by the cell's rate, skipped: over the SDK's budget
        self.failed = 0  # the cloud failed or timed out: event sent without the outcome

    @property
    def pending(self) -> int:
        """Shadow refines running in the background now."""
        return len(self._tasks)

    def drawn(self, task: Task, cell: Cell) -> bool:
        """Whether this device answer is also refined by the cloud: drawn with the cell's
        `shadow_refine_rate` (never where the cell forbids uploads), within the SDK's budget,
        and only with a `refine_infer` to do it."""
        if self._refine_infer is None or not cell.upload_allowed:
            return False
        rate = self._policy.shadow_refine_rate(task)
        if rate <= 0 or self._rng.random() >= rate:
            return False
        now = self._clock()
        starts = self._starts
        while starts and now - starts[0] >= SHADOW_WINDOW_S:
            starts.popleft()
        if len(starts) >= self._per_minute:
            self.over_budget += 1
            return False
        starts.append(now)
        return True

    def start(self, request: RefineRequest, cell: Cell, event: dict[str, Any]) -> None:
        """Run the refine in the background; `event` is recorded when it ends."""
        self.started += 1
        self._events[event["event_id"]] = event
        shadow = asyncio.get_running_loop().create_task(
            self._refine(request, cell, event), name=f"edge-sdk:{self._device_id}:shadow"
        )
        self._tasks.add(shadow)
        shadow.add_done_callback(self._tasks.discard)

    def hold_feedback(self, item: dict[str, Any]) -> bool:
        """Keep a feedback item until its event is recorded; False when that event is not
        waiting for a refine (the caller queues the item at once)."""
        if item["event_id"] not in self._events:
            return False
        self._feedback_after[item["event_id"]] = item
        return True

    async def cancel(self) -> None:
        """Cut the shadow refines still running; their events are recorded without the
        outcome."""
        running = list(self._tasks)
        for shadow in running:
            shadow.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        # A refine cancelled before it began never ran its own `finally`.
        for event in list(self._events.values()):
            self._record(event)

    async def _refine(self, request: RefineRequest, cell: Cell, event: dict[str, Any]) -> None:
        """Refine a draft already given as the answer, then record its event: with the
        outcome, or without it when the cloud failed, timed out (the cell's cloud_timeout_ms)
        or the device stopped meanwhile."""
        assert self._refine_infer is not None
        changed: bool | None = None
        edit_ratio: float | None = None
        try:
            async with asyncio.timeout(cell.cloud_timeout_ms / 1000):
                answer = await self._refine_infer(request)
            if isinstance(answer, RefineOutcome):
                changed, edit_ratio = answer.changed, answer.edit_ratio
        except Exception:  # TimeoutError included
            self.failed += 1
        finally:  # cancelled (stop) too: the event of the answer is never lost
            event.update(refine_fields(changed, edit_ratio))
            self._record(event)

    def _record(self, event: dict[str, Any]) -> None:
        if self._events.pop(event["event_id"], None) is not None:
            self._telemetry.record(event)
            item = self._feedback_after.pop(event["event_id"], None)
            if item is not None:
                self._feedback_queue.record(item)
