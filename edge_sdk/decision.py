"""The routing decision of device protocol v1 (PROTOCOL.md, "The decision").

One pure function, `decide`, shared by the SDK on devices, the server's playground, threshold
calibration and backtests. Standard library only: devices and the server import the same code.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Final, Literal, TypeAlias, get_args

__all__ = [
    "SCORE_TERM_NAMES",
    "Adjustment",
    "AdjustmentName",
    "Cell",
    "CellDocumentError",
    "DecidedBy",
    "Decision",
    "DeviceState",
    "FallbackKind",
    "FallbackSetting",
    "Mode",
    "Route",
    "ScoreTerms",
    "Side",
    "TaskSignals",
    "decide",
    "effective_threshold",
    "fallback_route",
    "left_device_by_route",
    "predicted_cloud_ms",
    "privacy_violation",
    "score_terms",
]

Route: TypeAlias = Literal["device", "cloud", "draft_refine"]
DecidedBy: TypeAlias = Literal["policy", "privacy", "offline", "threshold", "latency"]
Mode: TypeAlias = Literal["device_only", "cloud_only", "auto", "draft_refine"]
FallbackSetting: TypeAlias = Literal["other_side", "none"]
FallbackKind: TypeAlias = Literal["none", "cloud_to_device", "device_to_cloud"]
Side: TypeAlias = Literal["device", "cloud"]
AdjustmentName: TypeAlias = Literal["network", "load", "cloud_pressure", "clamp"]
Adjustment: TypeAlias = tuple[AdjustmentName, float]
# Step 4's weighted terms, in the order they are added: (length, intent, lm). A plain tuple
# (not a dataclass): `decide` builds one per task, and a tuple costs next to nothing.
ScoreTerms: TypeAlias = tuple[float, float, float]
SCORE_TERM_NAMES: Final = ("length", "intent", "lm")

_MODES: Final = frozenset(get_args(Mode))
_FALLBACK_SETTINGS: Final = frozenset(get_args(FallbackSetting))
_SENSITIVE: Final = "sensitive"
_BACKGROUND: Final = "background"


class CellDocumentError(ValueError):
    """A cell of a policy document is missing a field or holds a value of the wrong kind."""


# kw_only everywhere: these classes hold long runs of floats, and a positional mix-up
# (rtt for bandwidth, threshold for a weight) would type-check and silently misroute.
@dataclass(frozen=True, slots=True, kw_only=True)
class Cell:
    """One row of a policy table, flattened from its document form for cheap reads."""

    task_type: str
    latency_budget: str
    privacy_tier: str
    mode: Mode
    threshold: float
    weight_length: float
    weight_intent: float
    weight_lm: float
    length_norm_tokens: int
    latency_budget_ms: int
    cloud_timeout_ms: int
    fallback: FallbackSetting
    upload_allowed: bool
    upload_deidentify: bool
    upload_max_bytes: int
    rtt_high_ms: float
    bandwidth_low_kbps: float
    theta_raise: float
    load_busy: float
    theta_lower: float
    cache_ttl_s: int

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> Cell:
        """Parse one cell of a policy document; CellDocumentError names the first bad field."""
        mode = _text(document, "mode")
        if mode not in _MODES:
            raise CellDocumentError(
                f"cell field 'mode' must be one of {sorted(_MODES)}, got {mode!r}"
            )
        fallback = _text(document, "fallback")
        if fallback not in _FALLBACK_SETTINGS:
            raise CellDocumentError(
                f"cell field 'fallback' must be one of {sorted(_FALLBACK_SETTINGS)}, "
                f"got {fallback!r}"
            )
        length_norm_tokens = _integer(document, "length_norm_tokens")
        if length_norm_tokens <= 0:
            raise CellDocumentError("cell field 'length_norm_tokens' must be positive")
        return cls(**{attr: read(document, *path) for attr, path, read in _CELL_FIELDS})

    def to_document(self) -> dict[str, Any]:
        """The cell in the nested shape of a policy document."""
        document: dict[str, Any] = {}
        for attr, (*parents, key), _ in _CELL_FIELDS:
            node = document
            for parent in parents:
                node = node.setdefault(parent, {})
            node[key] = getattr(self, attr)
        return document

    @property
    def keeps_data_on_device(self) -> bool:
        """Sensitive and not allowed to upload: nothing of this task may reach the cloud."""
        return self.privacy_tier == _SENSITIVE and not self.upload_allowed

    @property
    def is_background(self) -> bool:
        """A background task may wait for the network; an interactive one may not."""
        return self.latency_budget == _BACKGROUND

    @property
    def cloud_route(self) -> Route:
        """Where step 8 sends a task: to the cloud, or (draft_refine) to refine a device draft."""
        return "draft_refine" if self.mode == "draft_refine" else "cloud"


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskSignals:
    """What the device knows about one task before routing it."""

    tokens: int
    intent_conf: float
    lm_conf: float
    upload_bytes: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceState:
    """The device's network, load and cloud estimates at decision time.

    While offline, pass the last measured network figures: a queued background task is
    judged by what steps 4-8 would say online, and a bandwidth of 0 makes step 7 keep it
    on the device.
    """

    rtt_ms: float
    bandwidth_kbps: float
    device_load: float
    online: bool
    cloud_infer_ms: float
    cloud_pressure: float = 0.0

    @classmethod
    def of(cls, readings: object, *, cloud_pressure: float) -> DeviceState:
        """The figures of `readings`, any object that has them by these names (the app's
        Readings, a replayed row), frozen with the cloud-pressure offset of the moment."""
        return cls(
            **{name: getattr(readings, name) for name in _READINGS}, cloud_pressure=cloud_pressure
        )


# What DeviceState.of reads of the readings: every field but the pushed cloud pressure.
_READINGS: Final = tuple(f.name for f in fields(DeviceState) if f.name != "cloud_pressure")


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """Where a task runs, which step decided it, and the numbers behind it.

    `score`, `threshold` and `predicted_cloud_ms` are None when the deciding step came
    before they were computed; `threshold` is the effective theta after `adjustments`.
    """

    route: Route
    decided_by: DecidedBy
    base_threshold: float
    latency_budget_ms: int
    score: float | None = None
    threshold: float | None = None
    adjustments: tuple[Adjustment, ...] = ()
    predicted_cloud_ms: float | None = None
    queue_until_online: bool = False

    def explain(self) -> str:
        """One line for people: the route and the step and numbers that chose it."""
        if self.decided_by == "policy":
            reason = f"{self.route}: fixed by policy mode {self.route}_only"
            if self.queue_until_online:
                reason += "; offline, queued until back online"
            return reason
        if self.decided_by == "privacy":
            return "device: sensitive data and upload not allowed"
        if self.decided_by == "offline":
            if self.queue_until_online:
                return f"device: offline, queued for the cloud until online ({self._compare()})"
            return "device: offline"
        if self.decided_by == "latency":
            return (
                f"device: predicted cloud {self.predicted_cloud_ms:.0f} ms > budget "
                f"{self.latency_budget_ms} ms ({self._compare()})"
            )
        return f"{self.route}: {self._compare()}"

    def _compare(self) -> str:
        if self.score is None or self.threshold is None:
            return "score not computed"
        relation = "<" if self.score < self.threshold else ">="
        text = f"score {self.score:.2f} {relation} theta {self.threshold:.2f}"
        if not self.adjustments:
            return text
        steps = "".join(f", {delta:+.2f} {name}" for name, delta in self.adjustments)
        return f"{text} (base {self.base_threshold:.2f}{steps})"


def decide(cell: Cell, task: TaskSignals, device: DeviceState) -> Decision:
    """Route one task by the cell's policy: steps 1-8 of PROTOCOL.md, in that order."""
    # Step 1. The protocol puts the fixed modes first, before privacy and connectivity, so a
    # cloud_only cell answers cloud even offline; a background task is then queued instead.
    if cell.mode == "device_only":
        return _decision(cell, "device", "policy")
    if cell.mode == "cloud_only":
        queue = not device.online and cell.is_background
        return _decision(cell, "cloud", "policy", queue_until_online=queue)
    # Step 2.
    if cell.keeps_data_on_device:
        return _decision(cell, "device", "privacy")
    # Step 3. Only a background task can wait for the network, so only then is it worth
    # asking what the online decision would have been.
    if not device.online:
        if not cell.is_background:
            return _decision(cell, "device", "offline")
        online = _decide_by_score(cell, task, device)
        return replace(
            online,
            route="device",
            decided_by="offline",
            queue_until_online=online.route != "device",
        )
    return _decide_by_score(cell, task, device)


def fallback_route(cell: Cell, route: Route, failed_side: Side) -> FallbackKind:
    """Where a failed or timed-out call is retried, under the cell's fallback setting.

    A device failure never goes to the cloud for a cell whose data must stay on the device.
    """
    if failed_side not in _sides_used(route):
        raise ValueError(f"route {route!r} does not run on the {failed_side}")
    if cell.fallback == "none":
        return "none"
    if failed_side == "cloud":
        return "cloud_to_device"
    if cell.keeps_data_on_device:
        return "none"
    return "device_to_cloud"


def left_device_by_route(route: str, fallback: str, cache_hit: bool) -> bool:
    """Whether a task's data left the device, judged from an event's route, fallback and
    cache hit (PROTOCOL.md extensions, for events without `uploaded`): a cache hit never
    left; a task meant for the cloud (or for refinement by it) left, even if the call then
    failed or timed out; a device task that fell back to the cloud left."""
    if cache_hit:
        return False
    return route != "device" or fallback == "device_to_cloud"


def privacy_violation(
    *,
    privacy_tier: str,
    upload_allowed: bool,
    upload_deidentify: bool,
    left_device: bool,
    deidentified: bool,
) -> bool:
    """PROTOCOL.md extensions: a sensitive-tier task whose data left the device where its cell
    forbids upload, or left without de-identification where the cell requires it.

    A task whose data never left the device (answered on it, from its cache, or failed there)
    is never a violation, whatever its route; nor is a normal-tier task, nor a sensitive one
    sent as its cell allows.
    """
    if privacy_tier != _SENSITIVE or not left_device:
        return False
    return not upload_allowed or (upload_deidentify and not deidentified)


def score_terms(cell: Cell, task: TaskSignals) -> ScoreTerms:
    """Step 4's weighted terms (length, intent, lm); the score is their sum, left to right."""
    return (
        cell.weight_length * min(1.0, task.tokens / cell.length_norm_tokens),
        cell.weight_intent * (1.0 - task.intent_conf),
        cell.weight_lm * (1.0 - task.lm_conf),
    )


def _decide_by_score(cell: Cell, task: TaskSignals, device: DeviceState) -> Decision:
    """Steps 4-8: score against the adjusted threshold, then the cloud latency check."""
    # Step 4. Same operand order as the seed's TaskRouter, so both give identical floats.
    length_term, intent_term, lm_term = score_terms(cell, task)
    score = length_term + intent_term + lm_term
    theta, adjustments = effective_threshold(cell, device)
    route: Route
    decided_by: DecidedBy
    predicted: float | None
    if score < theta:  # step 6
        route, decided_by, predicted = "device", "threshold", None
    else:  # step 7
        predicted = predicted_cloud_ms(task, device)
        if predicted > cell.latency_budget_ms:
            route, decided_by = "device", "latency"
        else:  # step 8
            route, decided_by = cell.cloud_route, "threshold"
    return _decision(
        cell,
        route,
        decided_by,
        score=score,
        threshold=theta,
        adjustments=adjustments,
        predicted_cloud_ms=predicted,
    )


def _decision(
    cell: Cell,
    route: Route,
    decided_by: DecidedBy,
    *,
    score: float | None = None,
    threshold: float | None = None,
    adjustments: tuple[Adjustment, ...] = (),
    predicted_cloud_ms: float | None = None,
    queue_until_online: bool = False,
) -> Decision:
    """A decision under the cell's base threshold and latency budget, with the numbers the
    deciding step had computed (none for steps 1-3)."""
    return Decision(
        route=route,
        decided_by=decided_by,
        base_threshold=cell.threshold,
        latency_budget_ms=cell.latency_budget_ms,
        score=score,
        threshold=threshold,
        adjustments=adjustments,
        predicted_cloud_ms=predicted_cloud_ms,
        queue_until_online=queue_until_online,
    )


def effective_threshold(cell: Cell, device: DeviceState) -> tuple[float, tuple[Adjustment, ...]]:
    """Step 5: theta after network, load and cloud-pressure adjustments, clamped to [0, 1]."""
    theta = cell.threshold
    adjustments: list[Adjustment] = []
    # One raise for a bad network, however many of its signals are bad.
    if device.rtt_ms > cell.rtt_high_ms or device.bandwidth_kbps < cell.bandwidth_low_kbps:
        theta += cell.theta_raise
        adjustments.append(("network", cell.theta_raise))
    if device.device_load >= cell.load_busy:
        theta -= cell.theta_lower
        adjustments.append(("load", -cell.theta_lower))
    if device.cloud_pressure:
        theta += device.cloud_pressure
        adjustments.append(("cloud_pressure", device.cloud_pressure))
    clamped = min(1.0, max(0.0, theta))
    if clamped != theta:
        adjustments.append(("clamp", clamped - theta))
    return clamped, tuple(adjustments)


def predicted_cloud_ms(task: TaskSignals, device: DeviceState) -> float:
    """Step 7's estimate `D·8/B + RTT + T_infer`; no bandwidth means the upload never ends."""
    if device.bandwidth_kbps <= 0:
        return math.inf
    # bytes * 8 = bits; bits / (kilobits per second) = milliseconds.
    return task.upload_bytes * 8 / device.bandwidth_kbps + device.rtt_ms + device.cloud_infer_ms


def _sides_used(route: Route) -> tuple[Side, ...]:
    if route == "device":
        return ("device",)
    if route == "cloud":
        return ("cloud",)
    return ("device", "cloud")


def _lookup(document: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = document
    for depth, key in enumerate(path):
        if not isinstance(value, Mapping):
            raise CellDocumentError(f"cell field {'.'.join(path[:depth])!r} must be an object")
        if key not in value:
            raise CellDocumentError(f"cell is missing field {'.'.join(path[: depth + 1])!r}")
        value = value[key]
    return value


def _text(document: Mapping[str, Any], *path: str) -> str:
    value = _lookup(document, path)
    if not isinstance(value, str):
        raise CellDocumentError(f"cell field {'.'.join(path)!r} must be a string")
    return value


def _number(document: Mapping[str, Any], *path: str) -> float:
    value = _lookup(document, path)
    # bool is an int subclass; JSON true must not read as 1.0.
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise CellDocumentError(f"cell field {'.'.join(path)!r} must be a finite number")
    return float(value)


def _integer(document: Mapping[str, Any], *path: str) -> int:
    value = _lookup(document, path)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise CellDocumentError(f"cell field {'.'.join(path)!r} must be an integer")
    return int(value)


def _flag(document: Mapping[str, Any], *path: str) -> bool:
    value = _lookup(document, path)
    # Strict: a string "false" is truthy, and upload.allowed guards private data.
    if not isinstance(value, bool):
        raise CellDocumentError(f"cell field {'.'.join(path)!r} must be true or false")
    return value


# Where each field of Cell sits in a cell of a policy document and how it is read, in the
# order of Cell's fields: from_document reads by it, to_document writes it back in that order.
_CELL_FIELDS: Final[tuple[tuple[str, tuple[str, ...], Callable[..., Any]], ...]] = (
    ("task_type", ("task_type",), _text),
    ("latency_budget", ("latency_budget",), _text),
    ("privacy_tier", ("privacy_tier",), _text),
    ("mode", ("mode",), _text),
    ("threshold", ("threshold",), _number),
    ("weight_length", ("weights", "length"), _number),
    ("weight_intent", ("weights", "intent"), _number),
    ("weight_lm", ("weights", "lm"), _number),
    ("length_norm_tokens", ("length_norm_tokens",), _integer),
    ("latency_budget_ms", ("latency_budget_ms",), _integer),
    ("cloud_timeout_ms", ("cloud_timeout_ms",), _integer),
    ("fallback", ("fallback",), _text),
    ("upload_allowed", ("upload", "allowed"), _flag),
    ("upload_deidentify", ("upload", "deidentify"), _flag),
    ("upload_max_bytes", ("upload", "max_bytes"), _integer),
    ("rtt_high_ms", ("network", "rtt_high_ms"), _number),
    ("bandwidth_low_kbps", ("network", "bandwidth_low_kbps"), _number),
    ("theta_raise", ("network", "theta_raise"), _number),
    ("load_busy", ("load", "busy"), _number),
    ("theta_lower", ("load", "theta_lower"), _number),
    ("cache_ttl_s", ("cache_ttl_s",), _integer),
)
