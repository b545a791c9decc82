"""The MQTT link hears what the push tier hears (rollouts' assignment and cloud pressure, a
version published) and publishes the fleet's retained topics once the change commits.
Connected by `routing_policies.receivers` when MQTT_URL is set.

`robust`: a publish that fails (the broker away, the fleet deleted meanwhile) is logged and
never fails the request whose change committed; the link's reconcile publishes it later."""

from typing import Any

from django.db import transaction

from ..policies.models import PolicyVersion
from ..policies.signals import version_published
from ..rollouts.signals import assignment_changed, cloud_pressure_changed
from .publish import fleet_pressure_publish, fleet_state_publish, version_published_publish

_UIDS = {
    "assignment": "mqtt.assignment_changed",
    "pressure": "mqtt.cloud_pressure_changed",
    "version": "mqtt.version_published",
}


def _assignment_changed(*, fleet_id: int, **_: Any) -> None:
    # The state is read again under the fleet's lock after the commit (mqtt.publish): the
    # signal's assignment may already be older than what is committed by then.
    transaction.on_commit(lambda: fleet_state_publish(fleet_id=fleet_id), robust=True)


def _cloud_pressure_changed(*, fleet_id: int, **_: Any) -> None:
    transaction.on_commit(lambda: fleet_pressure_publish(fleet_id=fleet_id), robust=True)


def _version_published(*, version: PolicyVersion, **_: Any) -> None:
    fleet_id, number = version.fleet_id, version.number
    assert number is not None
    transaction.on_commit(
        lambda: version_published_publish(fleet_id=fleet_id, number=number), robust=True
    )


def connect() -> None:
    """Hear rollouts and policies (idempotent). Connect before rollouts' own receivers, so that
    a fleet's first version is retained before the state naming it (a publish's document goes
    first, then the state: its `published` and, for a fleet's first version, its stable)."""
    version_published.connect(
        _version_published, sender=PolicyVersion, dispatch_uid=_UIDS["version"]
    )
    assignment_changed.connect(_assignment_changed, dispatch_uid=_UIDS["assignment"])
    cloud_pressure_changed.connect(_cloud_pressure_changed, dispatch_uid=_UIDS["pressure"])


def disconnect() -> None:
    """Stop hearing them (tests that turn the link on for a while)."""
    version_published.disconnect(sender=PolicyVersion, dispatch_uid=_UIDS["version"])
    assignment_changed.disconnect(dispatch_uid=_UIDS["assignment"])
    cloud_pressure_changed.disconnect(dispatch_uid=_UIDS["pressure"])
