"""Guards, the input: the guard set a person sends, checked field by field.

A preset name ("default", "statistical", "quality") or a list of guards, the bake time, the
window and the exposure a stage needs; every bad field is named (docs/alerts.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final

from controlplane.exceptions import ValidationFailed
from controlplane.validators import is_whole_number
from routing_policies.models import Rollout

from ...judging import (
    GUARD_METRICS,
    RATE_METRICS,
)
from ...limits import MAX_MIN_SAMPLES, MAX_WINDOW_MINUTES, MIN_WINDOW_MINUTES
from ...models import (
    GuardComparison,
    GuardKind,
    Metric,
    RolloutGuardSet,
)
from ...sequential import (
    QUANTILE_METRICS,
    SEQUENTIAL_METRICS,
)
from ..problems import field_problem

MAX_GUARDS = 12


# What "guarded" means when no guard is named: docs/alerts.md.
DEFAULT_GUARDS: tuple[dict[str, Any], ...] = (
    {"metric": "fallback_rate", "comparison": "above_stable_by", "threshold": 0.02},
    {"metric": "p95_budget", "comparison": "above", "threshold": 1.0},
    {"metric": "privacy_violations", "comparison": "above", "threshold": 0},
    {"metric": "cloud_share", "comparison": "above_stable_by", "threshold": 0.2},
)


# "statistical": anytime-valid intervals on candidate − stable, per cell, with the privacy
# guard kept critical (any violation rolls back: a rate's interval would wait for many).
STATISTICAL_GUARDS: tuple[dict[str, Any], ...] = (
    {"kind": "sequential", "metric": "cloud_share", "tolerance": 0.05},
    {"kind": "sequential", "metric": "fallback_rate", "tolerance": 0.01},
    {"kind": "sequential", "metric": "error_rate", "tolerance": 0.01},
    {"kind": "sequential", "metric": "p95_budget", "tolerance": 0.2},
    {"metric": "privacy_violations", "comparison": "above", "threshold": 0},
)


# The quality guard (issue #15): the candidate's draft-kept rate may fall at most 3 pts below
# stable's. Not in "statistical": a fleet whose devices report no refines would keep it
# collecting, and a collecting guard holds every stage. "quality" is "statistical" plus it.
QUALITY_GUARD: Final[dict[str, Any]] = {
    "kind": "sequential",
    "metric": "draft_kept_rate",
    "tolerance": 0.03,
}


QUALITY_GUARDS: tuple[dict[str, Any], ...] = (*STATISTICAL_GUARDS, QUALITY_GUARD)


PRESETS: Final = {
    "default": DEFAULT_GUARDS,
    "statistical": STATISTICAL_GUARDS,
    "quality": QUALITY_GUARDS,
}


SEQUENTIAL_FIELDS: Final = frozenset(
    {"kind", "metric", "tolerance", "confidence", "per_cell", "min_samples"}
)


MIN_CONFIDENCE: Final = 0.5


MAX_CONFIDENCE: Final = 0.999


DEFAULT_BAKE_MINUTES: Final = 10


MAX_BAKE_MINUTES: Final = 7 * 24 * 60  # a week at one stage


MAX_EXPOSURE: Final = 10**9


MAX_EXTENSIONS: Final = 5


@dataclass(frozen=True)
class CleanGuardSet:
    """A guard set as `guard_set_clean` accepted it, ready to store."""

    guards: list[dict[str, Any]]
    bake_minutes: dict[str, int]
    auto_advance: bool
    window_minutes: int
    exposure: dict[str, Any]


def guard_set_clean(
    *,
    guards: object,
    bake_minutes: object,
    auto_advance: object,
    window_minutes: object,
    min_samples: object,
    min_devices: object,
    min_events: object,
    stage_limit_minutes: object,
    max_extensions: object,
    on_expiry: object,
) -> CleanGuardSet:
    """Check a guard set as sent; raise ValidationFailed naming the bad field."""
    exposure = _clean_exposure(
        min_devices=min_devices,
        min_events=min_events,
        stage_limit_minutes=stage_limit_minutes,
        max_extensions=max_extensions,
        on_expiry=on_expiry,
    )
    if not isinstance(auto_advance, bool):
        raise ValidationFailed(
            "`auto_advance` is true or false.", details=[field_problem("auto_advance", "a boolean")]
        )
    if not is_whole_number(window_minutes, MIN_WINDOW_MINUTES, MAX_WINDOW_MINUTES):
        raise ValidationFailed(
            f"`window_minutes` is {MIN_WINDOW_MINUTES} to {MAX_WINDOW_MINUTES}.",
            details=[
                field_problem("window_minutes", f"{MIN_WINDOW_MINUTES} to {MAX_WINDOW_MINUTES}")
            ],
        )
    return CleanGuardSet(
        guards=_clean_guards(guards, min_samples),
        bake_minutes=_clean_bake(bake_minutes),
        auto_advance=auto_advance,
        window_minutes=window_minutes,
        exposure=exposure,
    )


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
    if (
        isinstance(tolerance, bool)
        or not isinstance(tolerance, int | float)
        or not 0 <= tolerance <= limit
    ):
        problems.append(
            field_problem(
                f"{where}.tolerance",
                "a regression from 0 to 10 (0.2 is 20% slower)"
                if limit > 1
                else "a fraction from 0 to 1 (0.01 is 1 pt)",
            )
        )
    if (
        isinstance(confidence, bool)
        or not isinstance(confidence, int | float)
        or not MIN_CONFIDENCE <= confidence <= MAX_CONFIDENCE
    ):
        problems.append(
            field_problem(f"{where}.confidence", f"from {MIN_CONFIDENCE} to {MAX_CONFIDENCE}")
        )
    if not isinstance(per_cell, bool):
        problems.append(field_problem(f"{where}.per_cell", "a boolean"))
    if not is_whole_number(samples, 0, MAX_MIN_SAMPLES):
        problems.append(field_problem(f"{where}.min_samples", "a whole number ≥ 0"))
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


def _clean_guards(guards: object, min_samples: object) -> list[dict[str, Any]]:
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
        if kind == GuardKind.SEQUENTIAL:
            one, found = _clean_sequential(guard, where, guard.get("min_samples", min_samples))
            problems.extend(found)
            cleaned.append(one)
            continue
        metric, comparison = guard.get("metric"), guard.get("comparison")
        threshold = guard.get("threshold")
        samples = guard.get("min_samples", min_samples)
        if metric not in GUARD_METRICS:
            problems.append(
                field_problem(f"{where}.metric", f"one of {', '.join(sorted(GUARD_METRICS))}")
            )
        if comparison not in GuardComparison.values:
            problems.append(
                field_problem(f"{where}.comparison", f"one of {', '.join(GuardComparison.values)}")
            )
        if (
            isinstance(threshold, bool)
            or not isinstance(threshold, int | float)
            or not math.isfinite(threshold)
            or not -1e9 <= threshold <= 1e9
        ):
            problems.append(field_problem(f"{where}.threshold", "a finite number"))
        elif metric in RATE_METRICS and comparison == GuardComparison.ABOVE_STABLE_BY:
            # A difference of two shares: a negative one asks the candidate to beat stable.
            if not -1 <= threshold <= 1:
                problems.append(
                    field_problem(
                        f"{where}.threshold",
                        "a difference of shares, a fraction from -1 to 1 (0.02 is 2 pts)",
                    )
                )
        elif metric in RATE_METRICS and not 0 <= threshold <= 1:
            problems.append(
                field_problem(f"{where}.threshold", "a share, a fraction from 0 to 1 (0.02 is 2%)")
            )
        if not is_whole_number(samples, 0, MAX_MIN_SAMPLES):
            problems.append(field_problem(f"{where}.min_samples", "a whole number ≥ 0"))
        cleaned.append(
            {
                "kind": GuardKind.FIXED,
                "metric": metric,
                "comparison": comparison,
                "threshold": threshold,
                "min_samples": samples,
            }
        )
    if problems:
        raise ValidationFailed("The rollout guards are invalid.", details=problems)
    return cleaned


def _clean_bake(bake_minutes: object) -> dict[str, int]:
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


def _whole(value: object, name: str, limit: int) -> int:
    if not is_whole_number(value, 0, limit):
        raise ValidationFailed(
            f"`{name}` is a whole number from 0 to {limit:,}.",
            details=[field_problem(name, f"0 to {limit}")],
        )
    return value


def _clean_exposure(
    *,
    min_devices: object,
    min_events: object,
    stage_limit_minutes: object,
    max_extensions: object,
    on_expiry: object,
) -> dict[str, Any]:
    if on_expiry not in RolloutGuardSet.OnExpiry.values:
        raise ValidationFailed(
            "`on_expiry` is rollback or hold.",
            details=[field_problem("on_expiry", "rollback or hold")],
        )
    return {
        "min_devices": _whole(min_devices, "min_devices", MAX_EXPOSURE),
        "min_events": _whole(min_events, "min_events", MAX_EXPOSURE),
        "stage_limit_minutes": _whole(stage_limit_minutes, "stage_limit_minutes", MAX_BAKE_MINUTES),
        "max_extensions": _whole(max_extensions, "max_extensions", MAX_EXTENSIONS),
        "on_expiry": on_expiry,
    }


def guard_input_defaults() -> dict[str, Any]:
    """The defaults of `rollout_guards_set`, for forms and the command."""
    return {
        "guards": [dict(g) for g in DEFAULT_GUARDS],
        "bake_minutes": 10,
        "auto_advance": False,
        "window_minutes": 10,
        "min_samples": 50,
        "metrics": {m.value: m.label for m in Metric if m.value in GUARD_METRICS},
    }
