"""Where another app plugs into routing_policies, which never imports it: rollout guards,
demo data and the policy lab's panels. Telemetry fills these in `TelemetryConfig.ready()`
(telemetry/apps.py), the lab its panels in `LabConfig.ready()` (lab/apps.py). (The notifiers of
change governance, reviews and freezes, register in `reviews.notify`.)

Without a registered guard extension a rollout starts unguarded, and asking for guards is
refused; without demo seeders the demo is the fleet and its users only.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from rest_framework import serializers

from controlplane.exceptions import ValidationFailed

from .policies.audit import Actor
from .policies.models import Fleet

# The lab's panels on policy pages are declared in policies (which the policy pages read).
from .policies.signals import LabPanels as LabPanels
from .policies.signals import lab_draft_headline as lab_draft_headline
from .policies.signals import lab_panels_register as lab_panels_register
from .policies.signals import lab_rollout_prediction as lab_rollout_prediction
from .rollouts.models import Rollout
from .rollouts.services import rollout_start


class GuardedStart(Protocol):
    """Start a rollout and, when `guard_options` is not empty, guard it, all or nothing. The one
    declaration of its arguments: a start (the dispatch below, a guard extension's) takes the
    guard options and hands the rest to `rollout_start` as they came."""

    def __call__(
        self,
        *,
        actor: Actor,
        fleet: Fleet,
        version: int,
        guard_options: dict[str, Any],
        holdback: int = 0,
        segment: str | None = None,
    ) -> Rollout: ...


class GuardStatus(Protocol):
    """A rollout's guards and their verdicts, or None when it has none."""

    def __call__(self, *, rollout_id: int) -> dict[str, Any] | None: ...


@dataclass(frozen=True)
class RolloutGuards:
    """What a guard extension adds to rollouts (docs/alerts.md)."""

    start: GuardedStart
    status: GuardStatus
    # The guard options of a start body (API), and the schema of those fields (OpenAPI).
    options_of: Callable[[dict[str, Any]], dict[str, Any]]
    start_fields: type[serializers.Serializer[Any]]


DemoSeeder = Callable[[Fleet], list[str]]

_guards: RolloutGuards | None = None
_demo_seeders: dict[str, DemoSeeder] = {}


def rollout_guards_register(guards: RolloutGuards) -> None:
    """Install the guard extension (one per process; a second call replaces the first)."""
    global _guards
    _guards = guards


def rollout_guards() -> RolloutGuards | None:
    """The installed guard extension, if any."""
    return _guards


def _start_guarded(*, guard_options: dict[str, Any], **start: Any) -> Rollout:
    """`rollout_start`, guarded by the extension when `guard_options` asks for guards."""
    if _guards is not None:
        return _guards.start(guard_options=guard_options, **start)
    if guard_options:
        raise ValidationFailed(
            "Rollout guards are not available in this deployment.",
            details=[{"field": name, "message": "not available"} for name in guard_options],
        )
    return rollout_start(**start)


rollout_start_guarded: GuardedStart = _start_guarded


def rollout_guard_status(*, rollout_id: int) -> dict[str, Any] | None:
    """The rollout's guards and verdicts (None without guards or without the extension)."""
    return _guards.status(rollout_id=rollout_id) if _guards is not None else None


def demo_seeder_register(name: str, seeder: DemoSeeder) -> None:
    """Add what `demo_seed` creates for the demo fleet besides the fleet (e.g. alert rules);
    registering a name again replaces its seeder."""
    _demo_seeders[name] = seeder


def demo_seeders() -> list[DemoSeeder]:
    """The registered demo seeders, in the order they were first registered."""
    return list(_demo_seeders.values())
