"""`Executor`: a routed task run where its decision says, with the cell's fallback.

`device_infer`, `cloud_infer` (cut at the cell's `cloud_timeout_ms`) or both for
`draft_refine` (the device drafts, the cloud refines: `refine_infer` with the draft when the
app gave one). With `fallback: other_side` a failure is answered on the other side, unless
the cell keeps data on the device. While offline no cloud call is made: it fails at once.
`Signals` reads the quality signals off what the app's callables returned.
"""

from __future__ import annotations

import asyncio
from typing import Any

from edge_sdk.decision import Cell, Decision, FallbackKind, Route, fallback_route
from edge_sdk.task import (
    Answer,
    CloudInfer,
    DeviceInfer,
    RefineInfer,
    RefineOutcome,
    RefineRequest,
    Task,
)

__all__ = ["Execution", "Executor", "Signals"]

# (route taken, fallback, ok, result or the error, whether the task's data left the device)
Execution = tuple[Route, FallbackKind, bool, Any, bool]


class Executor:
    """The app's inference callables, called as a decision and its cell say."""

    __slots__ = ("_cloud_infer", "_device_infer", "refine_infer")

    def __init__(
        self,
        device_infer: DeviceInfer,
        cloud_infer: CloudInfer,
        refine_infer: RefineInfer | None,
    ) -> None:
        self._device_infer = device_infer
        self._cloud_infer = cloud_infer
        # Refines a draft knowing it (draft_refine, shadow refines); without it draft_refine
        # calls cloud_infer as before and no shadow refine runs.
        self.refine_infer = refine_infer

    async def execute(
        self, task: Task, decision: Decision, cell: Cell | None, online: bool
    ) -> Execution:
        """(route taken, fallback, ok, result or the error, whether the task's data left the
        device) under the cell's fallback setting. Data leaves with every cloud call made
        while online, even one that then fails or times out; offline, a cloud call fails
        before sending anything."""
        route = decision.route
        if route == "device" or cell is None:
            ok, result = await self._on_device(task)
            if ok or cell is None or fallback_route(cell, "device", "device") == "none":
                return "device", "none", ok, result, False
            ok, result = await self._on_cloud(task, decision, cell, online)
            return "cloud", "device_to_cloud", ok, result, online
        if route == "cloud":
            ok, result = await self._on_cloud(task, decision, cell, online)
            if ok or fallback_route(cell, "cloud", "cloud") == "none":
                return "cloud", "none", ok, result, online
            ok, result = await self._on_device(task)
            return "device", "cloud_to_device", ok, result, online
        # draft_refine: the device drafts, the cloud refines the draft.
        ok, draft = await self._on_device(task)
        if not ok:
            if fallback_route(cell, route, "device") == "none":
                return "device", "none", False, draft, False
            ok, result = await self._on_cloud(task, decision, cell, online)
            return "cloud", "device_to_cloud", ok, result, online
        ok, refined = await self._on_refine(task, decision, cell, online, draft)
        if ok:
            return "draft_refine", "none", True, refined, online
        if fallback_route(cell, route, "cloud") == "none":
            return "draft_refine", "none", False, refined, online
        return "device", "cloud_to_device", True, draft, online

    async def _on_device(self, task: Task) -> tuple[bool, Any]:
        try:
            return True, await self._device_infer(task)
        except Exception as error:
            return False, error

    async def _on_cloud(
        self, task: Task, decision: Decision, cell: Cell, online: bool
    ) -> tuple[bool, Any]:
        if not online:  # no network I/O while offline: a cloud call fails at once
            return False, ConnectionError("device is offline")
        try:
            async with asyncio.timeout(cell.cloud_timeout_ms / 1000):
                return True, await self._cloud_infer(task, decision)
        except Exception as error:  # TimeoutError included: cloud_timeout_ms passed
            return False, error

    async def _on_refine(
        self, task: Task, decision: Decision, cell: Cell, online: bool, draft: Any
    ) -> tuple[bool, Any]:
        """The cloud's refine of a draft: `refine_infer` with the draft when the app gave one,
        else `cloud_infer` (which does not see the draft)."""
        if self.refine_infer is None:
            return await self._on_cloud(task, decision, cell, online)
        if not online:
            return False, ConnectionError("device is offline")
        request = RefineRequest(
            task=task,
            decision=decision,
            draft=draft.result if isinstance(draft, Answer) else draft,
            deidentify=cell.upload_deidentify,
            shadow=False,
        )
        try:
            async with asyncio.timeout(cell.cloud_timeout_ms / 1000):
                return True, await self.refine_infer(request)
        except Exception as error:  # TimeoutError included: cloud_timeout_ms passed
            return False, error


class Signals:
    """The quality signals of one task's answer, read from what the app's callables returned
    (an Answer or a RefineOutcome, or a bare result that says nothing)."""

    __slots__ = ("changed", "edit_ratio", "quality")

    def __init__(self) -> None:
        self.quality: float | None = None
        self.changed: bool | None = None
        self.edit_ratio: float | None = None

    def read(self, answer: Any) -> Any:
        """The bare result of `answer`, noting what it says of its quality."""
        if isinstance(answer, RefineOutcome):
            self.quality = answer.quality
            self.changed = bool(answer.changed)
            self.edit_ratio = answer.edit_ratio
            return answer.result
        if isinstance(answer, Answer):
            self.quality = answer.quality
            return answer.result
        return answer
