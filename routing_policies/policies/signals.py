"""Where the parts above policies plug in: policies imports none of them.

Signals of the policy writes, sent inside the service's transaction (a receiver that raises
refuses the write, and nothing is saved), and the fleet's running state as the pages show it.
The receivers and the providers are connected in `RoutingPoliciesConfig.ready()`: rollouts gives
a new fleet its routing row and its first published version to its devices, reviews refuses a
publish that needs an approval it does not have (routing_policies/*/receivers.py).
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.dispatch import Signal

from .models import Fleet, PolicyVersion

# A fleet was created (kwargs: actor, fleet).
fleet_created = Signal()
# The draft is about to become the published `version` (number and etag set, not saved yet;
# kwargs: actor, fleet, version): a receiver that raises refuses the publish.
version_publishing = Signal()
# `version` was published (saved; kwargs: actor, fleet, version).
version_published = Signal()


@dataclass(frozen=True)
class FleetRunning:
    """What the fleet's devices run, as the rollouts part reads it: `of_fleet(fleet)` the
    state of one fleet (`of_fleet(fleet=)`), `annotations()` the same for a list of fleets
    (`stable_number`, `candidate_number`, `candidate_stage`)."""

    of_fleet: Callable[..., dict[str, Any]]
    annotations: Callable[[], dict[str, Any]]


_running: FleetRunning | None = None


def fleet_running_register(running: FleetRunning) -> None:
    """Install the reader of what fleets run (one per process; a second call replaces it)."""
    global _running
    _running = running


def fleet_running(*, fleet: Fleet) -> dict[str, Any]:
    """What the fleet's devices run now (nothing known without the rollouts part)."""
    if _running is None:
        return {"stable": None, "rollout": None, "stable_share": 100, "latest": None, "idle": None}
    return _running.of_fleet(fleet=fleet)


def fleet_running_annotations() -> dict[str, Any]:
    """The annotations of a fleet list saying what each fleet runs."""
    return _running.annotations() if _running is not None else {}


# --- the policy lab (lab/, docs/lab.md) -------------------------------------------------------


@dataclass(frozen=True)
class LabPanels:
    """What the lab shows on policy pages: the draft's latest backtest headline beside
    Publish, and on the rollout page the backtest's prediction for the candidate next to the
    candidate cohort's observed figures. Each answers None when it has nothing to show."""

    draft_headline: Callable[[Fleet, PolicyVersion], dict[str, Any] | None]
    rollout_prediction: Callable[[Fleet, dict[str, Any]], dict[str, Any] | None]


_lab: LabPanels | None = None


def lab_panels_register(panels: LabPanels) -> None:
    """Install the lab's panels (one per process; a second call replaces the first)."""
    global _lab
    _lab = panels


def lab_draft_headline(*, fleet: Fleet, draft: PolicyVersion) -> dict[str, Any] | None:
    """The draft's backtest headline (None without the lab or a backtest)."""
    return _lab.draft_headline(fleet, draft) if _lab is not None else None


def lab_rollout_prediction(*, fleet: Fleet, rollout: dict[str, Any]) -> dict[str, Any] | None:
    """Predicted vs observed figures of the rollout's candidate (None without the lab)."""
    return _lab.rollout_prediction(fleet, rollout) if _lab is not None else None


# --- segments (routing_policies.segments, docs/segments.md) ----------------------------------
# A version's overrides name segments of its fleet; policies never imports segments (a part
# above it), so the segments part registers the reader of a fleet's rules when the app is ready.

SegmentRules = Callable[[Fleet], dict[str, dict[str, Any]]]
_segment_rules: SegmentRules | None = None


def segment_rules_register(reader: SegmentRules) -> None:
    """Install the reader of a fleet's segments (name -> rule; a second call replaces it)."""
    global _segment_rules
    _segment_rules = reader


def segment_rules(*, fleet: Fleet) -> dict[str, dict[str, Any]]:
    """The fleet's segments by name, each its rule, in their list order (none without the
    segments part: every override then names an unknown segment)."""
    return _segment_rules(fleet) if _segment_rules is not None else {}
