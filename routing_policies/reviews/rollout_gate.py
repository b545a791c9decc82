"""Change governance plugged into rollouts (which never imports reviews): the freeze and
approval checks around a rollout's start, advance and a switch, the freeze after an automatic
rollback, and the freeze the rollout status shows. Registered by `RoutingPoliciesConfig.ready`."""

from typing import Any

from django.db.models import Subquery, Value
from django.db.models.functions import Coalesce

from ..policies.models import Fleet
from ..rollouts.hooks import RolloutGate, rollout_gate_register
from .gate import (
    approval_consume,
    fleet_freeze_open,
    freeze_after_rollback,
    freeze_refuse,
    frozen_conflict,
)
from .models import FleetFreeze, ReviewSettings
from .selectors import freeze_out


def _freeze_status(fleet_id: int) -> dict[str, Any] | None:
    return freeze_out(fleet_freeze_open(fleet_id=fleet_id))


def _switch_annotations(fleet: Fleet) -> dict[str, Any]:
    """The fleet's open freeze and whether a switch needs an approval, as subqueries: the same
    rows as `fleet_freeze_open` and `review_settings_of` read."""
    open_freeze = FleetFreeze.objects.filter(fleet=fleet, released_at__isnull=True).order_by(
        "-frozen_at", "-id"
    )
    needs_default = ReviewSettings._meta.get_field("rollout_needs_approval").default
    return {
        "freeze_id": Subquery(open_freeze.values("pk")[:1]),
        "freeze_reason": Subquery(open_freeze.values("reason")[:1]),
        "needs_approval": Coalesce(
            Subquery(
                ReviewSettings.objects.filter(fleet=fleet).values("rollout_needs_approval")[:1]
            ),
            Value(needs_default),
        ),
    }


def register() -> None:
    """Install governance's gate around rollout transitions."""
    rollout_gate_register(
        RolloutGate(
            freeze_refuse=freeze_refuse,
            frozen_conflict=frozen_conflict,
            approval_consume=approval_consume,
            freeze_after_rollback=freeze_after_rollback,
            freeze_status=_freeze_status,
            switch_annotations=_switch_annotations,
        )
    )
