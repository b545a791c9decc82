"""How rollouts plugs into policies (which never imports it): a new fleet gets its routing row,
a fleet's first published version becomes what its devices run, and the policy pages read what
fleets run from here. Connected in `RoutingPoliciesConfig.ready()`."""

from typing import Any

from django.db.models import F, OuterRef, Subquery

from ..assignment import FleetAssignment
from ..policies import signals
from ..policies.models import Fleet, PolicyVersion
from .models import FleetRouting, Rollout
from .selectors import fleet_running, open_rollouts
from .signals import assignment_changed


def fleet_routing_create(sender: type, *, fleet: Fleet, **_: Any) -> None:
    """A new fleet's routing row (no stable version until its first publish)."""
    FleetRouting.objects.create(fleet=fleet)


def first_version_adopt(sender: type, *, fleet: Fleet, version: PolicyVersion, **_: Any) -> None:
    """A fleet's first published version is what its devices run, pushed once the publish
    commits; later versions reach devices only through a rollout or an explicit switch."""
    routing, _created = FleetRouting.objects.get_or_create(fleet=fleet)
    if routing.stable_version_id is not None:
        return
    routing.stable_version = version
    routing.save(update_fields=["stable_version", "updated_at"])
    # The push tier sends it once the publish commits (push/receivers.py).
    assignment_changed.send(
        sender=Rollout, fleet_id=fleet.pk, assignment=FleetAssignment(stable=version.number)
    )


def running_annotations() -> dict[str, Any]:
    """What each fleet of a list runs: its stable number, its open rollout's candidate, stage."""
    rollout = open_rollouts(OuterRef("pk"))
    return {
        "stable_number": F("routing__stable_version__number"),
        "candidate_number": Subquery(rollout.values("candidate__number")[:1]),
        "candidate_stage": Subquery(rollout.values("stage")[:1]),
    }


def connect() -> None:
    """Plug rollouts into the policy writes and pages."""
    signals.fleet_created.connect(
        fleet_routing_create, sender=Fleet, dispatch_uid="rollouts.fleet_routing_create"
    )
    signals.version_published.connect(
        first_version_adopt, sender=PolicyVersion, dispatch_uid="rollouts.first_version_adopt"
    )
    signals.fleet_running_register(
        signals.FleetRunning(of_fleet=fleet_running, annotations=running_annotations)
    )
