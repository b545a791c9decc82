"""The guard presets a rollout names instead of a list of guards (docs/alerts.md).

Here, below the input serializers (`alerts.schemas`, whose schema lists the names) and the
guard services (which expand a name into its guards).
"""

from __future__ import annotations

from typing import Any, Final

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
