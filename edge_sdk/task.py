"""What an app hands the SDK (a task and live readings) and what it gets back (an outcome)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeAlias

from edge_sdk.decision import Decision, DeviceState, FallbackKind, Route, TaskSignals

__all__ = ["CloudInfer", "DeviceInfer", "Outcome", "Readings", "Task"]


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

    def device_state(self, cloud_pressure: float = 0.0) -> DeviceState:
        """These readings as the decision's DeviceState, with the pushed pressure."""
        return DeviceState(
            rtt_ms=self.rtt_ms,
            bandwidth_kbps=self.bandwidth_kbps,
            device_load=self.device_load,
            online=self.online,
            cloud_infer_ms=self.cloud_infer_ms,
            cloud_pressure=cloud_pressure,
        )


DeviceInfer: TypeAlias = Callable[[Task], Awaitable[Any]]
CloudInfer: TypeAlias = Callable[[Task, Decision], Awaitable[Any]]


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
