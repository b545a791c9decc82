"""The fleet topics the control plane publishes (docs/PROTOCOL.md, "MQTT"): a fleet's retained
state, each published version's document, its cloud pressure. One publish per change whatever
the fleet's size: each device computes its own version from the state. Publishing a version is
three: its document, the same document in protobuf on a sibling topic (for the devices
configured for protobuf: docs/PROTOCOL.md, "MQTT"), then the state, whose `published` names it
(devices take the document in the background, so the rollout that follows finds its cohort
already holding it).

Called once the change has committed (mqtt.receivers). A fleet's state and pressure are read
fresh under the lock of its `MqttFleetState` row and published before the lock is released, so
a higher `seq` always carries a newer state and reaches the broker after the lower ones (the
broker retains the last publish it got, which is then also the newest state). A publish the
broker does not acknowledge is left marked unpublished for `fleets_reconcile`.
"""

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from rest_framework.renderers import JSONRenderer

from controlplane.prepared import Prepared
from edge_sdk import mqtt_topics
from edge_sdk.wire import PROTOBUF_MEDIA_TYPE, codec

from ..assignment import FleetAssignment
from ..policies.models import Fleet, PolicyVersion
from ..policies.selectors import (
    latest_published_number,
    latest_published_number_subquery,
    published_version_get,
    version_document,
)
from ..rollouts.selectors import (
    assignment_of,
    assignment_read,
    cloud_pressure_live,
    fleet_assignment,
)
from .client import publisher
from .models import MqttFleetState

logger = logging.getLogger(__name__)


def _compact(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode()


def document_bytes(version: PolicyVersion) -> bytes:
    """The version's policy document exactly as the HTTP API renders it (GET
    /api/v1/devices/me/policy): the same bytes on the retained topic and over HTTP."""
    rendered: bytes = JSONRenderer().render(version_document(version=version))
    return rendered


def state_payload(
    fleet_slug: str, assignment: FleetAssignment, published: int | None
) -> dict[str, Any]:
    """The retained state without its `seq`: stable, candidate, and the open rollout's id,
    stage, salt and holdback (what `FleetAssignment(...).version_for` needs on the device),
    and `published`, the fleet's newest published version (what a device may take ahead)."""
    rollout = None
    if assignment.rollout_id is not None:
        rollout = {
            "id": assignment.rollout_id,
            "stage": assignment.percent,
            "salt": assignment.salt,
            "holdback": assignment.holdback,
        }
    if assignment.scope is not None and rollout is not None:
        # Scoped to a segment (docs/PROTOCOL.md, "Scoped rollouts"): `candidate` and `rollout`
        # stay null, so a device that does not know `scoped_rollout` stays on stable (never
        # takes the candidate outside the segment); the rollout, its candidate and the rule
        # are inside `scoped_rollout`.
        return {
            "fleet": fleet_slug,
            "stable": assignment.stable,
            "candidate": None,
            "rollout": None,
            "published": published,
            "scoped_rollout": {
                **rollout,
                "candidate": assignment.candidate,
                "segment": assignment.scope_name,
                "rule": dict(assignment.scope),
            },
        }
    return {
        "fleet": fleet_slug,
        "stable": assignment.stable,
        "candidate": assignment.candidate if assignment.rollout_id is not None else None,
        "rollout": rollout,
        "published": published,
    }


def _locked(rows: Callable[[], QuerySet[Any, Any]]) -> Prepared:
    """The fleet's row, locked until the transaction ends, with its fleet's slug (the topic's
    name) and what `rows` reads of it, in one query compiled once (controlplane.prepared):
    the state's publish waits on this read."""
    return Prepared(
        lambda fleet_id: rows().select_for_update(of=("self",)).filter(fleet_id=fleet_id),
        "fleet_id",
    )


_STATE_ROW = _locked(  # with what the fleet's devices must run now: one query
    lambda: assignment_read(
        MqttFleetState.objects.annotate(published=latest_published_number_subquery()),
        *("seq", "state", "state_published", "fleet__slug", "published"),
        fleet="fleet",
    )
)
_PRESSURE_ROW = _locked(
    lambda: MqttFleetState.objects.values("pressure", "pressure_published", "fleet__slug")
)


def _locked_row(read: Prepared, fleet_id: int) -> dict[str, Any]:
    row = read.first(fleet_id=fleet_id)
    if row is None:  # the fleet's first publish
        MqttFleetState.objects.bulk_create(
            [MqttFleetState(fleet_id=fleet_id)], ignore_conflicts=True
        )
        row = read.first(fleet_id=fleet_id)
        assert row is not None
    return row


def _prefix() -> str:
    prefix: str = settings.MQTT_TOPIC_PREFIX
    return prefix


@transaction.atomic
def fleet_state_publish(*, fleet_id: int, force: bool = False) -> bool:
    """Publish the fleet's state when it changed since the last publish, or when the broker did
    not acknowledge that one (or `force`: a fresh broker). True when a publish was made."""
    row = _locked_row(_STATE_ROW, fleet_id)
    slug, seq = row["fleet__slug"], row["seq"]
    state = state_payload(slug, assignment_of(row), row["published"])
    if row["state"] != state:
        seq += 1
    elif row["state_published"] and not force:
        return False
    topic = mqtt_topics.fleet_state(_prefix(), slug)
    acknowledged = publisher().publish(topic, _compact({"seq": seq, **state}))
    MqttFleetState(fleet_id=fleet_id, seq=seq, state=state, state_published=acknowledged).save(
        update_fields=["seq", "state", "state_published", "updated_at"]
    )
    logger.info("mqtt.state_published fleet=%s seq=%d acknowledged=%s", slug, seq, acknowledged)
    return True


def _pressure_in_force(pressure: dict[str, float] | None, now: float) -> dict[str, float] | None:
    return pressure if pressure is not None and pressure["until"] - now >= 1 else None


@transaction.atomic
def fleet_pressure_publish(*, fleet_id: int, force: bool = False) -> bool:
    """Publish the fleet's cloud-pressure nudge (retained, expiring with its TTL) when it changed,
    or clear the retained one (an empty payload) when the nudge ended before its expiry."""
    row = _locked_row(_PRESSURE_ROW, fleet_id)
    now = time.time()
    live = cloud_pressure_live(fleet_id)
    if live == _pressure_in_force(row["pressure"], now) and row["pressure_published"] and not force:
        return False
    slug = row["fleet__slug"]
    topic = mqtt_topics.fleet_cloud_pressure(_prefix(), slug)
    if live is None:
        published = publisher().publish(topic, b"")
    else:
        ttl_s = int(live["until"] - now)
        payload = _compact({"theta_offset": live["theta_offset"], "ttl_s": ttl_s})
        published = publisher().publish(topic, payload, expiry_s=ttl_s)
    MqttFleetState(fleet_id=fleet_id, pressure=live, pressure_published=published).save(
        update_fields=["pressure", "pressure_published", "updated_at"]
    )
    return True


def version_document_publish(*, fleet_id: int, number: int) -> int:
    """Retain published version `number`'s document on its topic, and the same document in
    protobuf on its sibling topic (immutable: no lock needed). The number of publishes the
    broker acknowledged (0, 1 or 2)."""
    version = published_version_get(fleet_id=fleet_id, number=number)
    if version is None:
        return 0
    prefix, slug = _prefix(), version.fleet.slug
    published = publisher().publish(
        mqtt_topics.fleet_version(prefix, slug, number), document_bytes(version)
    )
    return published + publisher().publish(
        mqtt_topics.fleet_version_protobuf(prefix, slug, number),
        codec.document_to_protobuf(version_document(version=version)),
        content_type=PROTOBUF_MEDIA_TYPE,
    )


def version_published_publish(*, fleet_id: int, number: int) -> int:
    """A version was published: its document (JSON and protobuf), then the fleet's state naming
    it as `published` (the devices take it ahead of a rollout). The number of publishes made."""
    publishes = version_document_publish(fleet_id=fleet_id, number=number)
    return publishes + fleet_state_publish(fleet_id=fleet_id)


def fleets_reconcile(*, force: bool = False) -> int:
    """Publish every fleet's state and cloud pressure that the broker lacks (what a failed
    publish left out), or, with `force` (a fresh broker), every fleet's state, cloud pressure
    and the documents its devices run or take ahead (stable, candidate, the newest published).
    The number of publishes made."""
    publishes = 0
    for fleet_id in Fleet.objects.order_by("pk").values_list("pk", flat=True):
        publishes += fleet_state_publish(fleet_id=fleet_id, force=force)
        publishes += fleet_pressure_publish(fleet_id=fleet_id, force=force)
        if force:
            assignment = fleet_assignment(fleet_id)
            newest = latest_published_number(fleet_id=fleet_id)
            named = {assignment.stable, assignment.candidate, newest}
            for number in sorted(n for n in named if n is not None):
                publishes += version_document_publish(fleet_id=fleet_id, number=number)
    return publishes
