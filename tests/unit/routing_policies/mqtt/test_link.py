"""The link's subscriber on a real Mosquitto: devices' acks, presence and telemetry, published
by raw paho clients, land as their WebSocket and HTTP equivalents do; hostile messages are
dropped and counted, and touch nothing."""

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.utils import timezone

from edge_sdk import mqtt_topics
from routing_policies.models import Device
from routing_policies.mqtt.client import BrokerAddress
from routing_policies.mqtt.consume import MAX_CONTROL_BYTES
from routing_policies.mqtt.link import MqttLink
from routing_policies.selectors import device_list, fleet_assignment, fleet_convergence
from routing_policies.services import device_enroll, device_revoke, rollout_start
from telemetry.ingest.mqtt import telemetry_message_ingest
from telemetry.models import EventKey, LandedBatch
from tests.factories import make_events
from tests.hostile_json import HOSTILE_PARAMS, Hostile

from .conftest import PREFIX, Watcher

pytestmark = pytest.mark.django_db


@pytest.fixture
def link(mqtt_on: Any) -> Iterator[MqttLink]:
    """A subscriber of the link, started; the test drains it on its own thread."""
    address = BrokerAddress(
        host=mqtt_on.host, port=mqtt_on.port, tls=False, username="", password=""
    )
    subscriber = MqttLink(telemetry=telemetry_message_ingest, address=address, prefix=PREFIX)
    subscriber.start()
    yield subscriber
    subscriber.stop()


@pytest.fixture
def device_client(mqtt_on: Any) -> Iterator[Watcher]:
    """A raw MQTT client standing for devices."""
    client = Watcher(mqtt_on)
    yield client
    client.close()


def _topic(fleet: Any, device_id: str, kind: str) -> str:
    return mqtt_topics.device_topic(PREFIX, fleet.slug, device_id, kind)


def _drain(link: MqttLink, count: int, timeout: float = 10.0) -> None:
    """Land batches until `count` messages were taken."""
    taken = 0
    deadline = timezone.now().timestamp() + timeout
    while taken < count:
        assert timezone.now().timestamp() < deadline, f"took {taken} of {count}"
        taken += link.drain(timeout=0.5)


def test_ack__assigned_version__lands_as_the_websocket_ack(
    fleet: Any, fleet_key: str, link: MqttLink, device_client: Watcher
) -> None:
    # Given two devices on v1
    device_enroll(fleet_key=fleet_key, device_id="car-1")
    device_enroll(fleet_key=fleet_key, device_id="car-2")

    # When one acks v1 and the other acks v7 (not its assignment)
    device_client.publish(_topic(fleet, "car-1", "ack"), json.dumps({"version": 1}))
    device_client.publish(_topic(fleet, "car-2", "ack"), json.dumps({"version": 7}))
    _drain(link, 2)

    # Then the first ack is recorded with its time; the second is refused as not assigned
    car1, car2 = Device.objects.get(device_id="car-1"), Device.objects.get(device_id="car-2")
    assert car1.acked_version == 1
    assert car1.acked_at is not None
    assert car2.acked_version is None
    assert link.drops.counts == {"not_assigned": 1}
    assert fleet_convergence(fleet)["versions"][0]["acked"] == 1


def test_ack__spread_with_waited_ms__recorded_as_applied_that_long_before_it_arrived(
    fleet: Any, fleet_key: str, link: MqttLink, device_client: Watcher
) -> None:
    # Given two devices on v1 and the moment before their acks are sent
    device_enroll(fleet_key=fleet_key, device_id="car-1")
    device_enroll(fleet_key=fleet_key, device_id="car-2")
    before = timezone.now()

    # When one acks at once and the other says it held its ack 1.5 s after applying v1
    device_client.publish(_topic(fleet, "car-1", "ack"), json.dumps({"version": 1}))
    held = {"version": 1, "waited_ms": 1500}
    device_client.publish(_topic(fleet, "car-2", "ack"), json.dumps(held))
    _drain(link, 2)
    after = timezone.now()

    # Then both run v1; the held one is recorded as applied 1.5 s before it arrived
    car1, car2 = Device.objects.get(device_id="car-1"), Device.objects.get(device_id="car-2")
    assert car1.acked_version == car2.acked_version == 1
    assert car1.acked_at is not None
    assert car2.acked_at is not None
    assert before <= car1.acked_at <= after
    wait = timezone.timedelta(milliseconds=1500)
    assert before - wait <= car2.acked_at <= after - wait
    assert link.drops.counts == {}


@pytest.mark.parametrize(
    "waited_ms", [-1, 1.5, "800", True, None, 2**31, [1]], ids=lambda v: f"waited_ms={v!r}"
)
def test_ack__waited_ms_not_a_whole_number_in_range__dropped_as_malformed_nothing_stored(
    waited_ms: Any, fleet: Any, fleet_key: str, link: MqttLink, device_client: Watcher
) -> None:
    # Given two devices on v1
    device_enroll(fleet_key=fleet_key, device_id="car-1")
    device_enroll(fleet_key=fleet_key, device_id="car-2")

    # When one acks v1 with a `waited_ms` out of its range, and the other acks v1 plainly
    bad = json.dumps({"version": 1, "waited_ms": waited_ms})
    device_client.publish(_topic(fleet, "car-1", "ack"), bad)
    device_client.publish(_topic(fleet, "car-2", "ack"), json.dumps({"version": 1}))
    _drain(link, 2)

    # Then the first is dropped as malformed and nothing of it stored; the other landed
    assert Device.objects.get(device_id="car-1").acked_version is None
    assert Device.objects.get(device_id="car-2").acked_version == 1
    assert link.drops.counts == {"malformed": 1}


def test_presence__birth_then_last_will__online_then_offline(
    fleet: Any, fleet_key: str, link: MqttLink, device_client: Watcher
) -> None:
    # Given an enrolled device
    device_enroll(fleet_key=fleet_key, device_id="car-1")
    topic = _topic(fleet, "car-1", "presence")

    # When it says its birth
    birth = {"online": True, "policy_version": 1, "sdk": "edge-sdk/1", "platform": "linux"}
    device_client.publish(topic, json.dumps(birth), retain=True)
    _drain(link, 1)

    # Then it is online over MQTT, with what it said, on the pages' reads
    device = Device.objects.get(device_id="car-1")
    assert device.connected
    assert device.transport == "mqtt"
    assert device.reported_version == 1
    assert device.sdk == "edge-sdk/1"
    assert device_list(fleet=fleet, online=True)[0]["device_id"] == "car-1"
    assert fleet_convergence(fleet)["online"] == 1

    # and still is long after (no heartbeat over MQTT: the broker tells when it ends)
    Device.objects.filter(pk=device.pk).update(last_seen_at=timezone.now().replace(year=2020))
    assert device_list(fleet=fleet, online=True)[0]["online"] is True

    # When its last will arrives
    device_client.publish(topic, json.dumps({"online": False}), retain=True)
    _drain(link, 1)

    # Then it is offline
    assert not Device.objects.get(device_id="car-1").connected
    assert device_list(fleet=fleet, online=True) == []
    assert fleet_convergence(fleet)["online"] == 0


def test_mixed_fleet__websocket_and_mqtt_devices__online_read_alike(
    fleet: Any, fleet_key: str, link: MqttLink, device_client: Watcher
) -> None:
    # Given a WebSocket device that said hello a minute ago and an MQTT device born a week ago
    ws, _ = device_enroll(fleet_key=fleet_key, device_id="phone-ws")
    device_enroll(fleet_key=fleet_key, device_id="car-mqtt")
    Device.objects.filter(pk=ws.pk).update(
        connected=True, transport="ws", last_seen_at=timezone.now()
    )
    device_client.publish(_topic(fleet, "car-mqtt", "presence"), json.dumps({"online": True}))
    _drain(link, 1)
    week_ago = timezone.now() - timezone.timedelta(days=7)
    Device.objects.filter(device_id="car-mqtt").update(last_seen_at=week_ago)

    # Then both are online (registry and convergence); a WebSocket device silent past the
    # window is not
    assert {row["device_id"] for row in device_list(fleet=fleet, online=True)} == {
        "phone-ws",
        "car-mqtt",
    }
    assert fleet_convergence(fleet)["online"] == 2
    Device.objects.filter(pk=ws.pk).update(last_seen_at=week_ago)
    assert [row["device_id"] for row in device_list(fleet=fleet, online=True)] == ["car-mqtt"]
    assert fleet_convergence(fleet)["online"] == 1


def test_presence__will_after_the_device_moved_to_websocket__stays_online(
    fleet: Any, fleet_key: str, link: MqttLink, device_client: Watcher
) -> None:
    # Given a device now online over a WebSocket (its hello came after its MQTT birth)
    device, _ = device_enroll(fleet_key=fleet_key, device_id="car-1")
    Device.objects.filter(pk=device.pk).update(
        connected=True, transport="ws", last_seen_at=timezone.now()
    )

    # When its old MQTT connection's last will arrives
    device_client.publish(_topic(fleet, "car-1", "presence"), json.dumps({"online": False}))
    _drain(link, 1)

    # Then it stays online
    assert Device.objects.get(pk=device.pk).connected


def test_presence__will_of_an_older_session_lands_after_a_newer_birth__stays_online(
    fleet: Any, fleet_key: str, link: MqttLink, device_client: Watcher
) -> None:
    # Given a device born on its second connection (session 2), as one link landed it
    device_enroll(fleet_key=fleet_key, device_id="car-1")
    topic = _topic(fleet, "car-1", "presence")
    device_client.publish(topic, json.dumps({"online": True, "policy_version": 1, "session": 2}))
    _drain(link, 1)
    assert Device.objects.get(device_id="car-1").connected

    # When the last will of its first connection (session 1) lands only now (another link
    # was slower), alone and in a batch behind the birth again
    device_client.publish(topic, json.dumps({"online": False, "session": 1}))
    _drain(link, 1)
    device_client.publish(topic, json.dumps({"online": True, "session": 2}))
    device_client.publish(topic, json.dumps({"online": False, "session": 1}))
    _drain(link, 2)

    # Then it stays online, and the old will is counted as stale
    assert Device.objects.get(device_id="car-1").connected
    assert fleet_convergence(fleet)["online"] == 1
    assert link.drops.counts == {"stale": 1}

    # When the will of its current connection lands, then a birth of the older one again
    device_client.publish(topic, json.dumps({"online": False, "session": 2}))
    _drain(link, 1)
    device_client.publish(topic, json.dumps({"online": True, "session": 1}))
    _drain(link, 1)

    # Then it is offline: a connection's end is newer than its own birth, and an older birth
    # does not bring it back
    assert not Device.objects.get(device_id="car-1").connected
    assert link.drops.counts == {"stale": 2}


@pytest.mark.parametrize("session", [0, -1, 2**63, "7", 1.5, True])
def test_presence__session_not_a_whole_number_from_1__dropped_as_malformed(
    fleet: Any, fleet_key: str, link: MqttLink, device_client: Watcher, session: Any
) -> None:
    # Given an enrolled device
    device_enroll(fleet_key=fleet_key, device_id="car-1")

    # When its birth carries a session that is not a whole number from 1
    body = {"online": True, "session": session}
    device_client.publish(_topic(fleet, "car-1", "presence"), json.dumps(body))
    _drain(link, 1)

    # Then nothing changed, and it is counted
    assert not Device.objects.get(device_id="car-1").connected
    assert link.drops.counts == {"malformed": 1}


def test_telemetry__sent_twice__landed_exactly_once(
    fleet: Any, fleet_key: str, link: MqttLink, device_client: Watcher
) -> None:
    # Given a device's batch of 3 events
    device_enroll(fleet_key=fleet_key, device_id="phone-1")
    body = json.dumps({"events": make_events(3)})

    # When it publishes the batch twice (a QoS 1 redelivery)
    device_client.publish(_topic(fleet, "phone-1", "telemetry"), body)
    device_client.publish(_topic(fleet, "phone-1", "telemetry"), body)
    _drain(link, 2)

    # Then the events are landed once, as POST /api/v1/telemetry lands them
    assert EventKey.objects.count() == 3
    assert LandedBatch.objects.count() == 1
    assert link.drops.counts == {}


def _hostile_messages(fleet: Any) -> list[tuple[str, bytes]]:
    ack, presence = _topic(fleet, "car-1", "ack"), _topic(fleet, "car-1", "presence")
    telemetry = _topic(fleet, "car-1", "telemetry")
    deep = "[" * 5000 + "]" * 5000
    return [
        (ack, b"not json"),
        (ack, b'{"version": "1"}'),
        (ack, b'{"version": 1' + b" " * 5000 + b"}"),
        (ack, deep.encode()),  # too large before it is too deep
        (ack, ("[" * 1500 + "]" * 1500).encode()),  # too deep, within the size
        (ack, b"\xff\xfe"),
        (presence, b'{"online": true, "sdk": "a\\u0000b"}'),
        (presence, json.dumps({"online": True, "model": "m" * 500}).encode()),
        (presence, b'{"online": "yes"}'),
        (telemetry, b'{"events": [{"event_id": "nope"}]}'),
        (telemetry, b'{"events": ' + deep.encode() + b"}"),
        (telemetry, b"x" * (2 * 1024 * 1024)),
        (_topic(fleet, "ghost", "ack"), b'{"version": 1}'),
        (f"{PREFIX}/fleets/{fleet.slug}/devices/car-1/other", b"{}"),
        (f"{PREFIX}/fleets/nowhere/devices/car-1/telemetry", b'{"events": []}'),
    ]


def test_hostile_messages__dropped_and_counted__nothing_stored_other_devices_unaffected(
    fleet: Any, fleet_key: str, link: MqttLink, device_client: Watcher, mqtt_on: Any
) -> None:
    # Given two enrolled devices, one of them revoked, and a link subscribed to every topic
    device_enroll(fleet_key=fleet_key, device_id="car-1")
    revoked, _ = device_enroll(fleet_key=fleet_key, device_id="car-revoked")
    device_revoke(actor=None, device=revoked)
    catch_all = Watcher(mqtt_on, f"$share/controlplane/{PREFIX}/fleets/+/devices/+/other")
    messages = [
        *_hostile_messages(fleet),
        (_topic(fleet, "car-revoked", "ack"), b'{"version": 1}'),
    ]

    # When the hostile messages arrive, then a good ack of another device
    for topic, payload in messages:
        device_client.publish(topic, payload)
    device_client.publish(_topic(fleet, "car-1", "ack"), b'{"version": 1}')
    _drain(link, len(messages))

    # Then each was dropped and counted by reason, nothing stored, the good ack landed
    counts = link.drops.counts
    assert counts["malformed"] == 7, counts
    assert counts["too_large"] == 3, counts  # the padded ack, the deep ack, 2 MiB of telemetry
    assert counts["invalid"] == 2, counts
    assert counts["unknown_device"] == 3, counts  # a ghost, a fleet that is not, a revoked one
    assert EventKey.objects.count() == 0
    assert LandedBatch.objects.count() == 0
    car1 = Device.objects.get(device_id="car-1")
    assert car1.acked_version == 1
    assert not car1.connected
    assert car1.sdk == ""
    catch_all.close()


@pytest.mark.parametrize("hostile", HOSTILE_PARAMS)
def test_birth__hostile_json_value__dropped(
    hostile: Hostile, fleet: Any, fleet_key: str, link: MqttLink, device_client: Watcher
) -> None:
    # Given an enrolled device
    device_enroll(fleet_key=fleet_key, device_id="car-1")

    # When its birth carries a hostile value (deep, NUL, lone surrogate, huge, …)
    payload = '{"online": true, "platform": ' + hostile.raw + "}"
    device_client.publish(_topic(fleet, "car-1", "presence"), payload)
    _drain(link, 1)

    # Then the birth is dropped (malformed, or too large to be one): the device is not marked
    # online with it
    device = Device.objects.get(device_id="car-1")
    assert not device.connected
    assert device.platform == ""
    expected = "too_large" if len(payload) > MAX_CONTROL_BYTES else "malformed"
    assert link.drops.counts == {expected: 1}


def test_ack__after_a_stage_change__only_the_new_assignment_counts(
    fleet: Any,
    fleet_key: str,
    publish_version: Callable[..., Any],
    publisher: Any,
    link: MqttLink,
    device_client: Watcher,
) -> None:
    # Given a rollout of v2 at 5%, and a device of its cohort and one outside it
    publish_version(fleet, threshold=0.8)
    rollout_start(actor=publisher, fleet=fleet, version=2)
    assignment = fleet_assignment(fleet.pk)
    ids = [f"car-{n}" for n in range(200)]
    inside = next(i for i in ids if assignment.version_for(i) == 2)
    outside = next(i for i in ids if assignment.version_for(i) == 1)
    for device_id in (inside, outside):
        device_enroll(fleet_key=fleet_key, device_id=device_id)

    # When both ack v2
    for device_id in (inside, outside):
        device_client.publish(_topic(fleet, device_id, "ack"), b'{"version": 2}')
    _drain(link, 2)

    # Then only the cohort's device counts as running it
    assert Device.objects.get(device_id=inside).acked_version == 2
    assert Device.objects.get(device_id=outside).acked_version is None


def test_metrics__after_drops__prometheus_counters_by_reason(
    fleet: Any, fleet_key: str, link: MqttLink, device_client: Watcher
) -> None:
    # Given a link that took a good ack, a malformed one and one of a device that is not
    import urllib.request

    from routing_policies.mqtt.metrics import CONTENT_TYPE, metrics_serve

    device_enroll(fleet_key=fleet_key, device_id="car-1")
    device_client.publish(_topic(fleet, "car-1", "ack"), b'{"version": 1}')
    device_client.publish(_topic(fleet, "car-1", "ack"), b"{")
    device_client.publish(_topic(fleet, "ghost", "ack"), b'{"version": 1}')
    _drain(link, 3)

    # When Prometheus scrapes its metrics
    server = metrics_serve(link, 0)
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            content_type, text = response.headers["Content-Type"], response.read().decode()
    finally:
        server.shutdown()

    # Then the counters say what was taken and what was dropped, by reason
    assert content_type == CONTENT_TYPE
    lines = text.splitlines()
    assert "edge_routing_mqtt_messages_total 3" in lines
    assert 'edge_routing_mqtt_dropped_total{reason="malformed"} 1' in lines
    assert 'edge_routing_mqtt_dropped_total{reason="unknown_device"} 1' in lines
    assert 'edge_routing_mqtt_dropped_total{reason="not_assigned"} 0' in lines
