"""Guards, the input: the guard set a person sends, as the services take it.

Each option's type and range is the input serializer's (`alerts.schemas`,
`RolloutGuardsInputSerializer`), which the API runs and which checks the options another part
sends through `rollout_start_guarded`; here the guard list (a preset name or guards whose
threshold's range depends on their metric and comparison) and the bake time (minutes, or
minutes per stage) become what is stored; every bad field is named (docs/alerts.md).
"""

from __future__ import annotations

import math
from typing import Any, Final

from controlplane.api import input_validate
from controlplane.exceptions import ValidationFailed
from controlplane.validators import is_whole_number
from routing_policies.models import Rollout

from ...judging import GUARD_METRICS, RATE_METRICS
from ...limits import (
    DEFAULT_BAKE_MINUTES,
    MAX_BAKE_MINUTES,
    MAX_CONFIDENCE,
    MAX_GUARDS,
    MAX_MIN_SAMPLES,
    MIN_CONFIDENCE,
)
from ...models import GuardComparison, GuardKind, Metric
from ...presets import PRESETS
from ...schemas import RolloutGuardsInputSerializer
from ...sequential import QUANTILE_METRICS, SEQUENTIAL_METRICS
from ..problems import field_problem

GUARDS_INVALID: Final = "The rollout guards are invalid."

SEQUENTIAL_FIELDS: Final = frozenset(
    {"kind", "metric", "tolerance", "confidence", "per_cell", "min_samples"}
)


def guard_options_validate(options: dict[str, Any]) -> dict[str, Any]:
    """The guard options of a start or a PUT, typed by the API's input serializer (an unknown
    option refused): what `rollout_guards_set` takes as keyword arguments."""
    return input_validate(RolloutGuardsInputSerializer, options, message=GUARDS_INVALID)


def _number_within(value: object, low: float, high: float) -> bool:
    """A JSON number (not a boolean) from `low` to `high`."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and low <= value <= high
    )


def _samples_problem(samples: object, where: str) -> list[dict[str, str]]:
    if is_whole_number(samples, 0, MAX_MIN_SAMPLES):
        return []
    return [field_problem(f"{where}.min_samples", "a whole number ≥ 0")]


def _clean_sequential(
    guard: dict[str, Any], where: str, samples: object
) -> tuple[dict[str, Any], list[dict[str, str]]]:
    problems: list[dict[str, str]] = []
    metric, tolerance = guard.get("metric"), guard.get("tolerance")
    confidence, per_cell = guard.get("confidence", 0.95), guard.get("per_cell", True)
    for name in sorted(set(guard) - SEQUENTIAL_FIELDS):
        problems.append(field_problem(f"{where}.{name}", "unknown for a sequential guard"))
    if metric not in SEQUENTIAL_METRICS:
        problems.append(
            field_problem(f"{where}.metric", f"one of {', '.join(sorted(SEQUENTIAL_METRICS))}")
        )
    limit = 10.0 if metric in QUANTILE_METRICS else 1.0
    if not _number_within(tolerance, 0, limit):
        problems.append(
            field_problem(
                f"{where}.tolerance",
                "a regression from 0 to 10 (0.2 is 20% slower)"
                if limit > 1
                else "a fraction from 0 to 1 (0.01 is 1 pt)",
            )
        )
    if not _number_within(confidence, MIN_CONFIDENCE, MAX_CONFIDENCE):
        problems.append(
            field_problem(f"{where}.confidence", f"from {MIN_CONFIDENCE} to {MAX_CONFIDENCE}")
        )
    if not isinstance(per_cell, bool):
        problems.append(field_problem(f"{where}.per_cell", "a boolean"))
    problems += _samples_problem(samples, where)
    cleaned = {
        "kind": GuardKind.SEQUENTIAL,
        "metric": metric,
        "comparison": GuardComparison.ABOVE_STABLE_BY,
        "threshold": tolerance,
        "confidence": confidence,
        "per_cell": per_cell,
        "min_samples": samples,
    }
    return cleaned, problems


def _threshold_problem(metric: object, comparison: object, threshold: object) -> str | None:
    """Why a fixed guard's threshold is refused: a share is a fraction; a difference of two
    shares may be negative (the candidate must beat stable)."""
    if not _number_within(threshold, -1e9, 1e9):
        return "a finite number"
    if metric in RATE_METRICS and comparison == GuardComparison.ABOVE_STABLE_BY:
        if not _number_within(threshold, -1, 1):
            return "a difference of shares, a fraction from -1 to 1 (0.02 is 2 pts)"
    elif metric in RATE_METRICS and not _number_within(threshold, 0, 1):
        return "a share, a fraction from 0 to 1 (0.02 is 2%)"
    return None


def _clean_fixed(
    guard: dict[str, Any], where: str, samples: object
) -> tuple[dict[str, Any], list[dict[str, str]]]:
    problems: list[dict[str, str]] = []
    metric, comparison = guard.get("metric"), guard.get("comparison")
    threshold = guard.get("threshold")
    if metric not in GUARD_METRICS:
        problems.append(
            field_problem(f"{where}.metric", f"one of {', '.join(sorted(GUARD_METRICS))}")
        )
    if comparison not in GuardComparison.values:
        problems.append(
            field_problem(f"{where}.comparison", f"one of {', '.join(GuardComparison.values)}")
        )
    if (why := _threshold_problem(metric, comparison, threshold)) is not None:
        problems.append(field_problem(f"{where}.threshold", why))
    problems += _samples_problem(samples, where)
    cleaned = {
        "kind": GuardKind.FIXED,
        "metric": metric,
        "comparison": comparison,
        "threshold": threshold,
        "min_samples": samples,
    }
    return cleaned, problems


def guards_clean(guards: object, *, min_samples: int) -> list[dict[str, Any]]:
    """A preset's guards, or the guards as sent, each checked (its metric, comparison and
    threshold together; its own `min_samples` or the set's); raise ValidationFailed naming
    every bad field."""
    if guards is None:
        guards = "default"
    if isinstance(guards, str) and guards in PRESETS:
        guards = [dict(g) for g in PRESETS[guards]]
    if not isinstance(guards, list) or not guards or len(guards) > MAX_GUARDS:
        raise ValidationFailed(
            f'`guards` is a list of 1 to {MAX_GUARDS} guards, "default", "statistical" or '
            '"quality".',
            details=[field_problem("guards", "a list")],
        )
    problems: list[dict[str, str]] = []
    cleaned = []
    for index, guard in enumerate(guards):
        where = f"guards[{index}]"
        if not isinstance(guard, dict):
            problems.append(field_problem(where, "an object with metric, comparison, threshold"))
            continue
        kind = guard.get("kind", GuardKind.FIXED)
        if kind not in GuardKind.values:
            problems.append(field_problem(f"{where}.kind", "fixed or sequential"))
            continue
        clean = _clean_sequential if kind == GuardKind.SEQUENTIAL else _clean_fixed
        one, found = clean(guard, where, guard.get("min_samples", min_samples))
        problems.extend(found)
        cleaned.append(one)
    if problems:
        raise ValidationFailed(GUARDS_INVALID, details=problems)
    return cleaned


def bake_clean(bake_minutes: object) -> dict[str, int]:
    """The bake time per stage: minutes at every stage, or per stage (a missing stage bakes
    0); null is the default."""
    if bake_minutes is None:  # as for the guards: null is the default
        bake_minutes = DEFAULT_BAKE_MINUTES
    if isinstance(bake_minutes, int) and not isinstance(bake_minutes, bool):
        bake_minutes = {str(stage): bake_minutes for stage in Rollout.STAGES}
    if isinstance(bake_minutes, dict):
        bake = {str(k): v for k, v in bake_minutes.items()}
        if set(bake) <= {str(s) for s in Rollout.STAGES} and all(
            is_whole_number(v, 0, MAX_BAKE_MINUTES) for v in bake.values()
        ):
            return {str(s): int(bake.get(str(s), 0)) for s in Rollout.STAGES}
    raise ValidationFailed(
        f"`bake_minutes` is minutes from 0 to {MAX_BAKE_MINUTES}, or one per stage: "
        '{"5": 10, "25": 20, "100": 30}.',
        details=[field_problem("bake_minutes", "minutes, or minutes per stage 5, 25, 100")],
    )


def guard_input_defaults() -> dict[str, Any]:
    """The defaults of `rollout_guards_set`, for forms and the command."""
    return {
        "guards": [dict(g) for g in PRESETS["default"]],
        "bake_minutes": DEFAULT_BAKE_MINUTES,
        "auto_advance": False,
        "window_minutes": 10,
        "min_samples": 50,
        "metrics": {m.value: m.label for m in Metric if m.value in GUARD_METRICS},
    }
