"""Devices: enrolment with the fleet's key, tokens (shown once, stored hashed), presence, acks,
and the batched writes of the push tier's sockets (connect, hello, disconnect)."""

import json
import logging
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from controlplane.exceptions import ApplicationError, Conflict

from ..policies.audit import Actor, audit_of
from ..policies.models import Fleet
from ..rollouts.models import FleetRouting
from ..rollouts.selectors import cloud_pressure_live, fleet_assignment
from ..rollouts.services import fleet_routing_lock
from ..segments.rules import device_attributes
from .models import TRANSPORT_WS, Device
from .selectors import device_authenticate
from .signals import device_enrolled, device_token_revoked
from .tokens import hash_secret, new_device_token, new_fleet_key

logger = logging.getLogger(__name__)


@transaction.atomic
def fleet_enrollment_key_rotate(*, actor: Actor, fleet: Fleet, key: str | None = None) -> str:
    """Issue a new enrolment key (shown once, stored hashed); enrolled devices keep working."""
    routing = fleet_routing_lock(fleet)
    key = key or new_fleet_key()
    routing.enrollment_key_hash = hash_secret(key)
    routing.enrollment_key_prefix = key[:10]
    routing.save(update_fields=["enrollment_key_hash", "enrollment_key_prefix", "updated_at"])
    summary = f"New enrolment key {key[:10]}…"
    audit_of("fleet", None, "enrollment_key_rotated", actor=actor, fleet=fleet, summary=summary)
    return key


@transaction.atomic
def device_enroll(
    *,
    fleet_key: str,
    device_id: str,
    platform: str = "",
    model: str = "",
    sdk: str = "",
    attributes: dict[str, Any] | None = None,
) -> tuple[Device, str]:
    """Enrol a device with its fleet's key; returns the device and its token (shown once).
    `attributes`: what it reports beyond platform and model (checked by the caller,
    `edge_sdk.segments.attributes_parse`); left out, none is known.

    Enrolling the same device id again (a reinstalled app) replaces its token: the old one
    stops working at once.
    """
    routing = (
        FleetRouting.objects.select_related("fleet")
        .filter(enrollment_key_hash=hash_secret(fleet_key))
        .exclude(enrollment_key_hash="")
        .first()
    )
    if routing is None:
        raise ApplicationError("Unknown fleet key.", code="bad_fleet_key", status=401)
    token = new_device_token()
    fields = {
        "platform": platform,
        "model": model,
        "sdk": sdk,
        "attributes": attributes or {},
        "token_hash": hash_secret(token),
    }
    device = (
        Device.objects.select_for_update().filter(fleet=routing.fleet, device_id=device_id).first()
    )
    if device is None:
        try:
            with transaction.atomic():
                device = Device.objects.create(fleet=routing.fleet, device_id=device_id, **fields)
        except IntegrityError:
            raise Conflict(
                "This device is being enrolled by another request; retry.", code="enroll_race"
            ) from None
    else:
        old_hash = device.token_hash
        for name, value in fields.items():
            setattr(device, name, value)
        device.revoked_at = None
        # Offline until a socket with the new token says hello: the old token's socket is
        # being closed, and its close (by the old token) no longer finds this device.
        device.connected = False
        device.save()
        # Close only the socket opened with the old token, not one opened with the new.
        _token_revoked(device, old_hash)
    device_enrolled.send(sender=Device, fleet=routing.fleet.slug, device_id=device_id, token=token)
    logger.info("device.enrolled fleet=%s device=%s", routing.fleet.slug, device_id)
    return device, token


@transaction.atomic
def device_revoke(*, actor: Actor, device: Device) -> Device:
    """Revoke the device's token; its open socket is closed (4401)."""
    device = Device.objects.select_for_update().get(pk=device.pk)
    if device.revoked_at is None:
        device.revoked_at = timezone.now()
        device.connected = False  # its socket is being closed: no longer online
        device.save(update_fields=["revoked_at", "connected"])
        summary = f"Revoked {device.device_id}"
        audit_of(
            "device", device.device_id, "revoked", actor=actor, fleet=device.fleet, summary=summary
        )
        _token_revoked(device, device.token_hash)
    return device


def _token_revoked(device: Device, token_hash: str) -> None:
    """Announce that `token_hash` no longer opens `device` (the push tier closes its socket
    and forgets it, once the transaction commits)."""
    device_token_revoked.send(
        sender=Device, fleet_id=device.fleet_id, device_pk=device.pk, token_hash=token_hash
    )


def devices_seen(*, device_pks: list[int], **fields: Any) -> None:
    """Record presence and what devices said (hello fields) for many devices: one UPDATE."""
    Device.objects.filter(pk__in=device_pks).update(last_seen_at=timezone.now(), **fields)


def devices_seen_by_token(*, token_hashes: list[str], **fields: Any) -> None:
    """`devices_seen` for the live devices whose current tokens these are: a socket opened
    with a token since revoked, or replaced by a re-enrolment, changes nothing."""
    Device.objects.filter(token_hash__in=token_hashes, revoked_at__isnull=True).update(
        last_seen_at=timezone.now(), **fields
    )


def device_seen(*, device_pk: int, connected: bool | None = None, **fields: Any) -> None:
    """`devices_seen` for one device (the polling path)."""
    if connected is not None:
        fields["connected"] = connected
    devices_seen(device_pks=[device_pk], **fields)


def devices_ack(*, acks: Sequence[tuple[int, int] | tuple[int, int, datetime]]) -> None:
    """Devices applied versions: `(device_pk, version)` pairs, acked now, or
    `(device_pk, version, at)` with the moment each ack was received (a batch written a
    little later keeps each device's own time: the rollout page's propagation figures are
    computed from it). A device's last ack in the list wins.
    """
    now = timezone.now()
    latest: dict[int, tuple[int, datetime]] = {}
    for ack in acks:
        latest[ack[0]] = (ack[1], ack[2] if len(ack) == 3 else now)
    if not latest:
        return
    if connection.vendor == "postgresql":
        # One statement for the whole batch, each row with its own version and time.
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE routing_policies_device AS d SET acked_version = a.version, "
                "acked_at = a.at, last_seen_at = GREATEST(d.last_seen_at, a.at) "
                "FROM unnest(%s::bigint[], %s::integer[], %s::timestamptz[]) AS a(pk, version, at) "
                "WHERE d.id = a.pk",
                [list(latest), [v for v, _ in latest.values()], [t for _, t in latest.values()]],
            )
        return
    Device.objects.bulk_update(
        [
            Device(pk=device_pk, acked_version=version, acked_at=at, last_seen_at=at)
            for device_pk, (version, at) in latest.items()
        ],
        ["acked_version", "acked_at", "last_seen_at"],
        batch_size=500,
    )


def device_ack(*, device_pk: int, version: int) -> None:
    """`devices_ack` for one device."""
    devices_ack(acks=[(device_pk, version)])


# --- the push tier's sockets, in batches (push.store.DeviceStore) -----------------------------


def devices_connect(*, tokens: list[str]) -> list[dict[str, Any] | None]:
    """Sockets opening with these tokens: each one's device (None for a bad or revoked token),
    with `connected_at`, the moment its older sockets are superseded (push.store tells every
    process).

    Their devices are marked offline until the new socket says hello (`devices_hello`), as
    their only live socket (the new one supersedes any older) has not yet.
    """
    devices = [device_authenticate(token) for token in tokens]
    live = [device for device in devices if device is not None]
    if not live:
        return [None] * len(tokens)
    devices_seen(device_pks=[device.pk for device in live], connected=False)
    connected_at = time.time()
    return [
        None
        if device is None
        else {
            "pk": device.pk,
            "device_id": device.device_id,
            "fleet_id": device.fleet_id,
            "token_hash": device.token_hash,
            "connected_at": connected_at,
        }
        for device in devices
    ]


def fields_key(fields: dict[str, Any]) -> str:
    """What devices said (hello or birth fields, `attributes` an object among them) as one
    key: devices that said the same are written by one UPDATE."""
    return json.dumps(fields, sort_keys=True, separators=(",", ":"))


def devices_hello(*, requests: list[tuple[int, int, dict[str, Any], str]]) -> list[dict[str, Any]]:
    """Sockets that said hello, as `(device_pk, fleet_id, fields, token_hash)`: record what each
    device said and mark it online; answer each with its fleet's assignment and cloud pressure
    (read once per fleet) and whether it is `revoked`. Only a socket whose token is still the
    device's current one, not revoked, counts: one opened with a token that a re-enrolment
    replaced is told `revoked`."""
    by_fields: dict[str, list[str]] = {}
    for _, _, fields, token_hash in requests:
        by_fields.setdefault(fields_key(fields), []).append(token_hash)
    for key, token_hashes in by_fields.items():
        devices_seen_by_token(
            token_hashes=token_hashes, connected=True, transport=TRANSPORT_WS, **json.loads(key)
        )
    fleets = {
        fleet_id: (fleet_assignment(fleet_id), cloud_pressure_live(fleet_id))
        for fleet_id in {fleet_id for _, fleet_id, _, _ in requests}
    }
    # Each live device's attributes as rules read them (after this hello's fields): what a
    # rollout scoped to a segment reads (docs/segments.md).
    current = {
        token_hash: device_attributes(platform=platform, model=model, reported=reported)
        for token_hash, platform, model, reported in Device.objects.filter(
            token_hash__in=[token_hash for _, _, _, token_hash in requests],
            revoked_at__isnull=True,
        ).values_list("token_hash", "platform", "model", "attributes")
    }
    return [
        {
            "assignment": fleets[fleet_id][0],
            "pressure": fleets[fleet_id][1],
            "revoked": token_hash not in current,
            "attributes": current.get(token_hash, {}),
        }
        for _, fleet_id, _, token_hash in requests
    ]


def devices_disconnect(*, token_hashes: list[str]) -> None:
    """Sockets closed: mark offline the devices whose current tokens these are.

    By token hash, not device: a socket opened with a token that a re-enrolment has since
    replaced must not mark offline the device now connected with the new token. A device that
    has since said its birth over MQTT stays online (its last will says when it is not).
    """
    Device.objects.filter(token_hash__in=token_hashes, transport=TRANSPORT_WS).update(
        connected=False, last_seen_at=timezone.now()
    )
