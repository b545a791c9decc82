"""`Router.route`: one task through the decision of PROTOCOL.md with the device's live readings.

Synchronous and cheap: bench/sdk measures it against the seed's three-signal router. Every
decision must equal `decision.decide(cell, task, DeviceState(...))` field for field (a unit
test checks it over random inputs), but the router does not call `decide` per task: for each
cell of the current policy it keeps a `_Plan` with what does not depend on the task:
- the decisions that depend on nothing else (device_only, cloud_only, privacy, an interactive
  task while offline), built once;
- the four effective thresholds (network bad or not x device busy or not) under the current
  cloud pressure, each with its adjustments, computed by `decision.effective_threshold`
  itself, so they cannot drift from it.
What is left per task is the score, two comparisons and the latency estimate, as in `decide`
(same operand order, so the same floats). Plans are rebuilt when the policy or the pressure
changes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import fields, make_dataclass
from typing import Any, Final

from edge_sdk.decision import (
    Cell,
    DecidedBy,
    Decision,
    DeviceState,
    Route,
    decide,
    effective_threshold,
)
from edge_sdk.policy import CellKey, PolicyStore
from edge_sdk.task import Readings, Task

__all__ = ["NO_POLICY_DECISION", "Router"]

# With no policy, or a task whose cell the policy does not have: answered on the device.
NO_POLICY_DECISION: Final = Decision(
    route="device", decided_by="offline", base_threshold=0.0, latency_budget_ms=0
)


# Decision is a frozen dataclass: its __init__ sets each of its nine fields through
# object.__setattr__ and alone costs several times the seed's whole decision. The router
# builds a `_DecisionDraft` (made from Decision's own fields: the same slots, in the same
# order, set by plain attribute stores, positionally) and then makes it a Decision by
# assigning `__class__`, which CPython allows between classes of identical layout. The result
# is an ordinary Decision (type, equality, hash, frozenness); a unit test checks that it
# equals the one `decide` builds.
_DecisionDraft: Final[Any] = make_dataclass(
    "_DecisionDraft",
    [(field.name, field.type) for field in fields(Decision)],
    slots=True,
    eq=False,
    repr=False,
    match_args=False,
)


def _plain_decision(draft: Any) -> Decision:
    """The draft's values as a Decision built the plain way (an interpreter that refuses the
    class switch, see `_DRAFTS_WORK`)."""
    return Decision(**{name: getattr(draft, name) for name in Decision.__slots__})


def _drafts_work() -> bool:
    """Whether this interpreter turns a draft into a Decision equal to a normal one."""
    expected = Decision(
        route="cloud",
        decided_by="threshold",
        base_threshold=0.6,
        latency_budget_ms=800,
        score=0.7,
        threshold=0.75,
        adjustments=(("network", 0.15),),
        predicted_cloud_ms=330.0,
    )
    try:
        draft = _DecisionDraft(*(getattr(expected, name) for name in Decision.__slots__))
        draft.__class__ = Decision
    except TypeError:
        return False
    return type(draft) is Decision and bool(draft == expected)


_DRAFTS_WORK: Final = _drafts_work()


class _Plan:
    """What the router knows about one cell before any task arrives."""

    __slots__ = (
        "background",
        "base",
        "budget",
        "busy",
        "bw_low",
        "cloud_route",
        "fixed",
        "norm",
        "offline",
        "online",
        "rtt_high",
        "thetas",
        "w_intent",
        "w_length",
        "w_lm",
    )

    def __init__(self, cell: Cell, pressure: float) -> None:
        self.base = cell.threshold
        self.budget = cell.latency_budget_ms
        self.background = cell.is_background
        self.w_length = cell.weight_length
        self.w_intent = cell.weight_intent
        self.w_lm = cell.weight_lm
        self.norm = cell.length_norm_tokens
        self.rtt_high = cell.rtt_high_ms
        self.bw_low = cell.bandwidth_low_kbps
        self.busy = cell.load_busy
        self.cloud_route = cell.cloud_route
        # Steps 1-3 through `decide` itself, with readings that cannot matter to them.
        online = decide(cell, _NO_SIGNALS, _state(True, pressure))
        offline = decide(cell, _NO_SIGNALS, _state(False, pressure))
        if cell.mode in ("device_only", "cloud_only") or cell.keeps_data_on_device:
            self.fixed = True
            self.online, self.offline = online, offline
        else:
            self.fixed = False
            self.online = online  # unused: scored per task
            # An interactive task offline is answered on the device, whatever its signals.
            self.offline = offline
        # Index: 1 when the network is bad, + 2 when the device is busy.
        self.thetas = tuple(
            effective_threshold(
                cell,
                DeviceState(
                    rtt_ms=math.inf if index & 1 else -math.inf,
                    bandwidth_kbps=math.inf,
                    device_load=math.inf if index & 2 else -math.inf,
                    online=True,
                    cloud_infer_ms=0.0,
                    cloud_pressure=pressure,
                ),
            )
            for index in range(4)
        )


class _Signals:
    """Task signals for steps 1-3 (which do not read them)."""

    tokens = 0
    intent_conf = 1.0
    lm_conf = 1.0
    upload_bytes = 0


_NO_SIGNALS: Any = _Signals()


def _state(online: bool, pressure: float) -> DeviceState:
    return DeviceState(
        rtt_ms=0.0,
        bandwidth_kbps=math.inf,
        device_load=0.0,
        online=online,
        cloud_infer_ms=0.0,
        cloud_pressure=pressure,
    )


class Router:
    """Routes tasks by the current policy, the live readings and the cloud-pressure offset."""

    __slots__ = (
        "_plans",
        "_plans_pressure",
        "_readings",
        "policy",
        "pressure_offset",
        "pressure_until",
    )

    def __init__(
        self, policy: PolicyStore, *, readings: Callable[[], Readings] | None = None
    ) -> None:
        self.policy = policy
        self._readings = readings
        self.pressure_offset = 0.0
        self.pressure_until = 0.0  # time.monotonic() when the offset lapses
        self._plans: Mapping[CellKey, _Plan] | None = None  # None: build at the next route
        self._plans_pressure = 0.0
        policy.on_change.append(self._policy_changed)

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
        return self.policy.cell(task)

    def _plans_for(self, pressure: float) -> Mapping[CellKey, _Plan]:
        current = self.policy.current
        plans: Mapping[CellKey, _Plan]
        if current is None:
            plans = {}
        else:  # shared by every device running this version under this pressure
            cells = current.cells
            plans = current.table.plans_for(
                pressure, lambda: {key: _Plan(cell, pressure) for key, cell in cells.items()}
            )
        self._plans = plans
        self._plans_pressure = pressure
        return plans

    def _policy_changed(self) -> None:
        self._plans = None

    def route(self, task: Task, readings: Readings | None = None) -> Decision:
        """The decision for `task` now; readings default to the device's live ones.

        Equal to `decide(cell, task, DeviceState(<readings>, cloud_pressure=<offset>))`.
        """
        pressure = self.pressure_offset
        if pressure and time.monotonic() >= self.pressure_until:
            pressure = self.pressure_offset = 0.0
        plans = self._plans
        if plans is None or pressure != self._plans_pressure:
            plans = self._plans_for(pressure)
        plan = plans.get((task.task_type, task.latency_budget, task.privacy_tier))
        if plan is None:
            return NO_POLICY_DECISION
        if readings is None:
            if self._readings is None:
                raise ValueError("Router.route needs readings (this router has no source)")
            readings = self._readings()
        online = readings.online
        if plan.fixed:
            return plan.online if online else plan.offline
        if not online and not plan.background:
            return plan.offline
        # Steps 4-8, as decision._decide_by_score computes them.
        rtt = readings.rtt_ms
        bandwidth = readings.bandwidth_kbps
        theta, adjustments = plan.thetas[
            (rtt > plan.rtt_high or bandwidth < plan.bw_low)
            + 2 * (readings.device_load >= plan.busy)
        ]
        length = task.tokens / plan.norm
        score = (
            plan.w_length * (length if length < 1.0 else 1.0)  # min(1.0, length), no call
            + plan.w_intent * (1.0 - task.intent_conf)
            + plan.w_lm * (1.0 - task.lm_conf)
        )
        predicted: float | None
        if score < theta:  # step 6
            route: Route = "device"
            decided_by: DecidedBy = "threshold"
            predicted = None
        else:  # step 7
            if bandwidth <= 0:
                predicted = math.inf
            else:
                predicted = task.upload_bytes * 8 / bandwidth + rtt + readings.cloud_infer_ms
            if predicted > plan.budget:
                route, decided_by = "device", "latency"
            else:  # step 8
                route, decided_by = plan.cloud_route, "threshold"
        queue = False
        if not online:  # step 3 for a background task: the cloud's share waits for the network
            queue = route != "device"
            route, decided_by = "device", "offline"
        draft = _DecisionDraft(
            route, decided_by, plan.base, plan.budget, score, theta, adjustments, predicted, queue
        )
        if not _DRAFTS_WORK:
            return _plain_decision(draft)
        draft.__class__ = Decision
        return draft  # type: ignore[no-any-return]
