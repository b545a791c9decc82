"""`Router.route`: one task through `decision.decide` with the device's live readings.

Synchronous and cheap (bench/sdk measures it): the cell comes from the policy store's index,
the pushed cloud-pressure offset is read from two attributes, and nothing is allocated besides
the decision's own objects.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from edge_sdk.decision import Cell, Decision, DeviceState, decide
from edge_sdk.policy import PolicyStore
from edge_sdk.task import Readings, Task

__all__ = ["NO_POLICY_DECISION", "Router"]

# With no policy, or a task whose cell the policy does not have: answered on the device.
NO_POLICY_DECISION = Decision(
    route="device", decided_by="offline", base_threshold=0.0, latency_budget_ms=0
)


class Router:
    """Routes tasks by the current policy, the live readings and the cloud-pressure offset."""

    __slots__ = ("_readings", "policy", "pressure_offset", "pressure_until")

    def __init__(
        self, policy: PolicyStore, *, readings: Callable[[], Readings] | None = None
    ) -> None:
        self.policy = policy
        self._readings = readings
        self.pressure_offset = 0.0
        self.pressure_until = 0.0  # time.monotonic() when the offset lapses

    @property
    def cloud_pressure(self) -> float:
        """The pushed theta offset now (0 once its TTL has passed)."""
        if self.pressure_offset and time.monotonic() >= self.pressure_until:
            self.pressure_offset = 0.0
        return self.pressure_offset

    def set_cloud_pressure(self, theta_offset: float, ttl_s: float) -> None:
        """Apply a `cloud_pressure` message: the offset holds for ttl_s seconds."""
        self.pressure_offset = theta_offset if ttl_s > 0 else 0.0
        self.pressure_until = time.monotonic() + ttl_s

    def cell(self, task: Task) -> Cell | None:
        """The task's cell in the current policy."""
        return self.policy.cells.get((task.task_type, task.latency_budget, task.privacy_tier))

    def route(self, task: Task, readings: Readings | None = None) -> Decision:
        """The decision for `task` now; readings default to the device's live ones."""
        cell = self.policy.cells.get((task.task_type, task.latency_budget, task.privacy_tier))
        if cell is None:
            return NO_POLICY_DECISION
        if readings is None:
            if self._readings is None:
                raise ValueError("Router.route needs readings (this router has no source)")
            readings = self._readings()
        pressure = self.pressure_offset
        if pressure and time.monotonic() >= self.pressure_until:
            pressure = self.pressure_offset = 0.0
        return decide(
            cell,
            task,
            DeviceState(
                rtt_ms=readings.rtt_ms,
                bandwidth_kbps=readings.bandwidth_kbps,
                device_load=readings.device_load,
                online=readings.online,
                cloud_infer_ms=readings.cloud_infer_ms,
                cloud_pressure=pressure,
            ),
        )
