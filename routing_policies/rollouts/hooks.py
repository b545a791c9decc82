"""Where the parts above rollouts plug into it, which never imports them; each registers when
the app is ready (`RoutingPoliciesConfig.ready`):

- the gate of change governance (reviews, `reviews/rollout_gate.py`): freezes and approvals
  around a rollout's transitions. Until one is registered every gated transition is refused,
  so a missing registration can never let a change through that needed an approval;
- the fleet's convergence (devices, `devices.selectors.fleet_convergence`), which the rollout
  status shows.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from django.core.exceptions import ImproperlyConfigured

from controlplane.exceptions import ApplicationError

from ..policies.audit import Actor
from ..policies.models import Fleet, PolicyVersion
from .models import Rollout

# The changes of rollouts that may need another publisher's approval (ChangeRequest.Kind).
GatedChange = Literal["rollout_start", "switch"]


class ApprovalConsume(Protocol):
    """When the fleet needs an approval for `kind`, mark the approved request of `version` done
    (in the caller's transaction), else refuse; `needed`: the fleet's setting when the caller
    read it already (None: read it here); `request_open`: whether `version` has an open request
    of `kind`, when the caller read it already (None: read here)."""

    def __call__(
        self,
        *,
        actor: Actor,
        fleet: Fleet,
        kind: GatedChange,
        version: PolicyVersion,
        needed: bool | None = None,
        request_open: bool | None = None,
    ) -> Any: ...


class FreezeRefuse(Protocol):
    """Refuse `doing` (starting or advancing a rollout) while the fleet is frozen."""

    def __call__(self, *, fleet: Fleet, doing: str) -> None: ...


class FrozenConflict(Protocol):
    """The refusal of `doing` while the freeze `freeze_id` holds (for a caller that read it)."""

    def __call__(self, *, freeze_id: int, reason: str, doing: str) -> ApplicationError: ...


class FreezeAfterRollback(Protocol):
    """Freeze the fleet's rollouts after an automatic rollback of `rollout`."""

    def __call__(self, *, fleet: Fleet, rollout: Rollout, reason: str) -> Any: ...


@dataclass(frozen=True)
class RolloutGate:
    """Governance's checks and records around rollout transitions (docs/governance.md)."""

    freeze_refuse: FreezeRefuse
    frozen_conflict: FrozenConflict
    approval_consume: ApprovalConsume
    freeze_after_rollback: FreezeAfterRollback
    # The fleet's freeze as the rollout status shows it (None when it has none).
    freeze_status: Callable[[int], dict[str, Any] | None]
    # Query expressions, for a fleet (its id, or an expression of it) and a gated change, of
    # the fleet's open freeze, whether the change needs an approval and whether the version
    # annotated has an open change request of its kind: `freeze_id`, `freeze_reason`,
    # `needs_approval`, `request_open`, read with the change's target version in one round trip
    # (a switch and a rollout's start are on the path of every device's push).
    change_annotations: Callable[[Any, GatedChange], dict[str, Any]]


_gate: RolloutGate | None = None


def rollout_gate_register(gate: RolloutGate) -> None:
    """Install governance's gate (one per process; a second call replaces the first)."""
    global _gate
    _gate = gate


def rollout_gate() -> RolloutGate:
    """The installed gate; without one, no gated transition may happen."""
    if _gate is None:
        raise ImproperlyConfigured(
            "No rollout gate is registered: routing_policies.reviews registers it when the "
            "app is ready (RoutingPoliciesConfig.ready)."
        )
    return _gate


# The fleet's convergence: per version, devices assigned, acked and online; propagation.
ConvergenceReader = Callable[[Fleet], dict[str, Any]]
_convergence: ConvergenceReader | None = None


def convergence_reader_register(reader: ConvergenceReader) -> None:
    """Install the reader of a fleet's convergence (a second call replaces the first)."""
    global _convergence
    _convergence = reader


def fleet_convergence_of(fleet: Fleet) -> dict[str, Any]:
    """The fleet's convergence, as the registered reader computes it."""
    if _convergence is None:
        raise ImproperlyConfigured(
            "No convergence reader is registered: routing_policies.devices registers it when "
            "the app is ready (RoutingPoliciesConfig.ready)."
        )
    return _convergence(fleet)
