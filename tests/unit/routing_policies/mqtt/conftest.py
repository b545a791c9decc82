"""Fixtures of the MQTT link's tests: a real Mosquitto of the test's own (tests/mqtt_broker.py),
the control plane pointed at it, and raw paho clients standing for devices and watchers."""

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from routing_policies.mqtt import receivers
from routing_policies.mqtt.client import publisher
from tests.mqtt_broker import Broker, mosquitto  # noqa: F401  # the fixture

PREFIX = "test/v1"


@dataclass
class Received:
    topic: str
    payload: bytes
    retain: bool
    expiry_s: int | None
    content_type: str = ""  # MQTT 5's content type ("" without one)

    def json(self) -> Any:
        return json.loads(self.payload)


class Watcher:
    """A raw MQTT 5 client subscribed to some topics, recording what it gets."""

    def __init__(self, broker: Broker, *topic_filters: str, client_id: str = "") -> None:
        self.messages: list[Received] = []
        self._lock = threading.Lock()
        self._subscribed = threading.Event()
        self.client = paho.Client(
            CallbackAPIVersion.VERSION2, client_id=client_id, protocol=paho.MQTTv5
        )
        self.client.on_message = self._on_message
        self.client.on_subscribe = lambda *args: self._subscribed.set()
        self.client.connect(broker.host, broker.port)
        self.client.loop_start()
        if topic_filters:
            self.client.subscribe([(topic_filter, 1) for topic_filter in topic_filters])
            assert self._subscribed.wait(5), "the broker did not confirm the subscription"

    def _on_message(self, client: Any, userdata: Any, message: paho.MQTTMessage) -> None:
        expiry = getattr(message.properties, "MessageExpiryInterval", None)
        content_type = getattr(message.properties, "ContentType", "")
        received = Received(
            message.topic, bytes(message.payload), bool(message.retain), expiry, content_type
        )
        with self._lock:
            self.messages.append(received)

    def on(self, topic: str) -> list[Received]:
        with self._lock:
            return [m for m in self.messages if m.topic == topic]

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            assert time.monotonic() < deadline, f"timed out; got {self.messages!r}"
            time.sleep(0.01)

    def settle(self, quiet_s: float = 0.3) -> None:
        """Wait until nothing more arrived for `quiet_s`."""
        seen = -1
        while seen != len(self.messages):
            seen = len(self.messages)
            time.sleep(quiet_s)

    def publish(self, topic: str, payload: bytes | str, *, retain: bool = False) -> None:
        info = self.client.publish(topic, payload, qos=1, retain=retain)
        info.wait_for_publish(5)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@pytest.fixture
def mqtt_on(mosquitto: Broker, settings: Any) -> Iterator[Broker]:  # noqa: F811
    """The control plane's MQTT link on, to the test's own broker: its receivers connected (as
    with MQTT_URL set at start), its publisher closed afterwards."""
    settings.MQTT_URL = mosquitto.url
    settings.MQTT_TOPIC_PREFIX = PREFIX
    receivers.connect()
    yield mosquitto
    receivers.disconnect()
    publisher().close()


@pytest.fixture
def watch(mqtt_on: Broker) -> Iterator[Callable[..., Watcher]]:
    """`watch(*topic_filters)`: a watcher (closed when the test ends)."""
    made: list[Watcher] = []

    def _watch(*topic_filters: str) -> Watcher:
        watcher = Watcher(mqtt_on, *topic_filters)
        made.append(watcher)
        return watcher

    yield _watch
    for watcher in made:
        watcher.close()
