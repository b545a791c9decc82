"""What the MQTT link does with a batch of device messages (docs/PROTOCOL.md, "MQTT"): acks and
presence land in a few set-based statements, telemetry goes to the ingest path it is given.

A message is trusted to come from the device its topic names (the broker lets a device publish
on its own topics only). Anything else is dropped and counted by reason, never raised: a bad
message touches no other device's state.
"""

import json
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeGuard

from django.db import models, transaction
from django.utils import timezone

from controlplane import json_guard
from edge_sdk import mqtt_topics

from ..assignment import FleetAssignment
from ..devices.models import TRANSPORT_MQTT, Device
from ..devices.selectors import attributes_of
from ..devices.services import devices_ack, fields_key
from ..rollouts.selectors import fleet_assignment
from ..segments.rules import AttributeProblem, attributes_parse
from .models import MqttPresence

logger = logging.getLogger(__name__)

# An ack or a presence message is a few fields: anything longer is not one.
MAX_CONTROL_BYTES = 4096


# The birth's fields and the longest each may be (the device row's own limits).
def _max_length(name: str) -> int:
    field = Device._meta.get_field(name)
    assert isinstance(field, models.CharField)
    assert field.max_length is not None
    return field.max_length


_BIRTH_FIELDS = {name: _max_length(name) for name in ("sdk", "platform", "model")}
# A version number (a PostgreSQL integer column).
MAX_INT32 = 2**31 - 1
# A presence's `session` (a PostgreSQL bigint column).
MAX_INT63 = 2**63 - 1

# A telemetry batch for a device: None when it landed (or was all duplicates), else the reason
# it was refused ("invalid", "too_large", "rate_limited").
# The third argument is the message's MQTT 5 content type ("" without one).
TelemetryIngest = Callable[[Device, bytes, str], str | None]


@dataclass(frozen=True, slots=True)
class Incoming:
    """A message as the broker delivered it, with the moment it arrived."""

    topic: str
    payload: bytes
    received_at: datetime
    content_type: str = ""  # MQTT 5's content type property ("" without one)


@dataclass(frozen=True, slots=True)
class _Presence:
    """A birth (`fields`: what it said) or a will / goodbye (`fields` None), with its
    connection's `session` when the device sent one, and its topic."""

    session: int | None
    fields: dict[str, Any] | None
    topic: str

    @property
    def order(self) -> tuple[int, int]:
        """Newer is greater: a later connection, and within one, its end after its birth."""
        assert self.session is not None
        return (self.session, 0 if self.fields is not None else 1)


@dataclass
class _Batch:
    acks: list[tuple[int, int, datetime]]
    presence: dict[int, _Presence]
    telemetry: list[tuple[Device, bytes, str]]

    def keep_presence(self, device_pk: int, presence: _Presence) -> None:
        """The device's newest presence of the batch: by session when both have one, else the
        later to arrive."""
        kept = self.presence.get(device_pk)
        if (
            kept is None
            or kept.session is None
            or presence.session is None
            or presence.order >= kept.order
        ):
            self.presence[device_pk] = presence


class Drops:
    """Dropped messages, counted by reason (and logged with the topic)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def add(self, reason: str, topic: str, detail: str = "") -> None:
        self.counts[reason] += 1
        logger.warning("mqtt.message_dropped reason=%s topic=%.200s %s", reason, topic, detail)


def _devices(keys: set[tuple[str, str]]) -> dict[tuple[str, str], Device]:
    """The live devices named by (fleet slug, device id), in one query."""
    if not keys:
        return {}
    devices = Device.objects.live().filter(
        fleet__slug__in={slug for slug, _ in keys}, device_id__in={d for _, d in keys}
    )
    found = {(d.fleet.slug, d.device_id): d for d in devices.select_related("fleet")}
    return {key: device for key, device in found.items() if key in keys}


def _control_message(message: Incoming, drops: Drops) -> dict[str, Any] | None:
    """An ack's or presence's JSON object, or None (dropped: too large, malformed)."""
    if len(message.payload) > MAX_CONTROL_BYTES:
        drops.add("too_large", message.topic, f"bytes={len(message.payload)}")
        return None
    try:
        value = json_guard.loads(message.payload.decode("utf-8"))
    except json_guard.JsonRefused as refused:  # too deep, NUL, lone surrogate, NaN
        drops.add("malformed", message.topic, str(refused.problem.message)[:200])
        return None
    except ValueError as error:  # not UTF-8, not JSON
        drops.add("malformed", message.topic, str(error)[:200])
        return None
    if not isinstance(value, dict):
        drops.add("malformed", message.topic, "not an object")
        return None
    return value


def _whole(value: Any, low: int = 0, high: int = MAX_INT32) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _ack(
    device: Device,
    body: dict[str, Any],
    message: Incoming,
    batch: _Batch,
    drops: Drops,
    assignments: dict[int, FleetAssignment],
) -> None:
    version = body.get("version")
    if not _whole(version):
        drops.add("malformed", message.topic, "ack needs a whole-number version")
        return
    waited_ms = body.get("waited_ms", 0)
    if not _whole(waited_ms):
        drops.add("malformed", message.topic, f"waited_ms must be a whole number 0-{MAX_INT32}")
        return
    assignment = assignments.get(device.fleet_id)
    if assignment is None:
        assignment = assignments[device.fleet_id] = fleet_assignment(device.fleet_id)
    if version != assignment.version_for(device.device_id, attributes_of(device)):
        # As the WebSocket's `not_assigned`: an ack of a version not the device's is ignored.
        drops.add("not_assigned", message.topic, f"version={version}")
        return
    # Applied `waited_ms` before it was sent (the SDK spreads a cohort's acks): the
    # propagation figures count from when the device applied the version.
    batch.acks.append((device.pk, version, message.received_at - timedelta(milliseconds=waited_ms)))


def _presence(
    device: Device, body: dict[str, Any], message: Incoming, batch: _Batch, drops: Drops
) -> None:
    online = body.get("online")
    if not isinstance(online, bool):
        drops.add("malformed", message.topic, "presence needs a boolean online")
        return
    session = body.get("session")
    if session is not None and not _whole(session, 1, MAX_INT63):
        drops.add("malformed", message.topic, "session must be a whole number from 1")
        return
    if not online:
        batch.keep_presence(device.pk, _Presence(session, None, message.topic))
        return
    reported = body.get("policy_version")
    if reported is not None and not _whole(reported):
        drops.add("malformed", message.topic, "policy_version must be a whole number or null")
        return
    fields: dict[str, Any] = {"reported_version": reported}
    for name, limit in _BIRTH_FIELDS.items():
        value = body.get(name)
        if value is None:
            continue
        if not isinstance(value, str) or len(value) > limit:
            drops.add("malformed", message.topic, f"{name} must be a string of at most {limit}")
            return
        fields[name] = value
    if body.get("attributes") is not None:  # as in hello (docs/PROTOCOL.md, Device attributes)
        try:
            fields["attributes"] = attributes_parse(body["attributes"])
        except AttributeProblem as problem:
            drops.add("malformed", message.topic, f"attributes: {problem}")
            return
    batch.keep_presence(device.pk, _Presence(session, fields, message.topic))


def _sort(messages: Sequence[Incoming], prefix: str, drops: Drops) -> _Batch:
    """Each message to its kind, in arrival order (a device's later presence wins)."""
    parsed = [(m, mqtt_topics.parse_device_topic(prefix, m.topic)) for m in messages]
    devices = _devices({(p[0], p[1]) for _, p in parsed if p is not None})
    batch = _Batch(acks=[], presence={}, telemetry=[])
    assignments: dict[int, FleetAssignment] = {}
    for message, topic in parsed:
        if topic is None:
            drops.add("wrong_topic", message.topic)
            continue
        device = devices.get((topic[0], topic[1]))
        if device is None:
            drops.add("unknown_device", message.topic)
            continue
        if topic[2] == "telemetry":
            batch.telemetry.append((device, message.payload, message.content_type))
            continue
        try:
            body = _control_message(message, drops)
            if body is None:
                continue
            if topic[2] == "ack":
                _ack(device, body, message, batch, drops, assignments)
            else:
                _presence(device, body, message, batch, drops)
        except Exception:  # a case not foreseen: this message only, never the batch
            logger.exception("mqtt.message_failed topic=%.200s", message.topic)
            drops.add("error", message.topic)
    return batch


def _newest_only(presence: dict[int, _Presence], drops: Drops) -> dict[int, _Presence]:
    """Of these presences (each with a session), those newer than the one last applied to their
    device, now recorded as applied; the rest are dropped as `stale` (another link may land a
    connection's will after the next connection's birth). Under the rows' locks, taken in one
    order, so that two links deciding about one device decide one after the other."""
    if not presence:
        return {}
    MqttPresence.objects.bulk_create(
        [MqttPresence(device_id=pk) for pk in presence], ignore_conflicts=True
    )
    stored = MqttPresence.objects.select_for_update().filter(device_id__in=presence)
    newer: dict[int, _Presence] = {}
    changed: list[MqttPresence] = []
    for row in stored.order_by("device_id"):
        candidate = presence[row.device_id]
        if candidate.order < (row.session, 0 if row.online else 1):
            drops.add("stale", candidate.topic, f"session={candidate.session} < {row.session}")
            continue
        assert candidate.session is not None
        row.session, row.online = candidate.session, candidate.fields is not None
        changed.append(row)
        newer[row.device_id] = candidate
    MqttPresence.objects.bulk_update(changed, ["session", "online"])
    return newer


@transaction.atomic
def _presence_write(batch: _Batch, drops: Drops) -> None:
    now = timezone.now()
    # Presence without a session (a device of an older SDK, or a raw client): as it comes.
    presence = {pk: p for pk, p in batch.presence.items() if p.session is None}
    presence.update(
        _newest_only({pk: p for pk, p in batch.presence.items() if p.session is not None}, drops)
    )
    by_fields: dict[str, list[int]] = {}
    wills: list[int] = []
    for device_pk, said in presence.items():
        if said.fields is None:
            wills.append(device_pk)
        else:
            by_fields.setdefault(fields_key(said.fields), []).append(device_pk)
    for key, device_pks in by_fields.items():
        Device.objects.filter(pk__in=device_pks, revoked_at__isnull=True).update(
            connected=True, transport=TRANSPORT_MQTT, last_seen_at=now, **json.loads(key)
        )
    if wills:
        # Only a device still on MQTT: one that has since said hello on a WebSocket stays.
        Device.objects.filter(pk__in=wills, transport=TRANSPORT_MQTT).update(
            connected=False, last_seen_at=now
        )


def messages_consume(
    messages: Sequence[Incoming],
    *,
    prefix: str,
    telemetry: TelemetryIngest | None,
    drops: Drops,
) -> None:
    """Land a batch of device messages: acks in one statement, presence in one per distinct
    birth (and one for the wills, a presence older than the device's last one left out),
    telemetry batch by batch through `telemetry`."""
    batch = _sort(messages, prefix, drops)
    if batch.acks:
        devices_ack(acks=batch.acks)
    _presence_write(batch, drops)
    for device, payload, content_type in batch.telemetry:
        topic = mqtt_topics.device_topic(prefix, device.fleet.slug, device.device_id, "telemetry")
        if telemetry is None:
            drops.add("no_telemetry", topic)
            continue
        try:
            reason = telemetry(device, payload, content_type)
        except Exception:  # a case not foreseen: this batch only (its transaction rolled back)
            logger.exception("mqtt.telemetry_failed topic=%.200s", topic)
            reason = "error"
        if reason is not None:
            drops.add(reason, topic)
