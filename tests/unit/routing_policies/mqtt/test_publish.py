"""The fleet topics on a real Mosquitto: a change costs a fixed number of publishes whatever the
fleet's size; what a fresh subscriber reads (state, documents, cloud pressure) is what the
server assigns and serves."""

import secrets
from collections.abc import Callable
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from edge_sdk import mqtt_topics
from edge_sdk.assignment import FleetAssignment
from edge_sdk.delta import canonical_bytes
from edge_sdk.wire import PROTOBUF_MEDIA_TYPE, codec
from routing_policies.models import Device, MqttFleetState
from routing_policies.mqtt.publish import fleets_reconcile
from routing_policies.selectors import fleet_assignment
from routing_policies.services import (
    cloud_pressure_set,
    device_enroll,
    fleet_switch_version,
    hash_secret,
    rollout_advance,
    rollout_complete,
    rollout_rollback,
    rollout_start,
)

from .conftest import PREFIX, Watcher

pytestmark = pytest.mark.django_db

Capture = Callable[..., Any]


def _enrolled(fleet: Any, count: int, start: int = 0) -> None:
    """`count` more devices of `fleet` (rows as enrolment leaves them)."""
    Device.objects.bulk_create(
        [
            Device(
                fleet=fleet,
                device_id=f"dev-{n:05d}",
                token_hash=hash_secret(secrets.token_hex(8)),
                enrolled_at=timezone.now(),
            )
            for n in range(start, start + count)
        ]
    )


def _state(fleet: Any) -> str:
    return mqtt_topics.fleet_state(PREFIX, fleet.slug)


def _publishes_of(change: Callable[[], Any], watcher: Watcher, capture: Capture) -> list[str]:
    """The topics the broker got from the control plane during `change` (committed)."""
    watcher.settle(0.2)
    before = len(watcher.messages)
    with capture(execute=True):
        change()
    watcher.settle()
    return [m.topic for m in watcher.messages[before:]]


def test_stage_change__10_vs_1000_devices__the_same_single_publish(
    fleet: Any,
    publish_version: Callable[..., Any],
    publisher: Any,
    watch: Callable[..., Watcher],
    django_capture_on_commit_callbacks: Capture,
) -> None:
    # Given a fleet with v1 stable and v2 published, 10 devices, a watcher of every topic
    publish_version(fleet, threshold=0.8)
    _enrolled(fleet, 10)
    watcher = watch(f"{PREFIX}/#")
    capture = django_capture_on_commit_callbacks

    # When a rollout starts and advances with 10 devices, then with 1,000
    start = _publishes_of(
        lambda: rollout_start(actor=publisher, fleet=fleet, version=2), watcher, capture
    )
    with_10 = _publishes_of(lambda: rollout_advance(actor=publisher, fleet=fleet), watcher, capture)
    _enrolled(fleet, 990, start=10)
    with_1000 = _publishes_of(
        lambda: rollout_advance(actor=publisher, fleet=fleet), watcher, capture
    )
    rollback = _publishes_of(
        lambda: rollout_rollback(actor=publisher, fleet=fleet), watcher, capture
    )

    # Then each change is one publish, of the fleet's state, whatever the fleet's size
    assert start == with_10 == with_1000 == rollback == [_state(fleet)]
    # and each state has the next seq
    seqs = [m.json()["seq"] for m in watcher.on(_state(fleet))]
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == len(seqs) == 4


def test_publish_switch_complete__1000_devices__one_publish_each(
    fleet: Any,
    publish_version: Callable[..., Any],
    publisher: Any,
    watch: Callable[..., Watcher],
    django_capture_on_commit_callbacks: Capture,
) -> None:
    # Given a fleet of 1,000 devices on v1, watched
    _enrolled(fleet, 1000)
    watcher = watch(f"{PREFIX}/#")
    capture = django_capture_on_commit_callbacks

    # When v2 is published, the fleet switched to it, v3 published and rolled out to completion
    published = _publishes_of(lambda: publish_version(fleet, threshold=0.8), watcher, capture)
    switched = _publishes_of(
        lambda: fleet_switch_version(actor=publisher, fleet=fleet, version=2), watcher, capture
    )
    publish_version(fleet, threshold=0.9)
    rollout_start(actor=publisher, fleet=fleet, version=3)
    rollout_advance(actor=publisher, fleet=fleet, to_stage=100)
    completed = _publishes_of(
        lambda: rollout_complete(actor=publisher, fleet=fleet), watcher, capture
    )

    # Then the publish is three: the new version's document, its protobuf twin, then the
    # fleet's state naming it as published; the switch and the completion are one, the state
    assert published == [
        mqtt_topics.fleet_version(PREFIX, fleet.slug, 2),
        mqtt_topics.fleet_version_protobuf(PREFIX, fleet.slug, 2),
        _state(fleet),
    ]
    assert switched == completed == [_state(fleet)]
    assert watcher.on(_state(fleet))[-1].json()["stable"] == 3
    assert watcher.on(_state(fleet))[-1].json()["published"] == 3


def test_version_published__before_any_rollout__the_state_names_it_and_its_document_is_retained(
    fleet: Any,
    publish_version: Callable[..., Any],
    publisher: Any,
    watch: Callable[..., Watcher],
    django_capture_on_commit_callbacks: Capture,
) -> None:
    # Given a fleet on v1, with 1,000 devices
    _enrolled(fleet, 1000)

    # When v2 and v3 are published and no rollout started
    with django_capture_on_commit_callbacks(execute=True):
        publish_version(fleet, threshold=0.8)
    with django_capture_on_commit_callbacks(execute=True):
        publish_version(fleet, threshold=0.9)

    # Then a device subscribing now reads a state that still assigns v1 to everyone and names
    # v3 as the newest published version, whose document is retained (taken ahead of need)
    watcher = watch(f"{PREFIX}/#")
    watcher.settle()
    (state,) = [m.json() for m in watcher.on(_state(fleet))]
    assert (state["stable"], state["candidate"], state["rollout"]) == (1, None, None)
    assert state["published"] == 3
    assert mqtt_topics.fleet_version(PREFIX, fleet.slug, 3) in {m.topic for m in watcher.messages}
    # and a rollout of v3 is one more publish, of a state naming the same newest version
    with django_capture_on_commit_callbacks(execute=True):
        rollout_start(actor=publisher, fleet=fleet, version=3)
    watcher.settle()
    started = watcher.on(_state(fleet))[-1].json()
    assert (started["candidate"], started["published"]) == (3, 3)


def test_fresh_subscriber__reads_retained_state__computes_the_servers_assignment(
    fleet: Any,
    publish_version: Callable[..., Any],
    publisher: Any,
    watch: Callable[..., Watcher],
    django_capture_on_commit_callbacks: Capture,
) -> None:
    # Given a rollout of v2 at 25% with a holdback, committed while the link is on
    publish_version(fleet, threshold=0.8)
    with django_capture_on_commit_callbacks(execute=True):
        rollout_start(actor=publisher, fleet=fleet, version=2, holdback=10)
    with django_capture_on_commit_callbacks(execute=True):
        rollout_advance(actor=publisher, fleet=fleet)

    # When a device subscribes afterwards
    watcher = watch(_state(fleet))
    watcher.wait_for(lambda: bool(watcher.messages))

    # Then it gets the retained state, and computes the server's version for every device id
    (message,) = watcher.messages
    assert message.retain
    state = message.json()
    assert state["fleet"] == fleet.slug
    assert state["stable"] == 1
    assert state["candidate"] == 2
    rollout = state["rollout"]
    assert rollout["stage"] == 25
    assert rollout["holdback"] == 10
    on_device = FleetAssignment(
        stable=state["stable"],
        candidate=state["candidate"],
        salt=rollout["salt"],
        percent=rollout["stage"],
        rollout_id=rollout["id"],
        holdback=rollout["holdback"],
    )
    server = fleet_assignment(fleet.pk)
    ids = [f"device-{n}" for n in range(2000)]
    assert [on_device.version_for(i) for i in ids] == [server.version_for(i) for i in ids]
    assert {on_device.version_for(i) for i in ids} == {1, 2}


def test_published_versions__retained_documents__byte_identical_to_http(
    fleet: Any,
    fleet_key: str,
    publish_version: Callable[..., Any],
    publisher: Any,
    watch: Callable[..., Watcher],
    django_capture_on_commit_callbacks: Capture,
) -> None:
    # Given v2 published while the link is on, and the fleet switched to it
    with django_capture_on_commit_callbacks(execute=True):
        publish_version(fleet, threshold=0.8)
    with django_capture_on_commit_callbacks(execute=True):
        fleet_switch_version(actor=publisher, fleet=fleet, version=2)
    _, token = device_enroll(fleet_key=fleet_key, device_id="phone-9")

    # When a fresh subscriber reads the version's topic
    topic = mqtt_topics.fleet_version(PREFIX, fleet.slug, 2)
    watcher = watch(topic)
    watcher.wait_for(lambda: bool(watcher.messages))

    # Then it is the body a device polling for its policy gets, byte for byte
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    polled = client.get("/api/v1/devices/me/policy")
    assert polled.status_code == 200
    assert watcher.messages[0].retain
    assert watcher.messages[0].payload == polled.content


def test_cloud_pressure__retained_with_message_expiry__a_fresh_subscriber_reads_it(
    fleet: Any,
    publisher: Any,
    watch: Callable[..., Watcher],
    django_capture_on_commit_callbacks: Capture,
) -> None:
    # Given a nudge of θ +0.2 for 600 s
    with django_capture_on_commit_callbacks(execute=True):
        cloud_pressure_set(actor=publisher, fleet=fleet, theta_offset=0.2, ttl_s=600)

    # When a device subscribes afterwards
    watcher = watch(mqtt_topics.fleet_cloud_pressure(PREFIX, fleet.slug))
    watcher.wait_for(lambda: bool(watcher.messages))

    # Then it reads the offset and its TTL, with the MQTT 5 expiry set to it
    message = watcher.messages[0]
    body = message.json()
    assert body["theta_offset"] == 0.2
    assert 595 <= body["ttl_s"] <= 600
    assert message.expiry_s is not None
    assert 590 <= message.expiry_s <= 600


def test_cloud_pressure__ended_early__retained_message_cleared(
    fleet: Any,
    publisher: Any,
    watch: Callable[..., Watcher],
    django_capture_on_commit_callbacks: Capture,
) -> None:
    # Given a nudge that is retained
    with django_capture_on_commit_callbacks(execute=True):
        cloud_pressure_set(actor=publisher, fleet=fleet, theta_offset=0.2, ttl_s=600)

    # When it ends before its expiry (its end moved to now)
    fleet.routing.cloud_pressure_until = timezone.now()
    fleet.routing.save(update_fields=["cloud_pressure_until"])
    fleets_reconcile()

    # Then a fresh subscriber finds nothing retained
    watcher = watch(mqtt_topics.fleet_cloud_pressure(PREFIX, fleet.slug))
    watcher.settle()
    assert watcher.messages == []


def test_reconcile__fresh_broker__republishes_state_and_documents_unchanged_fleets_cost_none(
    fleet: Any, publish_version: Callable[..., Any], publisher: Any, watch: Callable[..., Watcher]
) -> None:
    # Given a fleet whose changes were committed while no broker held anything (v1 stable,
    # a rollout of v2 at 5%)
    publish_version(fleet, threshold=0.8)
    rollout_start(actor=publisher, fleet=fleet, version=2)

    # When the fleets are reconciled with --all
    publishes = fleets_reconcile(force=True)

    # Then the broker retains the state, the cloud pressure (none) and both documents (v2 is
    # the candidate and the newest published version alike), each in JSON and in protobuf
    watcher = watch(f"{PREFIX}/#")
    watcher.settle()
    retained = {m.topic for m in watcher.messages}
    assert retained == {
        _state(fleet),
        mqtt_topics.fleet_version(PREFIX, fleet.slug, 1),
        mqtt_topics.fleet_version(PREFIX, fleet.slug, 2),
        mqtt_topics.fleet_version_protobuf(PREFIX, fleet.slug, 1),
        mqtt_topics.fleet_version_protobuf(PREFIX, fleet.slug, 2),
    }
    assert publishes == 6  # state, a cleared cloud pressure, two documents in two encodings
    assert MqttFleetState.objects.get(fleet=fleet).state_published
    # and a second, ordinary reconcile finds nothing to publish
    assert fleets_reconcile() == 0


def test_publish__broker_down__change_committed_and_reconcile_publishes_it_later(
    fleet: Any,
    publish_version: Callable[..., Any],
    publisher: Any,
    mqtt_on: Any,
    settings: Any,
    django_capture_on_commit_callbacks: Capture,
) -> None:
    # Given a broker that cannot be reached when a rollout starts
    from routing_policies.mqtt.client import publisher as mqtt_publisher

    publish_version(fleet, threshold=0.8)
    settings.MQTT_URL = "mqtt://127.0.0.1:9"
    with django_capture_on_commit_callbacks(execute=True):
        rollout_start(actor=publisher, fleet=fleet, version=2)
    row = MqttFleetState.objects.get(fleet=fleet)
    assert row.seq == 1
    assert not row.state_published
    mqtt_publisher().close()

    # When the broker is back and the link reconciles
    settings.MQTT_URL = mqtt_on.url
    fleets_reconcile()

    # Then the state is retained with the same seq (never reused for another state)
    watcher = Watcher(mqtt_on, _state(fleet))
    try:
        watcher.wait_for(lambda: bool(watcher.messages))
        assert watcher.messages[0].json()["seq"] == 1
        assert watcher.messages[0].json()["candidate"] == 2
    finally:
        watcher.close()


def test_version_published__protobuf_twin__the_same_document_typed_and_json_devices_unaffected(
    fleet: Any,
    publish_version: Callable[..., Any],
    watch: Callable[..., Watcher],
    django_capture_on_commit_callbacks: Capture,
) -> None:
    # Given a watcher of every version's JSON document (`versions/+`, as a device may
    # subscribe) and one of every version's protobuf twin
    json_watcher = watch(mqtt_topics.fleet_version(PREFIX, fleet.slug, "+"))
    protobuf_watcher = watch(mqtt_topics.fleet_version_protobuf(PREFIX, fleet.slug, "+"))

    # When v2 is published
    with django_capture_on_commit_callbacks(execute=True):
        publish_version(fleet, threshold=0.8)
    json_watcher.wait_for(lambda: bool(json_watcher.messages))
    protobuf_watcher.wait_for(lambda: bool(protobuf_watcher.messages))
    json_watcher.settle()

    # Then the `versions/+` subscriber gets JSON only, typed as JSON; the protobuf one gets
    # the same document in protobuf, retained and typed `application/x-protobuf`, equal to the
    # JSON one once both are canonically encoded, and to what HTTP serves
    assert [m.content_type for m in json_watcher.messages] == ["application/json"]
    (as_json,) = json_watcher.messages
    (as_protobuf,) = protobuf_watcher.messages
    assert as_protobuf.content_type == PROTOBUF_MEDIA_TYPE
    assert as_protobuf.topic == mqtt_topics.fleet_version_protobuf(PREFIX, fleet.slug, 2)
    assert canonical_bytes(codec.document_from_protobuf(as_protobuf.payload)) == canonical_bytes(
        as_json.json()
    )
    assert len(as_protobuf.payload) < len(as_json.payload)
    served = APIClient().get(f"/api/v1/fleets/{fleet.slug}/documents/2")
    assert canonical_bytes(as_json.json()) == canonical_bytes(served.json())
    # and a device that subscribes later finds it retained, the same bytes
    late = watch(as_protobuf.topic)
    late.wait_for(lambda: bool(late.messages))
    assert late.messages[0].retain
    assert late.messages[0].payload == as_protobuf.payload
