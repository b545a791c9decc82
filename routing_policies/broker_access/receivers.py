"""Broker access hears what devices announce (devices never imports it) and tells the broker
once the change commits: an enrolment (the device's client, with its new token), a revocation
(the client deleted, its session kicked). Only with MQTT_ACCESS=dynsec; the HTTP hooks need
no telling, they read the devices' table on every call. Connected by
`RoutingPoliciesConfig.ready`."""

from typing import Any

from django.db import transaction

from ..devices.models import Device
from ..devices.signals import device_enrolled, device_token_revoked
from .services import broker_device_grant, broker_device_remove, dynsec_enabled


def _device_enrolled(*, fleet: str, device_id: str, token: str, **_: Any) -> None:
    if dynsec_enabled():
        # The token lives only in this closure until the broker has hashed it.
        transaction.on_commit(
            lambda: broker_device_grant(fleet=fleet, device_id=device_id, token=token)
        )


def _device_token_revoked(*, device_pk: int, **_: Any) -> None:
    # Sent for a revocation and for a re-enrolment (the old token): a re-enrolment's
    # `device_enrolled` replaces the client, so only a revoked device loses it here.
    if dynsec_enabled():
        transaction.on_commit(lambda: _remove_if_revoked(device_pk))


def _remove_if_revoked(device_pk: int) -> None:
    device = Device.objects.select_related("fleet").filter(pk=device_pk).first()
    if device is not None and device.revoked_at is not None:
        broker_device_remove(fleet=device.fleet.slug, device_id=device.device_id)


def connect() -> None:
    """Hear the devices' announcements (idempotent)."""
    device_enrolled.connect(_device_enrolled, dispatch_uid="broker_access.device_enrolled")
    device_token_revoked.connect(
        _device_token_revoked, dispatch_uid="broker_access.device_token_revoked"
    )
