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


@pytest.fixture
def links(mosquitto: Broker, transactional_db: None, tmp_path: Path) -> Iterator[None]:  # noqa: F811
    """Two `manage.py mqtt_link` processes on the test's database and broker."""
    require_postgres_and_redis("the MQTT link")
    env = {
        **server_environment(connection.settings_dict),
        "MQTT_URL": mosquitto.url,
        "MQTT_TOPIC_PREFIX": PREFIX,
        "MQTT_RECONCILE_S": "0.5",
    }
    processes = []
    for n in range(2):
        log = (tmp_path / f"link-{n}.log").open("w")
        processes.append(
            subprocess.Popen(
                [sys.executable, "manage.py", "mqtt_link"],
                cwd=REPO_ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
    yield
    for process in processes:
        os.killpg(process.pid, signal.SIGINT)
    for process in processes:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


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
    links: None,
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
