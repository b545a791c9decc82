"""The two structured fields of a rollout's guard set, each declared once (docs/alerts.md).

`GuardsField` (a preset's name, or a list of fixed and sequential guards) and
`BakeMinutesField` (minutes, or minutes per stage) check what is sent and give the OpenAPI
document its schema, both read from the same ranges below, so the check and the schema cannot
drift. `RolloutGuardsInputSerializer` (`alerts.schemas`) runs them for the API's PUT, a guarded
start (API, page, command, schedule) and the rollout page's form; every bad field is named.
"""

from __future__ import annotations

import math
from typing import Any, Final, NamedTuple

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlplane.validators import is_whole_number
from routing_policies.models import Rollout

from .judging import GUARD_METRICS, RATE_METRICS
from .limits import (
    DEFAULT_BAKE_MINUTES,
    MAX_BAKE_MINUTES,
    MAX_CONFIDENCE,
    MAX_GUARDS,
    MAX_MIN_SAMPLES,
    MIN_CONFIDENCE,
)
from .models import GuardComparison, GuardKind
from .presets import PRESETS
from .sequential import QUANTILE_METRICS, SEQUENTIAL_METRICS

DEFAULT_PRESET: Final = "default"
DEFAULT_CONFIDENCE: Final = 0.95
ANY_THRESHOLD: Final = 1e9  # a fixed guard's threshold is within ±this


class ThresholdRange(NamedTuple):
    """The threshold a fixed guard of these metrics and comparisons takes."""

    metrics: frozenset[str]
    comparisons: tuple[str, ...]
    low: float
    high: float
    words: str


class ToleranceRange(NamedTuple):
    """The tolerance (0 to `high`) a sequential guard of these metrics takes."""

    metrics: frozenset[str]
    high: int
    words: str


# A share is a fraction; a difference of two shares may be negative (the candidate must beat
# stable); any other metric's threshold is a finite number.
THRESHOLD_RANGES: Final = (
    ThresholdRange(
        RATE_METRICS,
        (GuardComparison.ABOVE.value,),
        0,
        1,
        "a share, a fraction from 0 to 1 (0.02 is 2%)",
    ),
    ThresholdRange(
        RATE_METRICS,
        (GuardComparison.ABOVE_STABLE_BY.value,),
        -1,
        1,
        "a difference of shares, a fraction from -1 to 1 (0.02 is 2 pts)",
    ),
    ThresholdRange(
        frozenset(GUARD_METRICS - RATE_METRICS),
        tuple(GuardComparison.values),
        -ANY_THRESHOLD,
        ANY_THRESHOLD,
        "a finite number",
    ),
)
# A sequential guard tolerates a regression of a share (a fraction) or of a latency quantile
# (a ratio: 0.2 is 20% slower).
TOLERANCE_RANGES: Final = (
    ToleranceRange(
        frozenset(SEQUENTIAL_METRICS - frozenset(QUANTILE_METRICS)),
        1,
        "a fraction from 0 to 1 (0.01 is 1 pt)",
    ),
    ToleranceRange(
        frozenset(QUANTILE_METRICS), 10, "a regression from 0 to 10 (0.2 is 20% slower)"
    ),
)
SEQUENTIAL_FIELDS: Final = frozenset(
    {"kind", "metric", "tolerance", "confidence", "per_cell", "min_samples"}
)
_SAMPLES: Final = {"type": "integer", "minimum": 0, "maximum": MAX_MIN_SAMPLES}
_MINUTES: Final = {"type": "integer", "minimum": 0, "maximum": MAX_BAKE_MINUTES}


def _fixed_schema(shape: ThresholdRange) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "metric": {"type": "string", "enum": sorted(shape.metrics)},
            "comparison": {"type": "string", "enum": list(shape.comparisons)},
            "threshold": {"type": "number", "minimum": shape.low, "maximum": shape.high},
            "min_samples": _SAMPLES,
            "kind": {"type": "string", "enum": [GuardKind.FIXED]},
        },
        "required": ["metric", "comparison", "threshold"],
    }


def _sequential_schema(shape: ToleranceRange) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "kind": {"type": "string", "enum": [GuardKind.SEQUENTIAL]},
            "metric": {"type": "string", "enum": sorted(shape.metrics)},
            "tolerance": {"type": "number", "minimum": 0, "maximum": shape.high},
            "confidence": {"type": "number", "minimum": MIN_CONFIDENCE, "maximum": MAX_CONFIDENCE},
            "per_cell": {"type": "boolean"},
            "min_samples": _SAMPLES,
        },
        "required": ["kind", "metric", "tolerance"],
        "additionalProperties": False,
    }


GUARDS_SCHEMA: Final[dict[str, Any]] = {
    "oneOf": [
        {"type": "string", "enum": sorted(PRESETS)},
        {
            "type": "array",
            "minItems": 1,
            "maxItems": MAX_GUARDS,
            "items": {
                "oneOf": [
                    *(_fixed_schema(shape) for shape in THRESHOLD_RANGES),
                    *(_sequential_schema(shape) for shape in TOLERANCE_RANGES),
                ]
            },
        },
    ],
    "nullable": True,
    "description": '"default" (or null), "statistical", "quality" (statistical and the '
    f"draft-kept rate at most 3 pts below stable), or a list of 1 to {MAX_GUARDS} guards; "
    "a fixed guard's share threshold is a fraction from 0 to 1 for `above` (0.02 is 2%) and "
    "from -1 to 1 for `above_stable_by` (0.02 is 2 points above stable); a "
    'sequential guard ("kind": "sequential") tolerates a regression: a fraction of a share '
    "from 0 to 1, or of a latency quantile from 0 to 10 (0.2: 20% slower)",
}
BAKE_MINUTES_SCHEMA: Final[dict[str, Any]] = {
    "oneOf": [
        _MINUTES,
        {
            "type": "object",
            "properties": {str(stage): _MINUTES for stage in Rollout.STAGES},
            "additionalProperties": False,
        },
    ],
    "nullable": True,
    "description": f"minutes from 0 to {MAX_BAKE_MINUTES} at every stage "
    f"(null: {DEFAULT_BAKE_MINUTES}), "
    'or per stage: {"5": 10, "25": 20, "100": 30} (a missing stage bakes 0)',
}


def _within(value: object, low: float, high: float) -> bool:
    """A JSON number (not a boolean) from `low` to `high`."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and low <= value <= high
    )


def _name(value: object) -> str:
    """A name as sent, or "" for anything that is not a string (a list or an object must not
    reach a set's lookup: it is unhashable, and it is no name)."""
    return value if isinstance(value, str) else ""


def _threshold_problem(metric: object, comparison: object, threshold: object) -> str | None:
    """Why a fixed guard's threshold is refused, or None."""
    shape = next(
        (s for s in THRESHOLD_RANGES if metric in s.metrics and comparison in s.comparisons),
        THRESHOLD_RANGES[-1],
    )
    if not _within(threshold, -ANY_THRESHOLD, ANY_THRESHOLD):
        return "a finite number"
    return None if _within(threshold, shape.low, shape.high) else shape.words


def _fixed_problems(guard: dict[str, Any]) -> dict[str, str]:
    problems = {}
    metric, comparison = _name(guard.get("metric")), _name(guard.get("comparison"))
    if metric not in GUARD_METRICS:
        problems["metric"] = f"one of {', '.join(sorted(GUARD_METRICS))}"
    if comparison not in GuardComparison.values:
        problems["comparison"] = f"one of {', '.join(GuardComparison.values)}"
    if (why := _threshold_problem(metric, comparison, guard.get("threshold"))) is not None:
        problems["threshold"] = why
    return problems


def _sequential_problems(guard: dict[str, Any]) -> dict[str, str]:
    problems = dict.fromkeys(
        sorted(set(guard) - SEQUENTIAL_FIELDS), "unknown for a sequential guard"
    )
    metric = _name(guard.get("metric"))
    if metric not in SEQUENTIAL_METRICS:
        problems["metric"] = f"one of {', '.join(sorted(SEQUENTIAL_METRICS))}"
    shape = next((s for s in TOLERANCE_RANGES if metric in s.metrics), TOLERANCE_RANGES[0])
    if not _within(guard.get("tolerance"), 0, shape.high):
        problems["tolerance"] = shape.words
    if not _within(guard.get("confidence", DEFAULT_CONFIDENCE), MIN_CONFIDENCE, MAX_CONFIDENCE):
        problems["confidence"] = f"from {MIN_CONFIDENCE} to {MAX_CONFIDENCE}"
    if not isinstance(guard.get("per_cell", True), bool):
        problems["per_cell"] = "a boolean"
    return problems


def _guard_problems(guard: object) -> dict[str, str] | str:
    """What is wrong with one guard as sent: per field, or of the whole (not an object)."""
    if not isinstance(guard, dict):
        return "an object with metric, comparison, threshold"
    kind = _name(guard.get("kind", GuardKind.FIXED))
    if kind not in GuardKind.values:
        return {"kind": "fixed or sequential"}
    problems = (
        _sequential_problems(guard) if kind == GuardKind.SEQUENTIAL else _fixed_problems(guard)
    )
    if "min_samples" in guard and not is_whole_number(guard["min_samples"], 0, MAX_MIN_SAMPLES):
        problems["min_samples"] = "a whole number ≥ 0"
    return problems


def _guard_input(guard: dict[str, Any]) -> dict[str, Any]:
    """One checked guard with its defaults, in the shape it is sent (so it checks again); a
    guard's own `min_samples` only where it has one."""
    own = {"min_samples": guard["min_samples"]} if "min_samples" in guard else {}
    if guard.get("kind") == GuardKind.SEQUENTIAL:
        return {
            "kind": GuardKind.SEQUENTIAL.value,
            "metric": guard["metric"],
            "tolerance": guard["tolerance"],
            "confidence": guard.get("confidence", DEFAULT_CONFIDENCE),
            "per_cell": guard.get("per_cell", True),
            **own,
        }
    return {
        "kind": GuardKind.FIXED.value,
        "metric": guard["metric"],
        "comparison": guard["comparison"],
        "threshold": guard["threshold"],
        **own,
    }


def preset_guards(name: str) -> list[dict[str, Any]]:
    """A preset's guards, as the field gives them."""
    return [_guard_input(dict(guard)) for guard in PRESETS[name]]


@extend_schema_field(GUARDS_SCHEMA)
class GuardsField(serializers.JSONField):
    """A guard preset's name (null: the default one) or the guards as sent, each checked; the
    checked list of guards, a guard's own `min_samples` left out where the set's applies."""

    def form_value(self, text: str) -> str:
        """A page names a preset."""
        return text

    def run_validation(self, data: Any = serializers.empty) -> Any:
        return super().run_validation(DEFAULT_PRESET if data is None else data)

    def to_internal_value(self, data: Any) -> list[dict[str, Any]]:
        if isinstance(data, str) and data in PRESETS:
            return preset_guards(data)
        if not isinstance(data, list) or not data or len(data) > MAX_GUARDS:
            raise serializers.ValidationError(
                f'a list of 1 to {MAX_GUARDS} guards, "default", "statistical" or "quality"'
            )
        # Keyed by index, as a list field's item errors are: `guards[0].metric`.
        problems: dict[Any, Any] = {
            index: found for index, guard in enumerate(data) if (found := _guard_problems(guard))
        }
        if problems:
            raise serializers.ValidationError(problems)
        return [_guard_input(guard) for guard in data]


@extend_schema_field(BAKE_MINUTES_SCHEMA)
class BakeMinutesField(serializers.JSONField):
    """The bake time: minutes at every stage (null: the default), or per stage (a missing stage
    bakes 0); the minutes of each stage."""

    def form_value(self, text: str) -> int | str:
        """A page sends minutes at every stage."""
        return int(text) if text.strip().isdigit() else text

    def run_validation(self, data: Any = serializers.empty) -> Any:
        return super().run_validation(DEFAULT_BAKE_MINUTES if data is None else data)

    def to_internal_value(self, data: Any) -> dict[str, int]:
        stages = [str(stage) for stage in Rollout.STAGES]
        if is_whole_number(data, 0):
            data = dict.fromkeys(stages, data)
        if isinstance(data, dict):
            bake = {str(key): value for key, value in data.items()}
            if set(bake) <= set(stages) and all(
                is_whole_number(minutes, 0, MAX_BAKE_MINUTES) for minutes in bake.values()
            ):
                return {stage: bake.get(stage, 0) for stage in stages}
        raise serializers.ValidationError(
            f"a whole number of minutes from 0 to {MAX_BAKE_MINUTES}, or minutes per stage "
            "5, 25, 100"
        )
