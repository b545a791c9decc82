"""Devices' MQTT access on a real Mosquitto with the dynamic-security plugin, driven by the
control plane (routing_policies/broker_access): enrolment grants, re-enrolment and revocation
cut the old credentials off at once, topic rights per device, a broker away at enrolment."""

import json
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from django.core.management import call_command
from paho.mqtt.enums import CallbackAPIVersion
from rest_framework.test import APIClient

from edge_sdk import mqtt_topics
from routing_policies.broker_access import services as broker_access
from routing_policies.models import Device
from routing_policies.services import device_revoke
from tests.factories import make_fleet
from tests.mqtt_broker import Broker

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

ADMIN = ("admin", "admin-pw")
PREFIX = mqtt_topics.DEFAULT_PREFIX
ENROLL = "/api/v1/devices/enroll"
WAIT_S = 5.0


@pytest.fixture
def broker() -> Iterator[Broker]:
    # Not pytest's tmp_path: run as root, the broker drops to the `mosquitto` user, which
    # cannot enter pytest's 0700 directories (the plugin would load no admin account).
    directory = Path(tempfile.mkdtemp(prefix="mqtt-access-"))
    directory.chmod(0o755)
    started = Broker.start(directory / "mosquitto", dynsec_admin=ADMIN)
    yield started
    started.stop()
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def dynsec_settings(settings: Any, broker: Broker) -> Any:
    settings.MQTT_ACCESS = "dynsec"
    settings.MQTT_URL = broker.url
    settings.MQTT_TOPIC_PREFIX = PREFIX
    settings.MQTT_DYNSEC_USERNAME, settings.MQTT_DYNSEC_PASSWORD = ADMIN
    settings.MQTT_DYNSEC_TIMEOUT_S = 3.0
    return settings


class Device_:
    """A raw paho MQTT 5 client, recording what the broker says to it."""

    def __init__(self, broker: Broker, username: str, password: str) -> None:
        self.client = mqtt.Client(
            CallbackAPIVersion.VERSION2, client_id=username, protocol=mqtt.MQTTv5
        )
        self.client.username_pw_set(username, password)
        self.connected = threading.Event()
        self.disconnected = threading.Event()
        self.connect_reason = ""
        self.disconnect_reasons: list[str] = []
        self.acks: dict[int, Any] = {}
        self.acked = threading.Condition()
        self.messages: list[tuple[str, bytes]] = []
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self.client.on_publish = self._on_ack
        self.client.on_subscribe = self._on_subscribe
        self.client.on_message = lambda c, u, m: self.messages.append((m.topic, m.payload))
        self.client.connect(broker.host, broker.port)
        self.client.loop_start()
        assert self.connected.wait(WAIT_S), "no CONNACK"

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        self.connect_reason = str(reason)
        self.connected.set()

    def _on_disconnect(self, client: Any, u: Any, flags: Any, reason: Any, props: Any) -> None:
        self.disconnect_reasons.append(str(reason))
        self.disconnected.set()

    def _on_ack(self, client: Any, userdata: Any, mid: int, reason: Any, props: Any) -> None:
        with self.acked:
            # 0x10 "No matching subscribers" is a success too (MQTT 5, reason codes < 0x80).
            self.acks[mid] = "Success" if not reason.is_failure else str(reason)
            self.acked.notify_all()

    def _on_subscribe(self, client: Any, u: Any, mid: int, reasons: Any, props: Any) -> None:
        with self.acked:
            self.acks[mid] = [str(r) for r in reasons]
            self.acked.notify_all()

    def _wait_ack(self, mid: int) -> Any:
        with self.acked:
            assert self.acked.wait_for(lambda: mid in self.acks, WAIT_S), "no ack"
            return self.acks[mid]

    def publish(self, topic: str, body: dict[str, Any]) -> str:
        info = self.client.publish(topic, json.dumps(body), qos=1)
        return str(self._wait_ack(info.mid))

    def subscribe(self, topic: str) -> list[str]:
        _, mid = self.client.subscribe(topic, qos=1)
        return list(self._wait_ack(mid))

    def topics_received(self, count: int) -> list[str]:
        """The topics of the first `count` messages delivered (waiting for them)."""
        arrived = threading.Event()
        for _ in range(int(WAIT_S / 0.02)):
            if len(self.messages) >= count:
                break
            arrived.wait(0.02)
        return [topic for topic, _ in self.messages]

    def stop(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@pytest.fixture
def connect(broker: Broker) -> Iterator[Callable[[str, str], Device_]]:
    made: list[Device_] = []

    def _connect(username: str, password: str) -> Device_:
        device = Device_(broker, username, password)
        made.append(device)
        return device

    yield _connect
    for device in made:
        device.stop()


def _enrol(fleet_key: str, device_id: str, capture: Any) -> str:
    with capture(execute=True):
        response = APIClient().post(
            ENROLL, {"fleet_key": fleet_key, "device_id": device_id}, format="json"
        )
    assert response.status_code == 201, response.content
    token: str = response.json()["device_token"]
    return token


def _topic(fleet: str, device_id: str, kind: str) -> str:
    return mqtt_topics.device_topic(PREFIX, fleet, device_id, kind)


def test_mqtt_access__enrolled_device__connects_publishes_own_topics_reads_its_fleet(
    dynsec_settings: Any,
    fleet: Any,
    fleet_key: str,
    connect: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # Given a device enrolled while the control plane drives the broker
    token = _enrol(fleet_key, "phone-1", django_capture_on_commit_callbacks)

    # When it connects as {fleet}/{device_id} with its token
    phone = connect(f"{fleet.slug}/phone-1", token)

    # Then it is in, may publish on its own topics and subscribe to its fleet's
    assert phone.connect_reason == "Success"
    for kind in mqtt_topics.DEVICE_TOPICS:
        assert phone.publish(_topic(fleet.slug, "phone-1", kind), {"version": 1}) == "Success"
    assert phone.subscribe(mqtt_topics.fleet_state(PREFIX, fleet.slug)) == ["Granted QoS 1"]
    assert phone.subscribe(mqtt_topics.fleet_version(PREFIX, fleet.slug, "+")) == ["Granted QoS 1"]
    assert phone.subscribe(mqtt_topics.fleet_cloud_pressure(PREFIX, fleet.slug)) == [
        "Granted QoS 1"
    ]
    # and to the documents' protobuf twins, all of them or one
    for version in ("+", 7):
        twin = mqtt_topics.fleet_version_protobuf(PREFIX, fleet.slug, version)
        assert phone.subscribe(twin) == ["Granted QoS 1"], twin


def test_mqtt_access__device__cannot_publish_as_another_nor_read_another_fleet(
    dynsec_settings: Any,
    fleet: Any,
    fleet_key: str,
    publisher: Any,
    connect: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # Given two devices of one fleet, and a second fleet
    token = _enrol(fleet_key, "phone-1", django_capture_on_commit_callbacks)
    _enrol(fleet_key, "phone-2", django_capture_on_commit_callbacks)
    other = make_fleet(actor=publisher, slug="other-fleet")
    phone = connect(f"{fleet.slug}/phone-1", token)
    spy = connect(*ADMIN)
    spy.subscribe(f"{PREFIX}/#")

    # When phone-1 publishes as phone-2, on its fleet's state, and subscribes elsewhere
    as_other = phone.publish(_topic(fleet.slug, "phone-2", "ack"), {"version": 9})
    on_state = phone.publish(mqtt_topics.fleet_state(PREFIX, fleet.slug), {"seq": 99})
    other_state = phone.subscribe(mqtt_topics.fleet_state(PREFIX, other.slug))
    every_state = phone.subscribe(f"{PREFIX}/fleets/+/state")
    everything = phone.subscribe(f"{PREFIX}/#")
    others_acks = phone.subscribe(_topic(fleet.slug, "phone-2", "ack"))
    other_twins = phone.subscribe(mqtt_topics.fleet_version_protobuf(PREFIX, other.slug, "+"))
    below_twin = phone.subscribe(f"{mqtt_topics.fleet_version_protobuf(PREFIX, fleet.slug, 7)}/x")
    on_twin = phone.publish(mqtt_topics.fleet_version_protobuf(PREFIX, fleet.slug, 7), {})

    # Then the broker refuses each (MQTT 5 "Not authorized") and delivers none of them
    assert as_other == "Not authorized"
    assert on_state == on_twin == "Not authorized"
    for refused in (other_state, every_state, everything, others_acks, other_twins, below_twin):
        assert refused == ["Not authorized"]
    # (its own ack, published last, is the only message the spy gets)
    assert phone.publish(_topic(fleet.slug, "phone-1", "ack"), {"version": 1}) == "Success"
    assert spy.topics_received(1) == [_topic(fleet.slug, "phone-1", "ack")]


def test_mqtt_access__re_enrolment__old_token_refused_old_connection_kicked(
    dynsec_settings: Any,
    fleet: Any,
    fleet_key: str,
    connect: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # Given a connected device
    old = _enrol(fleet_key, "phone-1", django_capture_on_commit_callbacks)
    phone = connect(f"{fleet.slug}/phone-1", old)
    phone.client.reconnect_delay_set(60, 60)  # no quiet reconnect with the old token

    # When it enrols again (a reinstalled app)
    new = _enrol(fleet_key, "phone-1", django_capture_on_commit_callbacks)

    # Then its old session is kicked, the old token is refused and the new one works
    assert phone.disconnected.wait(WAIT_S)
    assert connect(f"{fleet.slug}/phone-1", old).connect_reason == "Not authorized"
    assert connect(f"{fleet.slug}/phone-1", new).connect_reason == "Success"


def test_mqtt_access__revocation__kicked_at_once_and_refused(
    dynsec_settings: Any,
    fleet: Any,
    fleet_key: str,
    publisher: Any,
    connect: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # Given a connected device
    token = _enrol(fleet_key, "phone-1", django_capture_on_commit_callbacks)
    phone = connect(f"{fleet.slug}/phone-1", token)
    phone.client.reconnect_delay_set(60, 60)

    # When an operator revokes it
    with django_capture_on_commit_callbacks(execute=True):
        device_revoke(actor=publisher, device=Device.objects.get(device_id="phone-1"))

    # Then the broker drops its session at once and refuses its token
    assert phone.disconnected.wait(WAIT_S)
    assert connect(f"{fleet.slug}/phone-1", token).connect_reason == "Not authorized"


def test_mqtt_access__broker_down_at_enrolment__201_and_sync_cuts_stale_credentials(
    dynsec_settings: Any,
    broker: Broker,
    fleet: Any,
    fleet_key: str,
    publisher: Any,
    connect: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # Given two devices granted while the broker was up
    kept = _enrol(fleet_key, "phone-1", django_capture_on_commit_callbacks)
    stale = _enrol(fleet_key, "phone-2", django_capture_on_commit_callbacks)
    revoked = _enrol(fleet_key, "phone-3", django_capture_on_commit_callbacks)
    failures = sum(broker_access.FAILURES.values())

    # When the broker cannot be reached: phone-2 re-enrols, phone-3 is revoked, phone-4 enrols
    url = dynsec_settings.MQTT_URL
    dynsec_settings.MQTT_URL = "mqtt://127.0.0.1:9"  # nothing listens there
    _enrol(fleet_key, "phone-2", django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        device_revoke(actor=publisher, device=Device.objects.get(device_id="phone-3"))
    _enrol(fleet_key, "phone-4", django_capture_on_commit_callbacks)

    # Then every enrolment still answered 201, and each failure was counted
    assert sum(broker_access.FAILURES.values()) == failures + 3
    # ... the broker still takes the old credentials, until a sync
    assert connect(f"{fleet.slug}/phone-2", stale).connect_reason == "Success"

    # When the broker is back and the reconcile runs
    dynsec_settings.MQTT_URL = url
    call_command("mqtt_access", "sync")

    # Then the replaced and the revoked credentials are refused, the current ones still work
    assert connect(f"{fleet.slug}/phone-2", stale).connect_reason == "Not authorized"
    assert connect(f"{fleet.slug}/phone-3", revoked).connect_reason == "Not authorized"
    assert connect(f"{fleet.slug}/phone-1", kept).connect_reason == "Success"
    # ... and the device enrolled meanwhile is reported (its token exists only on it)
    report = broker_access.broker_access_sync(dry_run=True).as_dict()
    assert report["missing_devices"] == [f"{fleet.slug}/phone-2", f"{fleet.slug}/phone-4"]
    assert (report["in_line"], report["removed"], report["stale_removed"]) == (1, 0, 0)


def test_mqtt_access__dynsec_role_topics__no_username_substitution_in_2_0_11(
    dynsec_settings: Any, broker: Broker, connect: Any
) -> None:
    # Given a role whose topic names the client by %u and %c (as mosquitto's acl_file allows)
    broker_access._run(
        [
            {
                "command": "createRole",
                "rolename": "pattern",
                "acls": [
                    {"acltype": "publishClientSend", "topic": "t/%u/x", "allow": True},
                    {"acltype": "publishClientSend", "topic": "t/%c/y", "allow": True},
                ],
            },
            {
                "command": "createClient",
                "username": "u1",
                "password": "p1",
                "clientid": "u1",
                "roles": [{"rolename": "pattern"}],
            },
        ]
    )
    client = connect("u1", "p1")

    # When the client publishes on the substituted topics
    # Then it is refused: the plugin matches the topics literally, so each device needs a
    # role of its own (docs/mqtt-brokers.md)
    assert client.publish("t/u1/x", {}) == "Not authorized"
    assert client.publish("t/u1/y", {}) == "Not authorized"
    assert client.publish("t/%u/x", {}) == "Success"


def test_mqtt_access__controlplane_account__publishes_fleet_state_reads_devices_shared(
    dynsec_settings: Any,
    fleet: Any,
    fleet_key: str,
    connect: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # Given the control plane's own account, made by the reconcile
    dynsec_settings.MQTT_USERNAME, dynsec_settings.MQTT_PASSWORD = "controlplane", "cp-pw"
    call_command("mqtt_access", "sync")
    token = _enrol(fleet_key, "phone-1", django_capture_on_commit_callbacks)
    control = connect("controlplane", "cp-pw")
    phone = connect(f"{fleet.slug}/phone-1", token)

    # When it subscribes (shared) to the devices' acks and publishes the fleet's state
    shared = mqtt_topics.shared(_topic("+", "+", "ack"))
    granted = control.subscribe(shared)
    published = control.publish(mqtt_topics.fleet_state(PREFIX, fleet.slug), {"seq": 1})
    phone.publish(_topic(fleet.slug, "phone-1", "ack"), {"version": 1})

    # Then both are allowed, and the device's ack reaches it
    assert granted == ["Granted QoS 1"]
    assert published == "Success"
    assert control.topics_received(1) == [_topic(fleet.slug, "phone-1", "ack")]


ACCESS = "/api/v1/devices/me/broker-access"


def _ask_access(token: str) -> Any:
    return APIClient().post(ACCESS, HTTP_AUTHORIZATION=f"Bearer {token}")


def test_mqtt_access__enrolled_while_broker_down__device_asks_and_the_broker_takes_it(
    dynsec_settings: Any,
    broker: Broker,
    fleet: Any,
    fleet_key: str,
    connect: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # Given a device that enrolled while the broker could not be reached: the broker refuses it
    url = dynsec_settings.MQTT_URL
    dynsec_settings.MQTT_URL = "mqtt://127.0.0.1:9"  # nothing listens there
    token = _enrol(fleet_key, "phone-late", django_capture_on_commit_callbacks)
    dynsec_settings.MQTT_URL = url
    assert connect(f"{fleet.slug}/phone-late", token).connect_reason == "Not authorized"

    # When the device, refused, asks the control plane for its broker access
    answer = _ask_access(token)

    # Then the control plane gave the broker its client, and it connects with its token
    assert answer.status_code == 204, answer.content
    assert connect(f"{fleet.slug}/phone-late", token).connect_reason == "Success"
    # ... within its rights only (its own topics, its fleet's state)
    report = broker_access.broker_access_sync(dry_run=True).as_dict()
    assert report["missing_devices"] == []
    # and asking again at once is refused for a minute (each ask costs the broker's admin)
    again = _ask_access(token)
    assert again.status_code == 429
    assert again.json()["error"]["code"] == "rate_limited"
    assert int(again["Retry-After"]) > 0


def test_mqtt_access__ask_while_broker_down__503_retry_after_and_nothing_granted(
    dynsec_settings: Any,
    broker: Broker,
    fleet: Any,
    fleet_key: str,
    connect: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # Given a device enrolled while the broker was down, and the broker still unreachable
    url = dynsec_settings.MQTT_URL
    dynsec_settings.MQTT_URL = "mqtt://127.0.0.1:9"
    token = _enrol(fleet_key, "phone-away", django_capture_on_commit_callbacks)
    failures = sum(broker_access.FAILURES.values())

    # When it asks for its broker access
    answer = _ask_access(token)

    # Then the answer says the broker could not be told and when to try again, counted
    assert answer.status_code == 503
    assert answer.json()["error"]["code"] == "broker_unavailable"
    assert answer["Retry-After"] == "30"
    assert sum(broker_access.FAILURES.values()) == failures + 1
    # ... where the operator sees it: this process's /metrics counts the failed grants
    scraped = APIClient().get("/metrics").content.decode()
    grants = broker_access.FAILURES["grant"]
    assert f'controlplane_broker_access_failures_total{{operation="grant"}} {grants}' in scraped
    assert 'controlplane_broker_access_failures_total{operation="sync"}' in scraped
    # and the broker, back, still does not know the device
    dynsec_settings.MQTT_URL = url
    assert connect(f"{fleet.slug}/phone-away", token).connect_reason == "Not authorized"


def test_mqtt_access__revoked_or_foreign_token__ask_refused_401_nothing_granted(
    dynsec_settings: Any,
    broker: Broker,
    fleet: Any,
    fleet_key: str,
    publisher: Any,
    connect: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # Given a revoked device
    token = _enrol(fleet_key, "phone-gone", django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        device_revoke(actor=publisher, device=Device.objects.get(device_id="phone-gone"))

    # When it, or a caller with no token or a made-up one, asks for broker access
    answers = [
        _ask_access(token),
        APIClient().post(ACCESS),
        _ask_access("made-up-token"),
        APIClient().post(ACCESS, HTTP_AUTHORIZATION="Basic eDp5"),
    ]

    # Then each is refused as unauthenticated, and the broker still refuses the revoked token
    assert [a.status_code for a in answers] == [401] * 4
    assert connect(f"{fleet.slug}/phone-gone", token).connect_reason == "Not authorized"
