"""Guards, the input: the guard options as the services take them.

Every option's type and range, the guard list (a preset's name or guards whose threshold's range
depends on their metric and comparison) and the bake time included, is the input serializer's
(`alerts.schemas.RolloutGuardsInputSerializer`, its two structured fields in
`alerts.guard_fields`), which the API, the rollout page and a guarded start run; every bad field
is named (docs/alerts.md). Here: what a stored guard takes of a checked one, and the defaults.
"""

from __future__ import annotations

from typing import Any, Final

from controlplane.api import input_validate
from routing_policies.models import Rollout

from ...guard_fields import DEFAULT_PRESET
from ...judging import GUARD_METRICS
from ...limits import DEFAULT_BAKE_MINUTES
from ...models import GuardComparison, GuardKind, Metric
from ...presets import PRESETS
from ...schemas import RolloutGuardsInputSerializer

GUARDS_INVALID: Final = "The rollout guards are invalid."


def guard_options_validate(options: dict[str, Any]) -> dict[str, Any]:
    """The guard options of a start or a PUT, typed by the API's input serializer (an unknown
    option refused): what `rollout_guards_set` takes as keyword arguments."""
    return input_validate(RolloutGuardsInputSerializer, options, message=GUARDS_INVALID)


def guard_row(guard: dict[str, Any], *, min_samples: int) -> dict[str, Any]:
    """A checked guard as its row stores it: a sequential guard's tolerance is its threshold
    over stable; a guard without its own `min_samples` takes the set's."""
    samples = guard.get("min_samples", min_samples)
    if guard["kind"] == GuardKind.SEQUENTIAL:
        return {
            "kind": GuardKind.SEQUENTIAL,
            "metric": guard["metric"],
            "comparison": GuardComparison.ABOVE_STABLE_BY,
            "threshold": guard["tolerance"],
            "confidence": guard["confidence"],
            "per_cell": guard["per_cell"],
            "min_samples": samples,
        }
    return {
        "kind": GuardKind.FIXED,
        "metric": guard["metric"],
        "comparison": guard["comparison"],
        "threshold": guard["threshold"],
        "min_samples": samples,
    }


def bake_every_stage(minutes: int) -> dict[str, int]:
    """The same bake time at every stage."""
    return {str(stage): minutes for stage in Rollout.STAGES}


def guard_input_defaults() -> dict[str, Any]:
    """The defaults of `rollout_guards_set`, for forms and the command."""
    return {
        "guards": [dict(g) for g in PRESETS[DEFAULT_PRESET]],
        "bake_minutes": DEFAULT_BAKE_MINUTES,
        "auto_advance": False,
        "window_minutes": 10,
        "min_samples": 50,
        "metrics": {m.value: m.label for m in Metric if m.value in GUARD_METRICS},
    }
