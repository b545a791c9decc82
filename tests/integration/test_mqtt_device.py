"""The edge SDK's `Device(..., transport="mqtt")` against a real Mosquitto (issue 24).

Each test plays the control plane's part on the broker as docs/PROTOCOL.md ("MQTT") says it
publishes: the fleet's retained rollout state and each version's retained document (a raw
paho client), and watches the device topics with another (the acks, presence and telemetry the
control plane's subscribers would read). The devices are real SDK devices on the test's event
loop; the HTTP base URL points at a closed loopback port unless a test serves the immutable
document itself.
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from websockets.asyncio.server import ServerConnection, serve

from edge_sdk import Device, DeviceConfig, Readings
from edge_sdk import mqtt_topics as topics
from edge_sdk.assignment import FleetAssignment
from edge_sdk.delta import canonical_bytes
from edge_sdk.transport.mqtt import DOCUMENT_PATH, MqttTransport
from edge_sdk.wire import PROTOBUF_MEDIA_TYPE, codec
from tests.hostile_protobuf import hostile_messages, with_unknown_fields
from tests.mqtt_broker import MOSQUITTO, Broker
from tests.unit.edge_sdk.sdk_helpers import Inference, policy_document, readings, task

pytestmark = pytest.mark.integration

FLEET = "mqtt-fleet"
PREFIX = topics.DEFAULT_PREFIX
WAIT_S = 30.0  # outer bound of each wait; each ends as soon as its condition holds
CLOSED_HTTP = "http://127.0.0.1:9"  # nothing listens: the HTTP document fallback fails fast


def document(version: int) -> dict[str, Any]:
    return {**policy_document(version), "fleet": FLEET, "etag": f'"v{version}-mqtt"'}


def encoded(message: Any) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode()


def state(
    seq: int,
    stable: int | None,
    candidate: int | None = None,
    *,
    rollout: dict[str, Any] | None = None,
    published: int | None = None,
) -> bytes:
    message = {
        "seq": seq,
        "fleet": FLEET,
        "stable": stable,
        "candidate": candidate,
        "rollout": rollout,
    }
    if published is not None:  # the newest published version (a control plane since issue 24)
        message["published"] = published
    return encoded(message)


def rollout(stage: int, *, salt: str = "salt-1", holdback: int = 0) -> dict[str, Any]:
    return {"id": 7, "stage": stage, "salt": salt, "holdback": holdback}


class ControlPlane:
    """The control plane's side of the broker: retained fleet topics out, device topics in."""

    def __init__(self, broker: Broker, fleet: str = FLEET) -> None:
        self.fleet = fleet
        self.messages: list[tuple[str, bytes, bool]] = []
        self._lock = threading.Lock()
        self.client = mqtt.Client(
            CallbackAPIVersion.VERSION2, client_id="controlplane", protocol=mqtt.MQTTv5
        )
        self.client.on_message = self._on_message
        self.client.connect(broker.host, broker.port)
        self.client.loop_start()
        self.client.subscribe(topics.device_topic(PREFIX, fleet, "+", "+"), qos=1)
        wait_for(lambda: self.client.is_connected())

    def _on_message(self, client: Any, userdata: Any, message: mqtt.MQTTMessage) -> None:
        with self._lock:
            self.messages.append((message.topic, bytes(message.payload), bool(message.retain)))

    def publish(
        self,
        topic: str,
        payload: bytes,
        *,
        expiry: int | None = None,
        content_type: str = "application/json",
    ) -> None:
        properties = Properties(PacketTypes.PUBLISH)
        properties.PayloadFormatIndicator = int(content_type == "application/json")
        properties.ContentType = content_type
        if expiry is not None:
            properties.MessageExpiryInterval = expiry
        info = self.client.publish(topic, payload, qos=1, retain=True, properties=properties)
        info.wait_for_publish(timeout=10)

    def state(self, payload: bytes) -> None:
        self.publish(topics.fleet_state(PREFIX, self.fleet), payload)

    def version(self, number: int, payload: bytes | None = None) -> None:
        body = encoded(document(number)) if payload is None else payload
        self.publish(topics.fleet_version(PREFIX, self.fleet, number), body)

    def version_protobuf(self, number: int, payload: bytes | None = None) -> None:
        """Version `number`'s protobuf twin (docs/PROTOCOL.md, "MQTT": Documents in protobuf)."""
        body = codec.document_to_protobuf(document(number)) if payload is None else payload
        topic = topics.fleet_version_protobuf(PREFIX, self.fleet, number)
        self.publish(topic, body, content_type=PROTOBUF_MEDIA_TYPE)

    def kinds(self, device_id: str) -> list[str]:
        """The kinds of topic the device published on (ack, presence, …), oldest first."""
        mine = topics.device_topic(PREFIX, self.fleet, device_id, "")
        with self._lock:
            return [t[len(mine) :] for t, _, _ in self.messages if t.startswith(mine)]

    def of(self, device_id: str, kind: str) -> list[Any]:
        """What the device published on its `kind` topic, decoded, oldest first."""
        topic = topics.device_topic(PREFIX, self.fleet, device_id, kind)
        with self._lock:
            return [json.loads(payload) for t, payload, _ in self.messages if t == topic]

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def wait_for(condition: Callable[[], Any], timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


async def until(condition: Callable[[], Any], timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


class Network:
    """The app's readings: `online` switched by the test."""

    def __init__(self) -> None:
        self.online = True

    def __call__(self) -> Readings:
        return readings(online=self.online)


def make_device(
    broker_url: str,
    device_id: str,
    *,
    network: Network | None = None,
    rng: random.Random | None = None,
    **config: Any,
) -> Device:
    inference = Inference()
    settings: dict[str, Any] = {
        "base_url": CLOSED_HTTP,
        "fleet_key": "unused",
        "device_id": device_id,
        "platform": "android",
        "model": "pixel-9",
        "mqtt_url": broker_url,
        "fleet": FLEET,
        "backoff_base_s": 0.05,
        "backoff_max_s": 0.5,
        "online_check_s": 0.1,
        "telemetry_flush_s": 0.1,
        "mqtt_document_wait_s": 0.5,
        "http_timeout_s": 5.0,
        "mqtt_ack_jitter_s": 0.0,  # acks at once, `{"version": n}`; the spread has its tests
        **config,
    }
    device = Device(
        DeviceConfig(**settings),
        readings=network or Network(),
        device_infer=inference.on_device,
        cloud_infer=inference.on_cloud,
        transport="mqtt",
        rng=rng,
    )
    device.token = f"token-of-{device_id}"  # enrolled (the anonymous broker takes any password)
    return device


def transport_of(device: Device) -> MqttTransport:
    transport = device._connection.transport
    assert isinstance(transport, MqttTransport)
    return transport


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    started = Broker.start(tmp_path / "mosquitto")
    yield started
    started.stop()


@pytest.fixture
def control(broker: Broker) -> Iterator[ControlPlane]:
    plane = ControlPlane(broker)
    yield plane
    plane.close()


@pytest.fixture
async def devices() -> AsyncIterator[list[Device]]:
    started: list[Device] = []
    yield started
    await asyncio.gather(*(device.stop() for device in started))


async def started(devices: list[Device], *new: Device) -> None:
    for device in new:
        await device.start()
        devices.append(device)


# --- the rollout: each device computes its own version ------------------------------------------


async def converged(
    fleet: list[Device], control: ControlPlane, assignment: FleetAssignment
) -> dict[str, int | None]:
    """Wait until each device runs (and has acked) the version `assignment` gives it."""
    wanted = {d.config.device_id: assignment.version_for(d.config.device_id) for d in fleet}
    await until(lambda: all(d.policy.version == wanted[d.config.device_id] for d in fleet))
    await until(
        lambda: all(
            {"version": wanted[d.config.device_id]} in control.of(d.config.device_id, "ack")
            for d in fleet
        )
    )
    return wanted


async def test_mqtt_fleet__stages_and_rollback__each_device_runs_its_bucket_version_and_acks(
    broker: Broker, control: ControlPlane, devices: list[Device]
) -> None:
    # Given versions 1 and 2 retained, and a rollout of 2 at 25% over 1
    control.version(1)
    control.version(2)
    control.state(state(1, 1, 2, rollout=rollout(25)))
    fleet = [make_device(broker.url, f"dev-{i:03d}") for i in range(40)]

    # When 40 MQTT devices start
    await started(devices, *fleet)

    # Then each runs exactly what the bucket rule gives it, and acked it on its own topic
    at_25 = FleetAssignment(1, 2, "salt-1", percent=25, rollout_id=7)
    wanted = await converged(fleet, control, at_25)
    assert set(wanted.values()) == {1, 2}  # both cohorts are there
    on_candidate = [d for d in fleet if d.policy.version == 2]
    assert all(d.policy.rollout == {"id": 7, "stage": 25} for d in on_candidate)

    # When the rollout goes to 100%, then every device runs the candidate
    control.state(state(2, 1, 2, rollout=rollout(100)))
    await converged(fleet, control, FleetAssignment(1, 2, "salt-1", percent=100, rollout_id=7))

    # When the rollout is rolled back (candidate gone, no rollout)
    control.state(state(3, 1))

    # Then every device runs 1 again and says so
    await until(lambda: all(d.policy.version == 1 for d in fleet))
    await until(
        lambda: all(control.of(d.config.device_id, "ack")[-1] == {"version": 1} for d in fleet)
    )
    assert all(d.connection_state == "connected" for d in fleet)
    # Presence: a birth per device, retained, with what the WS hello would say
    birth = control.of("dev-000", "presence")[0]
    assert birth == {
        "online": True,
        "policy_version": None,
        "sdk": fleet[0].config.sdk,
        "platform": "android",
        "model": "pixel-9",
        "session": transport_of(fleet[0]).presence_session,
    }


async def test_mqtt_device__holdback_at_100__the_held_back_buckets_stay_on_stable(
    broker: Broker, control: ControlPlane, devices: list[Device]
) -> None:
    # Given a rollout at 100% that holds back 20% of the buckets
    control.version(1)
    control.version(2)
    control.state(state(1, 1, 2, rollout=rollout(100, holdback=20)))
    fleet = [make_device(broker.url, f"hold-{i:02d}") for i in range(20)]

    # When the devices start
    await started(devices, *fleet)

    # Then the held-back ones run stable, exactly as the assignment says
    expected = FleetAssignment(1, 2, "salt-1", percent=100, rollout_id=7, holdback=20)
    wanted = {d.config.device_id: expected.version_for(d.config.device_id) for d in fleet}
    assert set(wanted.values()) == {1, 2}
    await until(lambda: all(d.policy.version == wanted[d.config.device_id] for d in fleet))
    on_candidate = [d for d in fleet if d.policy.version == 2]
    assert all(d.policy.rollout == {"id": 7, "stage": 100, "holdback": 20} for d in on_candidate)


# --- documents held: prefetched, and applied from memory ---------------------------------------


@pytest.fixture
def logged_broker(tmp_path: Path) -> Iterator[Broker]:
    """A broker whose log names every SUBSCRIBE (how often a device asked for a document)."""
    started = Broker.start(tmp_path / "logged", log_subscriptions=True)
    yield started
    started.stop()


def first_device(prefix: str, *wanted: tuple[FleetAssignment, int]) -> str:
    """The first id `{prefix}-{i}` that each assignment puts on the version paired with it."""
    return next(
        f"{prefix}-{i}"
        for i in range(10_000)
        if all(rule.version_for(f"{prefix}-{i}") == version for rule, version in wanted)
    )


def subscribed(broker: Broker, device_id: str, version: int) -> int:
    """SUBSCRIBEs of the device to version `version`'s document topic, as the broker logged."""
    topic = topics.fleet_version(PREFIX, FLEET, version)
    return broker.subscriptions(f"{FLEET}/{device_id}", topic)


async def test_mqtt_device__stages_and_rollback__documents_prefetched_once_then_applied_from_memory(
    logged_broker: Broker, devices: list[Device]
) -> None:
    # Given versions 1 and 2 retained, a rollout of 2 at 5%, and three devices: one that the
    # 25% stage moves, one that only 100% moves, one in the 5% cohort
    control = ControlPlane(logged_broker)
    at = {stage: FleetAssignment(1, 2, "salt-1", percent=stage, rollout_id=7) for stage in (5, 25)}
    at_25_id = first_device("pre", (at[5], 1), (at[25], 2))
    at_100_id = first_device("pre", (at[25], 1))
    at_5_id = first_device("pre", (at[5], 2))
    try:
        control.version(1)
        control.version(2)
        control.state(state(1, 1, 2, rollout=rollout(5)))
        ids = (at_25_id, at_100_id, at_5_id)
        fleet = [
            make_device(logged_broker.url, device_id, mqtt_prefetch_jitter_s=0.2)
            for device_id in ids
        ]
        by_id = dict(zip(ids, fleet, strict=True))

        # When they start
        await started(devices, *fleet)

        # Then each runs its version and takes the other version the state names in the
        # background, once: the ones on stable the candidate, the one on the candidate stable
        await until(lambda: [d.policy.version for d in fleet] == [1, 1, 2])
        await until(lambda: all(transport_of(d).documents["prefetched"] == 1 for d in fleet))
        assert all(sorted(transport_of(d).held.versions()) == [1, 2] for d in fleet)
        assert [subscribed(logged_broker, i, 2) for i in ids] == [1, 1, 1]
        assert [subscribed(logged_broker, i, 1) for i in ids] == [1, 1, 1]

        # When the rollout goes to 25%, then to 100%
        control.state(state(2, 1, 2, rollout=rollout(25)))
        await until(lambda: by_id[at_25_id].policy.version == 2)
        control.state(state(3, 1, 2, rollout=rollout(100)))
        await until(lambda: by_id[at_100_id].policy.version == 2)

        # Then each applied the candidate from memory and acked it, without asking the broker
        # for its document again
        for device_id in (at_25_id, at_100_id):
            await until(lambda i=device_id: control.of(i, "ack")[-1:] == [{"version": 2}])
            assert transport_of(by_id[device_id]).documents == {
                "fetched": 1,
                "prefetched": 1,
                "held": 1,
            }
        assert by_id[at_100_id].policy.rollout == {"id": 7, "stage": 100}

        # When the rollout is rolled back
        control.state(state(4, 1))

        # Then every device runs stable again from memory and acks it
        await until(lambda: all(d.policy.version == 1 for d in fleet))
        await until(lambda: all(control.of(i, "ack")[-1] == {"version": 1} for i in ids))
        assert [transport_of(d).documents["held"] for d in fleet] == [2, 2, 1]
        assert [subscribed(logged_broker, i, v) for i in ids for v in (1, 2)] == [1] * 6
        assert all(d.policy_errors == 0 for d in fleet)
    finally:
        control.close()


async def test_mqtt_device__corrupted_prefetched_document__never_applied_the_device_ends_right(
    logged_broker: Broker, devices: list[Device]
) -> None:
    # Given a rollout of 2 at 5% whose retained document is corrupted: JSON of version 2,
    # but its cells are not a policy's
    control = ControlPlane(logged_broker)
    at_5 = FleetAssignment(1, 2, "salt-1", percent=5, rollout_id=7)
    device_id = first_device("bad", (at_5, 1))
    corrupted = encoded({**document(2), "cells": [{"task_type": "chat"}]})
    try:
        control.version(1)
        control.version(2, corrupted)
        control.state(state(1, 1, 2, rollout=rollout(5)))
        device = make_device(logged_broker.url, device_id, mqtt_prefetch_jitter_s=0.0)
        transport = transport_of(device)

        # When a device outside the cohort starts and prefetches the candidate
        await started(devices, device)
        await until(lambda: device.policy.version == 1)
        await until(lambda: transport.dropped["bad_document"] == 1)

        # Then it holds nothing of version 2
        assert 2 not in transport.held
        assert transport.documents["prefetched"] == 0

        # When the document is put right and the rollout goes to 100%
        control.version(2)
        control.state(state(2, 1, 2, rollout=rollout(100)))

        # Then it takes the right document when it needs it, runs 2 and acks it
        await until(lambda: device.policy.version == 2)
        await until(lambda: control.of(device_id, "ack")[-1] == {"version": 2})
        assert subscribed(logged_broker, device_id, 2) == 2
        assert device.policy.document["cells"] == document(2)["cells"]

        # When its held copy of version 1 is corrupted in memory and the rollout rolled back
        held = transport.held._entries[1]
        tampered = held.payload.replace(b'"cells"', b'"cellz"', 1)
        transport.held._entries[1] = type(held)(held.etag, tampered, held.digest)
        control.state(state(3, 1))

        # Then the held copy is not applied: version 1 is fetched again, and it runs it
        await until(lambda: device.policy.version == 1)
        await until(lambda: control.of(device_id, "ack")[-1] == {"version": 1})
        assert transport.dropped["bad_held_document"] == 1
        assert subscribed(logged_broker, device_id, 1) == 2
        assert device.policy_errors == 0
        assert device.policy.document["cells"] == document(1)["cells"]
    finally:
        control.close()


async def test_mqtt_device__version_published_before_its_rollout__taken_ahead_start_applied_at_once(
    logged_broker: Broker, devices: list[Device]
) -> None:
    # Given v1 stable, and a device that the rollout of v2 (5%, salt-1) will put in its cohort
    control = ControlPlane(logged_broker)
    at_5 = FleetAssignment(1, 2, "salt-1", percent=5, rollout_id=7)
    device_id = first_device("ahead", (at_5, 2))
    try:
        control.version(1)
        control.state(state(1, 1, published=1))
        device = make_device(logged_broker.url, device_id, mqtt_prefetch_jitter_s=0.2)
        transport = transport_of(device)
        await started(devices, device)
        await until(lambda: device.policy.version == 1)

        # When v2 is published (its document retained, then a state naming it, no rollout yet)
        control.version(2)
        control.state(state(2, 1, published=2))

        # Then the device keeps running v1 and takes v2's document in the background, once
        await until(lambda: transport.documents["prefetched"] == 1)
        assert device.policy.version == 1
        assert transport.held.versions() == [1, 2]
        assert subscribed(logged_broker, device_id, 2) == 1
        assert control.of(device_id, "ack")[-1] == {"version": 1}

        # When the rollout of v2 starts at 5%, with the device in its cohort
        control.state(state(3, 1, 2, rollout=rollout(5), published=2))

        # Then it runs v2 from memory as the state arrives and acks it: no document asked for
        # (neither from the broker nor over HTTP, which is closed here)
        await until(lambda: device.policy.version == 2)
        await until(lambda: control.of(device_id, "ack")[-1] == {"version": 2})
        assert transport.documents == {"fetched": 1, "prefetched": 1, "held": 1}  # v1, v2, v2
        assert subscribed(logged_broker, device_id, 2) == 1
        assert device.policy.rollout == {"id": 7, "stage": 5}
        assert device.policy_errors == 0
    finally:
        control.close()


class FullJitter(random.Random):
    """Waits out the whole jitter every time (a prefetch is never early by chance)."""

    def uniform(self, a: float, b: float) -> float:
        return b


async def test_mqtt_device__versions_published_without_rollouts__only_the_newest_taken_stable_kept(
    logged_broker: Broker, devices: list[Device]
) -> None:
    # Given a rollout of v2 at 5% over v1, and a device outside its cohort that waits 0.5 s
    # before taking a document ahead: it runs v1 and holds v1 and v2
    control = ControlPlane(logged_broker)
    at_5 = FleetAssignment(1, 2, "salt-1", percent=5, rollout_id=7)
    device_id = first_device("many", (at_5, 1))
    try:
        for number in (1, 2):
            control.version(number)
        control.state(state(1, 1, 2, rollout=rollout(5), published=2))
        device = make_device(
            logged_broker.url, device_id, rng=FullJitter(), mqtt_prefetch_jitter_s=0.5
        )
        transport = transport_of(device)
        await started(devices, device)
        await until(lambda: device.policy.version == 1)
        await until(lambda: transport.held.versions() == [1, 2])

        # When v3 and v4 are published one right after the other, neither rolled out
        for seq, number in ((2, 3), (3, 4)):
            control.version(number)
            control.state(state(seq, 1, 2, rollout=rollout(5), published=number))

        # Then the device takes only v4: v3 was superseded while it waited
        await until(lambda: 4 in transport.held)
        assert subscribed(logged_broker, device_id, 3) == 0
        assert transport.held.versions() == [1, 2, 4]

        # When v5 is published too
        control.version(5)
        control.state(state(4, 1, 2, rollout=rollout(5), published=5))

        # Then it holds three documents at most, and v4, which the state no longer names, went
        # (not v1, the least recently used, which the rollback needs)
        await until(lambda: 5 in transport.held)
        assert transport.held.versions() == [1, 2, 5]

        # When the rollout goes to 100%, then is rolled back
        control.state(state(5, 1, 2, rollout=rollout(100), published=5))
        await until(lambda: device.policy.version == 2)
        control.state(state(6, 1, published=5))

        # Then it ran v2 and v1 again from memory, acking each, with one document of each
        # version asked for in all
        await until(lambda: device.policy.version == 1)
        await until(lambda: control.of(device_id, "ack")[-2:] == [{"version": 2}, {"version": 1}])
        assert transport.documents == {"fetched": 1, "prefetched": 3, "held": 2}
        asked = [subscribed(logged_broker, device_id, v) for v in (1, 2, 3, 4, 5)]
        assert asked == [1, 1, 0, 1, 1]
    finally:
        control.close()


# --- presence, reconnects, the persistent session ------------------------------------------------


# --- acks spread over `mqtt_ack_jitter_s` --------------------------------------------------------


class LongestWaits(random.Random):
    """A device's randomness whose waits are all the longest allowed (back-off, jitter)."""

    def uniform(self, a: float, b: float) -> float:
        return b


async def test_mqtt_device__ack_jitter__a_cohort_acks_spread_each_saying_how_long_it_waited(
    broker: Broker, control: ControlPlane, devices: list[Device]
) -> None:
    # Given versions 1 and 2 retained and 30 devices on 1 that spread their acks over 1 s
    control.version(1)
    control.version(2)
    control.state(state(1, 1))
    fleet = [make_device(broker.url, f"spread-{i:02d}", mqtt_ack_jitter_s=1.0) for i in range(30)]
    await started(devices, *fleet)
    await until(lambda: all(control.of(d.config.device_id, "ack") for d in fleet))

    # When a switch to 2 reaches them all
    control.state(state(2, 2))
    await until(lambda: all(d.policy.version == 2 for d in fleet))
    applied_by = time.monotonic()
    await until(lambda: all(len(control.of(d.config.device_id, "ack")) == 2 for d in fleet))
    acked_by = time.monotonic()

    # Then each acked 2 once, saying how long it held the ack: waits spread over the second,
    # none longer than it, and the last ack came well after every device ran 2
    acks = [control.of(d.config.device_id, "ack")[-1] for d in fleet]
    assert all(ack["version"] == 2 and set(ack) <= {"version", "waited_ms"} for ack in acks)
    waits = sorted(ack.get("waited_ms", 0) for ack in acks)
    assert waits[-1] <= 1000 + 100  # the jitter, and the loop's lateness in firing a timer
    assert waits[-1] - waits[0] >= 300, waits  # spread, not one burst
    assert len(set(waits)) >= 10, waits
    assert acked_by - applied_by >= waits[-1] / 1000 - 0.3


async def test_mqtt_device__ack_waiting__a_newer_ack_replaces_it_and_a_stop_sends_it_first(
    broker: Broker, control: ControlPlane, devices: list[Device]
) -> None:
    # Given a device whose acks wait up to 30 s, running version 1 with its ack still waiting
    control.version(1)
    control.version(2)
    control.state(state(1, 1))
    device = make_device(broker.url, "held-1", mqtt_ack_jitter_s=30.0)
    await started(devices, device)
    await until(lambda: device.policy.version == 1)

    # When a switch to 2 reaches it, and it stops gracefully before its wait ends
    control.state(state(2, 2))
    await until(lambda: device.policy.version == 2)
    assert control.of("held-1", "ack") == []
    await device.stop()

    # Then it acked only 2, once, with the time it held it, before its goodbye
    await until(lambda: control.of("held-1", "presence")[-1].get("online") is False)
    [ack] = control.of("held-1", "ack")
    assert ack["version"] == 2
    assert 0 <= ack.get("waited_ms", 0) < 30_000
    assert control.kinds("held-1")[-2:] == ["ack", "presence"]


async def test_mqtt_device__ack_wait_ends_while_away__published_after_the_next_birth(
    broker: Broker, control: ControlPlane, devices: list[Device]
) -> None:
    # Given a device that holds each ack 2 s, applying version 1, whose network then goes away
    control.version(1)
    control.state(state(1, 1))
    network = Network()
    device = make_device(
        broker.url, "late-1", network=network, rng=LongestWaits(), mqtt_ack_jitter_s=2.0
    )
    await started(devices, device)
    await until(lambda: device.policy.version == 1)
    applied = time.monotonic()
    network.online = False
    await until(lambda: device.connection_state == "offline")

    # When its ack's wait ends while it is away, and it comes back a while later
    await asyncio.sleep(max(0.0, applied + 3.0 - time.monotonic()))
    assert control.of("late-1", "ack") == []
    network.online = True

    # Then, after its new birth, it acks 1, saying it held the ack the whole time away
    await until(lambda: control.of("late-1", "ack") != [])
    back = time.monotonic()
    [ack] = control.of("late-1", "ack")
    assert ack["version"] == 1
    assert 3000 <= ack["waited_ms"] <= (back - applied) * 1000 + 100
    assert control.kinds("late-1")[-2:] == ["presence", "ack"]


async def test_mqtt_device__socket_killed__the_broker_publishes_the_will_and_the_device_comes_back(
    broker: Broker, control: ControlPlane, devices: list[Device]
) -> None:
    # Given a connected device running version 1
    control.version(1)
    control.state(state(1, 1))
    device = make_device(broker.url, "will-1")
    await started(devices, device)
    await until(lambda: device.policy.version == 1)
    await until(
        lambda: (
            control.of("will-1", "presence")
            == [{**control.of("will-1", "presence")[0], "online": True}]
        )
    )

    # When its connection dies without a DISCONNECT
    first = transport_of(device).presence_session
    sock = transport_of(device)._sock
    sock.shutdown(socket.SHUT_RDWR)

    # Then the broker publishes its last will, and the device reconnects and is born again,
    # under a newer session than the will's
    await until(lambda: {"online": False, "session": first} in control.of("will-1", "presence"))
    await until(lambda: control.of("will-1", "presence")[-1].get("online") is True)
    await until(lambda: device.reconnects >= 1 and device.connection_state == "connected")
    assert control.of("will-1", "presence")[-1]["policy_version"] == 1
    assert control.of("will-1", "presence")[-1]["session"] > first

    # When it stops gracefully
    await device.stop()

    # Then it says offline itself (retained: a late reader sees it too)
    goodbye = {"online": False, "session": transport_of(device).presence_session}
    await until(lambda: control.of("will-1", "presence")[-1] == goodbye)
    late = ControlPlane(broker)
    try:
        wait_for(lambda: late.of("will-1", "presence") == [goodbye])
    finally:
        late.close()


async def test_mqtt_device__offline_during_two_stage_changes__runs_the_last_one_at_once_when_back(
    broker: Broker, control: ControlPlane, devices: list[Device]
) -> None:
    # Given a device on stable whose network then goes away
    for number in (1, 2):
        control.version(number)
    control.state(state(1, 1, 2, rollout=rollout(0)))
    network = Network()
    device = make_device(broker.url, "away-1", network=network)
    await started(devices, device)
    await until(lambda: device.policy.version == 1)
    network.online = False
    await until(lambda: device.connection_state == "offline")
    gone = {"online": False, "session": transport_of(device).presence_session}
    await until(lambda: gone in control.of("away-1", "presence"))

    # When two stage changes happen meanwhile (the last puts it on the candidate)
    control.state(state(2, 1, 2, rollout=rollout(5, salt="s")))
    control.state(state(3, 1, 2, rollout=rollout(100, salt="s")))

    # Then, back online, it runs the candidate and acks it, without the stale state moving it
    network.online = True
    await until(lambda: device.policy.version == 2)
    await until(lambda: control.of("away-1", "ack")[-1] == {"version": 2})
    assert transport_of(device).last_seq == 3
    assert transport_of(device).session_present  # the broker kept its session meanwhile


async def test_mqtt_device__broker_restarts__the_device_reconnects_and_follows_the_new_state(
    broker: Broker, control: ControlPlane, devices: list[Device]
) -> None:
    # Given a device running version 1
    control.version(1)
    control.state(state(1, 1))
    device = make_device(broker.url, "restart-1")
    await started(devices, device)
    await until(lambda: device.policy.version == 1)

    # When the broker restarts on the same port and the control plane publishes again
    control.close()
    broker.stop()
    await until(lambda: device.connection_state == "connecting")
    restarted = subprocess.Popen(
        [MOSQUITTO, "-c", str(broker.directory / "mosquitto.conf")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    broker.process = restarted
    broker._wait_listening()
    again = ControlPlane(broker)
    try:
        again.version(1)
        again.version(2)
        again.state(state(2, 2))

        # Then the device is back, born again, and runs version 2
        await until(lambda: device.policy.version == 2)
        # (an ack the broker had not confirmed before it went may come again: QoS 1)
        await until(lambda: again.of("restart-1", "ack")[-1:] == [{"version": 2}])
        assert device.reconnects >= 1
        assert device.connection_state == "connected"
        # (this broker keeps nothing across a restart: a new session, caught up by the
        # retained state alone)
        assert not transport_of(device).session_present
    finally:
        again.close()


# --- messages the device must not trust ---------------------------------------------------------


async def test_mqtt_device__stale_bad_and_oversized_messages__ignored_the_device_keeps_its_version(
    broker: Broker, control: ControlPlane, devices: list[Device]
) -> None:
    # Given a device running version 2 from state seq 5
    control.version(2)
    control.state(state(5, 2))
    device = make_device(broker.url, "guard-1")
    await started(devices, device)
    await until(lambda: device.policy.version == 2)
    dropped = transport_of(device).dropped

    # When an older state comes (seq 4 says 1), then a state that is not JSON
    control.version(1)
    control.state(state(4, 1))
    await until(lambda: dropped["stale"] == 1)
    control.state(b"\xff not json")
    await until(lambda: dropped["malformed"] == 1)

    # When a state names version 3 whose retained document is corrupted
    control.version(3, b'{"version": 3, "fleet": "mqtt-fleet", "cells": [')
    control.state(state(6, 3))
    await until(lambda: dropped["bad_document"] >= 1)

    # When a state names version 4 whose retained document is larger than any document may be
    big = {**document(4), "padding": "x" * (5 * 1024 * 1024)}
    control.version(4, encoded(big))
    control.state(state(7, 4))
    await asyncio.sleep(1.0)

    # Then it still runs 2 and acked nothing else
    assert device.policy.version == 2
    assert control.of("guard-1", "ack") == [{"version": 2}]
    assert device.policy_errors == 0

    # When version 4's document is put right, the device takes it on its next try
    control.version(4)
    await until(lambda: device.policy.version == 4)
    await until(lambda: control.of("guard-1", "ack")[-1] == {"version": 4})


async def test_mqtt_device__protobuf_twin__taken_by_a_protobuf_device_hostile_ones_never_applied(
    broker: Broker, control: ControlPlane, devices: list[Device]
) -> None:
    # Given version 2 retained only as its protobuf twin (with fields the schema lacks around
    # it), a device configured for protobuf and one on JSON (the default)
    control.version_protobuf(2, with_unknown_fields(codec.document_to_protobuf(document(2))))
    control.state(state(1, 2))
    binary = make_device(broker.url, "pb-1", wire_format="protobuf")
    plain = make_device(broker.url, "json-1")
    await started(devices, binary, plain)
    dropped = transport_of(binary).dropped

    # Then the protobuf device runs 2 from the twin, its document canonically byte-equal to the
    # JSON one, and acks it; the JSON device, which never takes the twin, waits for JSON
    await until(lambda: binary.policy.version == 2)
    await until(lambda: control.of("pb-1", "ack") == [{"version": 2}])
    assert canonical_bytes(binary.policy.document) == canonical_bytes(document(2))
    assert plain.policy.version is None
    control.version(2)
    await until(lambda: plain.policy.version == 2)
    assert canonical_bytes(plain.policy.document) == canonical_bytes(binary.policy.document)
    tasks = [task(tokens=n) for n in (10, 400, 4000)]
    assert [(await binary.run(t)).decision for t in tasks] == [
        (await plain.run(t)).decision for t in tasks
    ]

    # When the state names version 3 while its twin is each hostile message in turn (and one
    # that is a whole document, but of version 4), the JSON document of 3 being there too
    control.version(3)
    hostile = hostile_messages(
        codec.document_to_protobuf(document(3)), oversized_bytes=5 * 1024 * 1024
    )
    hostile["another_version"] = codec.document_to_protobuf(document(4))
    for seq, (name, payload) in enumerate(hostile.items(), start=2):
        before = dropped["bad_document"]
        control.version_protobuf(3, payload)
        control.state(state(seq, 3))
        if name == "oversized":  # past the device's packet limit: the broker never sends it
            await asyncio.sleep(1.0)
        else:
            await until(lambda before=before: dropped["bad_document"] > before)

        # Then the device never applies it: it still runs 2, acked nothing else, no error
        assert binary.policy.version == 2, name
    assert control.of("pb-1", "ack") == [{"version": 2}]
    assert binary.policy_errors == 0

    # When version 3's twin is put right, the device takes it on its next try
    control.version_protobuf(3)
    await until(lambda: binary.policy.version == 3)
    await until(lambda: control.of("pb-1", "ack")[-1] == {"version": 3})
    assert canonical_bytes(binary.policy.document) == canonical_bytes(document(3))


async def test_mqtt_device__no_retained_document__fetched_from_the_immutable_http_document(
    broker: Broker, control: ControlPlane, devices: list[Device]
) -> None:
    # Given version 2 served only by the HTTP document endpoint (a CDN may answer it)
    served: list[str] = []
    body = encoded(document(2))

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            served.append(self.path)
            found = self.path == DOCUMENT_PATH.format(fleet=FLEET, version=2)
            self.send_response(200 if found else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body if found else b"{}")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        control.state(state(1, 2))
        device = make_device(
            broker.url, "http-1", base_url=f"http://127.0.0.1:{server.server_port}"
        )

        # When the device starts
        await started(devices, device)

        # Then it runs version 2 from HTTP and acks it on MQTT
        await until(lambda: device.policy.version == 2)
        await until(lambda: control.of("http-1", "ack") == [{"version": 2}])
        assert served == ["/api/v1/fleets/mqtt-fleet/documents/2"]
    finally:
        server.shutdown()


# --- cloud pressure -----------------------------------------------------------------------------


async def test_mqtt_device__cloud_pressure__applied_for_what_is_left_of_its_expiry_then_cleared(
    broker: Broker, control: ControlPlane, devices: list[Device]
) -> None:
    # Given a fleet nudge of +0.1 retained for 3 s
    control.version(1)
    control.state(state(1, 1))
    pressure_topic = topics.fleet_cloud_pressure(PREFIX, FLEET)
    control.publish(pressure_topic, encoded({"theta_offset": 0.1, "ttl_s": 3}), expiry=3)

    # When a device connects
    device = make_device(broker.url, "pressure-1")
    await started(devices, device)

    # Then it applies the offset, and it lapses with the message's expiry
    await until(lambda: device.cloud_pressure == pytest.approx(0.1))
    assert device.router.pressure_until - time.monotonic() <= 3.0
    await until(lambda: device.cloud_pressure == 0.0, timeout=5.0)

    # When a new nudge is published and then ended (an empty retained payload)
    control.publish(pressure_topic, encoded({"theta_offset": -0.2, "ttl_s": 600}), expiry=600)
    await until(lambda: device.cloud_pressure == pytest.approx(-0.2))
    control.publish(pressure_topic, b"")

    # Then the device drops it at once
    await until(lambda: device.cloud_pressure == 0.0, timeout=5.0)


# --- telemetry ----------------------------------------------------------------------------------


async def test_mqtt_device__telemetry__on_its_topic_and_out_of_the_queue_after_the_puback(
    broker: Broker, control: ControlPlane, devices: list[Device]
) -> None:
    # Given a device running version 1
    control.version(1)
    control.state(state(1, 1))
    device = make_device(broker.url, "telemetry-1")
    await started(devices, device)
    await until(lambda: device.policy.version == 1)

    # When it runs tasks
    outcomes = [await device.run(task(tokens=100 + i)) for i in range(5)]

    # Then the events go as batches on its telemetry topic, each once, and leave the queue
    ids = {outcome.event_id for outcome in outcomes}
    await until(lambda: device.telemetry.pending == 0 and device.telemetry.delivered == 5)

    def sent() -> list[str]:
        batches = control.of("telemetry-1", "telemetry")
        return sorted(event["event_id"] for batch in batches for event in batch["events"])

    # (the broker's PUBACK can reach the device before its copy reaches the control side)
    await until(lambda: len(sent()) >= len(ids))
    assert sent() == sorted(ids)
    batches = control.of("telemetry-1", "telemetry")
    assert all(event["policy_version"] == 1 for batch in batches for event in batch["events"])


async def test_mqtt_device__stop__pending_telemetry_published_before_the_goodbye(
    broker: Broker, control: ControlPlane, devices: list[Device]
) -> None:
    # Given a device that flushes rarely, with events pending
    control.version(1)
    control.state(state(1, 1))
    device = make_device(broker.url, "telemetry-3", telemetry_flush_s=600.0)
    await started(devices, device)
    await until(lambda: device.policy.version == 1)
    outcome = await device.run(task())
    assert device.telemetry.pending == 1

    # When it stops
    await device.stop()

    # Then the event went out over MQTT before its offline presence
    assert device.telemetry.pending == 0
    goodbye = {"online": False, "session": transport_of(device).presence_session}
    await until(lambda: control.of("telemetry-3", "presence")[-1:] == [goodbye])
    batches = control.of("telemetry-3", "telemetry")
    assert [event["event_id"] for event in batches[0]["events"]] == [outcome.event_id]


async def test_mqtt_device__telemetry_while_the_broker_is_down__kept_until_it_is_back(
    broker: Broker, control: ControlPlane, devices: list[Device]
) -> None:
    # Given a device running version 1, and the broker gone
    control.version(1)
    control.state(state(1, 1))
    device = make_device(broker.url, "telemetry-2")
    await started(devices, device)
    await until(lambda: device.policy.version == 1)
    control.close()
    broker.stop()
    await until(lambda: device.connection_state == "connecting")

    # When it runs tasks meanwhile
    for i in range(3):
        await device.run(task(tokens=10 + i))
    await asyncio.sleep(0.5)

    # Then nothing is lost: the events wait in the queue
    assert device.telemetry.pending == 3
    assert device.telemetry.delivered == 0

    # When the broker is back, they are delivered
    broker.process = subprocess.Popen(
        [MOSQUITTO, "-c", str(broker.directory / "mosquitto.conf")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    broker._wait_listening()
    again = ControlPlane(broker)
    try:
        await until(lambda: device.telemetry.pending == 0)
        await until(lambda: len(again.of("telemetry-2", "telemetry")) >= 1)
        assert device.telemetry.delivered == 3
    finally:
        again.close()


# --- over WebSockets ----------------------------------------------------------------------------


async def test_mqtt_device__over_websockets__same_session_through_a_websocket_listener(
    broker: Broker, control: ControlPlane, devices: list[Device]
) -> None:
    # Given Debian's Mosquitto, which has no WebSocket listener, behind a WebSocket-to-TCP
    # bridge on loopback (as EMQX or HiveMQ serve MQTT on 443, at the path /mqtt)
    paths: list[str] = []

    async def bridge(ws: ServerConnection) -> None:
        paths.append(ws.request.path if ws.request is not None else "")
        reader, writer = await asyncio.open_connection(broker.host, broker.port)

        async def upstream() -> None:
            async for frame in ws:
                writer.write(frame if isinstance(frame, bytes) else frame.encode())
                await writer.drain()
            writer.close()

        async def downstream() -> None:
            while chunk := await reader.read(65536):
                await ws.send(chunk)
            await ws.close()

        await asyncio.gather(upstream(), downstream(), return_exceptions=True)

    control.version(1)
    control.state(state(1, 1))
    async with serve(bridge, "127.0.0.1", 0, subprotocols=["mqtt"]) as server:
        port = server.sockets[0].getsockname()[1]
        device = make_device(f"ws://127.0.0.1:{port}/mqtt", "ws-1")

        # When the device connects over WebSockets
        await started(devices, device)

        # Then it runs its version, acks it and publishes telemetry as over TCP
        await until(lambda: device.policy.version == 1)
        await until(lambda: control.of("ws-1", "ack") == [{"version": 1}])
        await device.run(task())
        await until(lambda: device.telemetry.delivered == 1)
        assert paths[0] == "/mqtt"
        await device.stop()
        devices.remove(device)


# --- credentials and identity -------------------------------------------------------------------


class PolicyEndpoint:
    """`GET /api/v1/devices/me/policy` answering one status (the token check a refused MQTT
    login leads to)."""

    def __init__(self, status: int) -> None:
        self.requests: list[str] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                endpoint.requests.append(self.path)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"detail": "x"}')

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def close(self) -> None:
        self.server.shutdown()


@pytest.mark.parametrize(("status", "outcome"), [(401, "revoked"), (404, "polling")])
async def test_mqtt_device__broker_refuses_the_credentials__the_http_api_says_whether_revoked(
    tmp_path: Path, devices: list[Device], status: int, outcome: str
) -> None:
    # Given a broker with access control that does not know this device
    secured = Broker.start(tmp_path / "secured", dynsec_admin=("admin", "admin-password"))
    endpoint = PolicyEndpoint(status)
    try:
        device = make_device(secured.url, "unknown-1", base_url=endpoint.url)

        # When it connects
        await started(devices, device)

        # Then it asks the HTTP API with its token: 401 revokes it, else it polls and retries
        await until(lambda: device.connection_state == outcome)
        assert endpoint.requests == ["/api/v1/devices/me/policy"]
        if outcome == "polling":
            assert "refused the credentials" in (device.last_error or "")
    finally:
        endpoint.close()
        secured.stop()
