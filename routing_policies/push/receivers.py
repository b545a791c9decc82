"""The push tier hears what the parts below it announce (they never import it) and sends it to
every process once the change commits: a fleet's new assignment and cloud pressure (rollouts),
a device token revoked or replaced (devices). Connected by `RoutingPoliciesConfig.ready`."""

from typing import Any

from django.db import transaction

from ..assignment import FleetAssignment
from ..devices.signals import device_token_revoked
from ..rollouts.signals import assignment_changed, cloud_pressure_changed
from . import token_cache
from .frames import assignment_message, cloud_pressure_message, revoke_message
from .publish import publish_on_commit


def _assignment_changed(*, fleet_id: int, assignment: FleetAssignment, **_: Any) -> None:
    publish_on_commit(assignment_message(fleet_id=fleet_id, assignment=assignment))


def _cloud_pressure_changed(*, fleet_id: int, theta_offset: float, until: float, **_: Any) -> None:
    publish_on_commit(
        cloud_pressure_message(fleet_id=fleet_id, theta_offset=theta_offset, until=until)
    )


def _device_token_revoked(*, fleet_id: int, device_pk: int, token_hash: str, **_: Any) -> None:
    # This process forgets the token at once; every process closes the socket opened with it
    # (and forgets it too) when the message arrives.
    transaction.on_commit(lambda: token_cache.forget(token_hash))
    publish_on_commit(revoke_message(fleet_id=fleet_id, device_pk=device_pk, token_hash=token_hash))


def connect() -> None:
    """Hear the announcements of rollouts and devices (idempotent)."""
    assignment_changed.connect(_assignment_changed, dispatch_uid="push.assignment_changed")
    cloud_pressure_changed.connect(
        _cloud_pressure_changed, dispatch_uid="push.cloud_pressure_changed"
    )
    device_token_revoked.connect(_device_token_revoked, dispatch_uid="push.device_token_revoked")
