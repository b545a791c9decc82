"""Change governance plugged into rollouts (which never imports reviews): the freeze and
approval checks around a rollout's start, advance and a switch, the freeze after an automatic
rollback, and the freeze the rollout status shows. Registered by `RoutingPoliciesConfig.ready`."""

from typing import Any

from django.db.models import Exists, OuterRef, Subquery, Value
from django.db.models.functions import Coalesce

from ..rollouts.hooks import GatedChange, RolloutGate, rollout_gate_register
from .gate import (
    approval_consume,
    fleet_freeze_open,
    freeze_after_rollback,
    freeze_refuse,
    frozen_conflict,
)
from .models import ChangeRequest, FleetFreeze, ReviewSettings
from .selectors import freeze_out


def _freeze_status(fleet_id: int) -> dict[str, Any] | None:
    return freeze_out(fleet_freeze_open(fleet_id=fleet_id))


def _change_annotations(fleet_id: Any, kind: GatedChange) -> dict[str, Any]:
    """The fleet's open freeze, whether `kind` needs an approval and whether the version (the
    row annotated) has an open change request of `kind`, as subqueries: the same rows as
    `fleet_freeze_open`, `review_settings_of` and `approval_consume` read."""
    open_freeze = FleetFreeze.objects.filter(fleet_id=fleet_id, released_at__isnull=True).order_by(
        "-frozen_at", "-id"
    )
    needs_default = ReviewSettings._meta.get_field("rollout_needs_approval").default
    return {
        "freeze_id": Subquery(open_freeze.values("pk")[:1]),
        "freeze_reason": Subquery(open_freeze.values("reason")[:1]),
        "needs_approval": Coalesce(
            Subquery(
                ReviewSettings.objects.filter(fleet_id=fleet_id).values("rollout_needs_approval")[
                    :1
                ]
            ),
            Value(needs_default),
        ),
        "request_open": Exists(
            ChangeRequest.objects.filter(
                fleet_id=fleet_id,
                kind=kind,
                state=ChangeRequest.State.OPEN,
                version=OuterRef("pk"),
            )
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
            change_annotations=_change_annotations,
        )
    )
