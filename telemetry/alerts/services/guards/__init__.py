"""Guarded rollouts: set a rollout's guards; judge them and roll back or advance on their word.

A firing guard rolls the rollout back through `routing_policies.services.rollout_rollback`
(audited as `system`, with the guard's sentence as the reason). When every guard is quiet for
the stage's bake time and auto-advance is on, the rollout advances (at 100% it completes).
Too few events is `insufficient`: it stops the bake clock and never counts as quiet.

The parts: `input` turns what a person sends (typed by `alerts.schemas`) into what is stored,
`setting` stores it, `evaluate` reads a rollout's facts and judges its guards, `apply` writes
what the verdict says.
"""

from ...limits import (
    DEFAULT_BAKE_MINUTES,
    MAX_BAKE_MINUTES,
    MAX_CONFIDENCE,
    MAX_EXPOSURE,
    MAX_EXTENSIONS,
    MAX_GUARDS,
    MIN_CONFIDENCE,
)
from ...presets import DEFAULT_GUARDS, PRESETS, QUALITY_GUARD, QUALITY_GUARDS, STATISTICAL_GUARDS
from .evaluate import guards_evaluate
from .input import guard_input_defaults, guard_options_validate
from .setting import rollout_guards_set, rollout_start_guarded

__all__ = [
    "DEFAULT_BAKE_MINUTES",
    "DEFAULT_GUARDS",
    "MAX_BAKE_MINUTES",
    "MAX_CONFIDENCE",
    "MAX_EXPOSURE",
    "MAX_EXTENSIONS",
    "MAX_GUARDS",
    "MIN_CONFIDENCE",
    "PRESETS",
    "QUALITY_GUARD",
    "QUALITY_GUARDS",
    "STATISTICAL_GUARDS",
    "guard_input_defaults",
    "guard_options_validate",
    "guards_evaluate",
    "rollout_guards_set",
    "rollout_start_guarded",
]
