"""What an app hands the SDK (a task and live readings) and what it gets back (an outcome)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeAlias

from edge_sdk.decision import Decision, DeviceState, FallbackKind, Route, TaskSignals

__all__ = [
    "Answer",
    "CloudInfer",
    "DeviceInfer",
    "Outcome",
    "Readings",
    "RefineInfer",
    "RefineOutcome",
    "RefineRequest",
    "Task",
]


# A Task is the decision's TaskSignals plus the cell it belongs to, so the router hands it
# to `decide` as it is, without copying its signals into a new object per decision.
@dataclass(frozen=True, slots=True, kw_only=True)
class Task(TaskSignals):
    """One inference request: its cell coordinates and the signals the decision reads."""

    task_type: str
    latency_budget: str
    privacy_tier: str
    cache_key: str | None = None  # same key + same cell within the cell's cache_ttl_s: a hit


@dataclass(frozen=True, slots=True, kw_only=True)
class Readings:
    """Live readings, supplied by the app (or the simulator) at each decision."""

    rtt_ms: float
    bandwidth_kbps: float
    device_load: float
    online: bool
    cloud_infer_ms: float  # the device's estimate of cloud inference time
    # The link is paid by the byte (a phone's mobile data): the SDK treats it as weak
    # (edge_sdk.delta_sync.weak_link). Not an input of the decision.
    metered: bool = False

    def device_state(self, cloud_pressure: float = 0.0) -> DeviceState:
        """These readings as the decision's DeviceState, with the pushed pressure."""
        return DeviceState.of(self, cloud_pressure=cloud_pressure)


@dataclass(frozen=True, slots=True, kw_only=True)
class Answer:
    """What `device_infer` or `cloud_infer` may return instead of a bare result: the result
    and the app's judgement of its quality at once (0-1, the event's `quality`). A quality
    known only later goes through `Device.feedback(event_id, quality)`."""

    result: Any
    quality: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RefineOutcome:
    """What the app's cloud refine returns: the refined result, whether the cloud changed the
    device's draft, and how much (0-1, e.g. the share of tokens edited; None: unknown). The
    event carries them as `refine_changed` / `refine_edit_ratio`."""

    result: Any
    changed: bool
    edit_ratio: float | None = None
    quality: float | None = None  # of the refined answer, when it is the one given


@dataclass(frozen=True, slots=True, kw_only=True)
class RefineRequest:
    """One cloud refine of a device's draft, handed to the app's `refine_infer`.

    `deidentify` is the cell's `upload.deidentify`: strip identifiers from what is sent when
    it is true (the event reports `deidentified` from it). `shadow` is true for a shadow
    refine: the device's draft already answered the task; the refined result is only
    compared with it, never shown.
    """

    task: Task
    decision: Decision
    draft: Any  # the device's result (unwrapped from an Answer)
    deidentify: bool
    shadow: bool


DeviceInfer: TypeAlias = Callable[[Task], Awaitable[Any]]
CloudInfer: TypeAlias = Callable[[Task, Decision], Awaitable[Any]]
# Returns a RefineOutcome (or a bare result: the SDK then cannot say whether it changed).
RefineInfer: TypeAlias = Callable[[RefineRequest], Awaitable[Any]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """What `Device.run` did with a task."""

    decision: Decision
    route: Route  # the route actually taken, after any fallback
    fallback: FallbackKind
    latency_ms: float
    cache_hit: bool
    ok: bool
    queued: bool  # a cloud-bound background task held while offline
    result: Any
    policy_version: int | None
    # Added with the quality signals (PROTOCOL.md extensions):
    event_id: str | None = None  # the telemetry event's id (for Device.feedback); None: none
    quality: float | None = None  # what the app said of the answer at once (an Answer)
    refine_changed: bool | None = None  # draft_refine: whether the cloud changed the draft
    refine_edit_ratio: float | None = None
    shadow_refine: bool = False  # a shadow refine of this device answer runs in the background
