"""The MQTT link as it runs: two `manage.py mqtt_link` processes on a real Mosquitto, sharing the
devices' messages, over the test's PostgreSQL. A raw paho device reads its fleet's retained
state (published by the link's reconcile), acks its version, says its birth, sends telemetry
twice, and dies: every write lands once, and its last will marks it offline."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest
from django.db import connection
from paho.mqtt.enums import CallbackAPIVersion

from edge_sdk import mqtt_topics
from edge_sdk.assignment import FleetAssignment
from routing_policies.models import Device
from routing_policies.selectors import fleet_assignment
from routing_policies.services import device_enroll, fleet_enrollment_key_rotate
from telemetry.models import EventKey
from tests.factories import make_events, make_fleet
from tests.live_server import REPO_ROOT, require_postgres_and_redis, server_environment
from tests.mqtt_broker import Broker, mosquitto  # noqa: F401  # the fixture

pytestmark = [pytest.mark.integration]

PREFIX = "it/v1"


def _wait(condition: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


class Links:
    """`manage.py mqtt_link` processes on the test's database and broker."""

    def __init__(self, broker: Broker, directory: Path, *, prefix: str = PREFIX) -> None:
        self.env = {
            **server_environment(connection.settings_dict),
            "MQTT_URL": broker.url,
            "MQTT_TOPIC_PREFIX": prefix,
            "MQTT_RECONCILE_S": "0.5",
            "MQTT_CA_FILE": str(broker.tls.ca) if broker.tls else "",
        }
        self.directory = directory
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, *options: str) -> None:
        """Start link `name` (with more of `mqtt_link`'s options, e.g. `--metrics-port`)."""
        log = (self.directory / f"link-{name}.log").open("a")
        self.processes[name] = subprocess.Popen(
            [sys.executable, "manage.py", "mqtt_link", "--name", name, *options],
            cwd=REPO_ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def kill(self, name: str) -> None:
        """SIGKILL: no goodbye, a batch perhaps written and not yet acknowledged."""
        process = self.processes.pop(name)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()

    def stop_all(self) -> None:
        for process in self.processes.values():
            os.killpg(process.pid, signal.SIGINT)
        for process in self.processes.values():
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


@pytest.fixture
def links(mosquitto: Broker, transactional_db: None, tmp_path: Path) -> Iterator[Links]:  # noqa: F811
    """Two links, `a` and `b`, running."""
    require_postgres_and_redis("the MQTT link")
    running = Links(mosquitto, tmp_path)
    running.start("a")
    running.start("b")
    yield running
    running.stop_all()


class RawDevice:
    """A device written against docs/PROTOCOL.md's MQTT section with nothing but paho."""

    def __init__(self, broker: Broker, fleet: str, device_id: str) -> None:
        self.fleet, self.device_id = fleet, device_id
        self.states: list[dict[str, Any]] = []
        self.client = paho.Client(
            CallbackAPIVersion.VERSION2, client_id=f"{fleet}/{device_id}", protocol=paho.MQTTv5
        )
        self.client.will_set(self.topic("presence"), b'{"online": false}', qos=1, retain=True)
        self.client.on_message = lambda c, u, m: self.states.append(json.loads(m.payload))
        self.client.connect(broker.host, broker.port, keepalive=5)
        self.client.loop_start()
        self.client.subscribe(mqtt_topics.fleet_state(PREFIX, fleet), qos=1)

    def topic(self, kind: str) -> str:
        return mqtt_topics.device_topic(PREFIX, self.fleet, self.device_id, kind)

    def publish(self, kind: str, payload: Any, *, retain: bool = False) -> None:
        self.client.publish(self.topic(kind), json.dumps(payload), qos=1, retain=retain)

    def version(self) -> int | None:
        state = self.states[-1]
        rollout = state["rollout"] or {}
        return FleetAssignment(
            stable=state["stable"],
            candidate=state["candidate"],
            salt=rollout.get("salt", ""),
            percent=rollout.get("stage", 0),
            rollout_id=rollout.get("id"),
            holdback=rollout.get("holdback", 0),
        ).version_for(self.device_id)

    def die(self) -> None:
        """The connection ends without a goodbye (the broker then sends the last will)."""
        self.client.loop_stop()
        sock = self.client.socket()
        if isinstance(sock, socket.socket):
            sock.shutdown(socket.SHUT_RDWR)
            sock.close()


def test_mqtt_link__device_lifecycle__state_ack_presence_telemetry_once_and_will(
    links: Links,
    mosquitto: Broker,  # noqa: F811
    make_user: Callable[..., Any],
) -> None:
    # Given a fleet with v1, an enrolled device, and two links running
    from controlplane.roles import Role

    publisher = make_user(Role.PUBLISHER)
    fleet = make_fleet(actor=publisher)
    key = fleet_enrollment_key_rotate(actor=publisher, fleet=fleet)
    device_enroll(fleet_key=key, device_id="car-1")

    # When the device connects and reads its fleet's retained state
    car = RawDevice(mosquitto, fleet.slug, "car-1")
    _wait(lambda: car.states, "the retained state (published by the links' reconcile)")

    # Then it computes the server's version
    assert car.version() == fleet_assignment(fleet.pk).version_for("car-1") == 1

    # When it says its birth, acks its version and sends a telemetry batch twice
    car.publish("presence", {"online": True, "policy_version": 1, "sdk": "raw"}, retain=True)
    car.publish("ack", {"version": car.version()})
    body = {"events": make_events(4, device_id="car-1")}
    car.publish("telemetry", body)
    car.publish("telemetry", body)

    # Then it is online, its ack is recorded, its events landed once
    _wait(lambda: Device.objects.filter(device_id="car-1", connected=True).exists(), "birth")
    _wait(lambda: Device.objects.get(device_id="car-1").acked_version == 1, "the ack")
    _wait(lambda: EventKey.objects.count() == 4, "the telemetry")
    time.sleep(1.0)
    assert EventKey.objects.count() == 4
    device = Device.objects.get(device_id="car-1")
    assert device.transport == "mqtt"
    assert device.sdk == "raw"

    # When its connection dies
    car.die()

    # Then its last will marks it offline
    _wait(lambda: not Device.objects.get(device_id="car-1").connected, "the last will", timeout=30)


def test_mqtt_link__killed_mid_stream_and_restarted__no_ack_or_event_lost_or_doubled(
    links: Links,
    mosquitto: Broker,  # noqa: F811
    make_user: Callable[..., Any],
) -> None:
    # Given 40 enrolled devices on v1, and links a and b sharing their messages
    from controlplane.roles import Role

    publisher = make_user(Role.PUBLISHER)
    fleet = make_fleet(actor=publisher)
    key = fleet_enrollment_key_rotate(actor=publisher, fleet=fleet)
    ids = [f"car-{n:02d}" for n in range(40)]
    for device_id in ids:
        device_enroll(fleet_key=key, device_id=device_id)
    cars = [RawDevice(mosquitto, fleet.slug, device_id) for device_id in ids]
    _wait(lambda: all(car.states for car in cars), "the retained state")

    # When every device acks and sends a batch of 3 events, and link a is killed midway (and
    # restarted after the rest was sent)
    for n, car in enumerate(cars):
        car.publish("ack", {"version": 1})
        car.publish("telemetry", {"events": make_events(3, device_id=car.device_id)})
        if n == len(cars) // 2:
            links.kill("a")
    time.sleep(1.0)
    links.start("a")

    # Then every ack and every event landed, each event once
    _wait(
        lambda: Device.objects.filter(fleet=fleet, acked_version=1).count() == len(ids),
        "every ack",
    )
    _wait(lambda: EventKey.objects.count() == 3 * len(ids), "every event")
    time.sleep(1.0)
    assert EventKey.objects.count() == 3 * len(ids)
    for car in cars:
        car.client.disconnect()
        car.client.loop_stop()
