"""The MQTT transport's parts that need no broker: choosing it, its settings, the fleet's
rollout state as a device reads it, and how a device learns its fleet's slug. Sessions against
a real Mosquitto: tests/integration/test_mqtt_device.py."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import httpx
import pytest

from edge_sdk import Device, DeviceConfig, PolicyStore, Router
from edge_sdk.assignment import FleetAssignment
from edge_sdk.connection import Connection
from edge_sdk.listeners import Listeners
from edge_sdk.policy_sync import PolicySync
from edge_sdk.transport import CarriesTelemetry, transport_named
from edge_sdk.transport.mqtt import (
    MAX_STATE_BYTES,
    FleetState,
    HeldDocuments,
    MqttTransport,
    parse_state,
)
from edge_sdk.transport.websocket import WebSocketTransport

from .sdk_helpers import Inference, policy_document, readings


def _config(**overrides: Any) -> DeviceConfig:
    values: dict[str, Any] = {
        "base_url": "http://127.0.0.1:9",
        "fleet_key": "fk",
        "device_id": "phone-1",
        "platform": "android",
        "model": "pixel",
        "mqtt_url": "mqtt://127.0.0.1:1883",
        **overrides,
    }
    return DeviceConfig(**values)


def _state(**fields: Any) -> bytes:
    message = {
        "seq": 3,
        "fleet": "voice",
        "stable": 1,
        "candidate": 2,
        "rollout": {"id": 9, "stage": 25, "salt": "s", "holdback": 0},
        **fields,
    }
    return json.dumps(message).encode()


# --- choosing the transport ---------------------------------------------------------------------


def test_device__transport_mqtt__sessions_over_the_mqtt_transport_which_carries_telemetry() -> None:
    # Given / When a device that names the MQTT transport
    inference = Inference()
    device = Device(
        _config(),
        readings=readings,
        device_infer=inference.on_device,
        cloud_infer=inference.on_cloud,
        transport="mqtt",
    )

    # Then its sessions go over MQTT, which carries its telemetry too (the socket does not)
    transport = device._connection.transport
    assert isinstance(transport, MqttTransport)
    assert isinstance(transport, CarriesTelemetry)
    assert not isinstance(WebSocketTransport(_config()), CarriesTelemetry)


def test_transport_mqtt__no_broker_url__refused_at_construction() -> None:
    with pytest.raises(ValueError, match=r"needs DeviceConfig\.mqtt_url"):
        transport_named("mqtt", _config(mqtt_url=""))


@pytest.mark.parametrize("url", ["http://broker:1883", "tcp://broker", "broker:1883"])
def test_config__mqtt_url_of_another_scheme__refused(url: str) -> None:
    with pytest.raises(ValueError, match="mqtt_url must start with mqtt://"):
        _config(mqtt_url=url)


@pytest.mark.parametrize("fleet", ["a/b", "fleet+", "#", "", "x" * 65])
def test_config__fleet_that_is_not_a_slug__refused(fleet: str) -> None:
    # A slug never holds a topic's separators or wildcards
    with pytest.raises(ValueError, match="fleet must be a fleet slug"):
        _config(fleet=fleet)


@pytest.mark.parametrize(
    ("url", "where"),
    [
        ("mqtt://broker.example", ("broker.example", 1883, False, False, "/mqtt")),
        ("mqtts://broker.example", ("broker.example", 8883, False, True, "/mqtt")),
        ("ws://10.0.0.1:8080/ws", ("10.0.0.1", 8080, True, False, "/ws")),
        ("wss://iot.example", ("iot.example", 443, True, True, "/mqtt")),
    ],
)
def test_transport_mqtt__urls__host_port_websockets_tls_and_path(
    url: str, where: tuple[Any, ...]
) -> None:
    transport = MqttTransport(_config(mqtt_url=url))
    assert (
        transport._host,
        transport._port,
        transport._websockets,
        transport._tls,
        transport._ws_path,
    ) == where


# --- the fleet's state --------------------------------------------------------------------------


def test_parse_state__a_rollout__the_assignment_the_server_computes() -> None:
    # Given / When the retained state of a rollout at 25% with a holdback
    parsed = parse_state(
        _state(rollout={"id": 9, "stage": 25, "salt": "s", "holdback": 10}), "voice"
    )

    # Then the device holds the server's own assignment, and the rollout a policy frame names
    assert parsed == FleetState(
        seq=3,
        assignment=FleetAssignment(1, 2, "s", percent=25, rollout_id=9, holdback=10),
        rollout={"id": 9, "stage": 25, "holdback": 10},
    )


def test_parse_state__no_rollout__everyone_on_stable() -> None:
    parsed = parse_state(_state(candidate=None, rollout=None), "voice")
    assert isinstance(parsed, FleetState)
    assert parsed.rollout is None
    assert {parsed.assignment.version_for(f"d{i}") for i in range(50)} == {1}


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"\xff\xfe", "malformed"),
        (b"[1, 2]", "malformed"),
        (_state(seq=None), "malformed"),
        (_state(seq=True), "malformed"),
        (_state(seq=-1), "malformed"),
        (_state(stable="1"), "malformed"),
        (_state(stable=0), "malformed"),
        (_state(rollout=[]), "malformed"),
        (_state(rollout={"id": 9, "stage": 101, "salt": "s"}), "malformed"),
        (_state(rollout={"id": 9, "stage": 5}), "malformed"),
        (_state(rollout={"id": 9, "stage": 5, "salt": "s", "holdback": -1}), "malformed"),
        (_state(fleet="another-fleet"), "wrong_fleet"),
        (b" " * (MAX_STATE_BYTES + 1), "oversized"),
    ],
)
def test_parse_state__bad_message__dropped_with_its_reason(payload: bytes, reason: str) -> None:
    assert parse_state(payload, "voice") == reason


def test_parse_state__newest_published_version__named_with_stable_and_candidate() -> None:
    # Given / When a state outside any rollout that names v3 as the newest published version
    parsed = parse_state(_state(seq=4, candidate=None, rollout=None, published=3), "voice")

    # Then everyone stays on stable, and the versions a device holds ahead are 1 and 3
    assert isinstance(parsed, FleetState)
    assert parsed.published == 3
    assert {parsed.assignment.version_for(f"d{i}") for i in range(50)} == {1}
    assert parsed.named() == {1, 3}


@pytest.mark.parametrize("published", ["3", 0, -1, True, 2**31, 2.5, [3], {"n": 3}])
def test_parse_state__published_not_a_version__ignored_the_state_still_applies(
    published: Any,
) -> None:
    # An advisory field: a bad one never stops a device from following its rollout
    parsed = parse_state(_state(seq=5, published=published), "voice")
    assert isinstance(parsed, FleetState)
    assert parsed.published is None
    assert parsed.assignment == FleetAssignment(1, 2, "s", percent=25, rollout_id=9)
    assert parsed.named() == {1, 2}


def test_parse_state__no_published_field__as_a_control_plane_before_it_sends() -> None:
    parsed = parse_state(_state(seq=6), "voice")
    assert isinstance(parsed, FleetState)
    assert parsed.published is None


def test_bucket_rule__many_devices__candidate_iff_in_its_bucket() -> None:
    # The device's computation is the server's: bucket < stage * 100 takes the candidate
    from edge_sdk.assignment import bucket

    parsed = parse_state(_state(rollout={"id": 9, "stage": 37, "salt": "salt-x"}), "voice")
    assert isinstance(parsed, FleetState)
    for i in range(2000):
        device_id = f"device-{i}"
        in_bucket = bucket("salt-x", device_id) < 37 * 100
        assert parsed.assignment.version_for(device_id) == (2 if in_bucket else 1)


# --- the fleet's slug ---------------------------------------------------------------------------


def _connection(config: DeviceConfig, http: httpx.AsyncClient | None = None) -> Connection:
    store = PolicyStore(config.state_dir)
    return Connection(
        config,
        transport=MqttTransport(config),
        readings=readings,
        policy=PolicySync(
            store, device_id=config.device_id, persist=False, on_applied=lambda: None
        ),
        router=Router(store, readings=readings),
        listeners=Listeners(),
        rng=random.Random(1),
        http=http,
    )


async def test_connection__enrolment_names_the_fleet__kept_with_the_token_for_the_next_run(
    tmp_path: Path,
) -> None:
    # Given a server whose enrolment answer names the fleet (routing_policies.devices.apis)
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/api/v1/devices/enroll"
        answer = {"device_token": "dt_1", "device_id": "phone-1", "fleet": "voice"}
        return httpx.Response(201, json=answer)

    config = _config(state_dir=tmp_path)
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        connection = _connection(config, http)

        # When the device enrols
        await connection._enrol()

    # Then it knows its fleet, and so does the next run from its state_dir
    assert connection.fleet() == "voice"
    again = _connection(config)
    again.load_credentials()
    assert (again.token, again.fleet()) == ("dt_1", "voice")


def test_connection__fleet__configured_first_else_the_stored_policy_names_it() -> None:
    # Given a device that was enrolled before enrolment answers named the fleet
    connection = _connection(_config())
    assert connection.fleet() is None
    connection._policy.store.apply({**policy_document(2), "fleet": "from-policy"}, save=False)

    # Then its stored policy names it, and a configured slug wins over both
    assert connection.fleet() == "from-policy"
    assert _connection(_config(fleet="configured")).fleet() == "configured"


# --- the simulator ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("transport", "on_mqtt"), [("websocket", 0), ("mqtt", 40), ("mixed", None)]
)
def test_simulated_fleet__transport__devices_on_the_socket_mqtt_or_both(
    transport: str, on_mqtt: int | None
) -> None:
    from edge_sdk.simulate.fleet import FleetConfig, SimulatedFleet

    # Given / When a simulated fleet of 40 devices created with this transport (not started)
    fleet = SimulatedFleet(
        FleetConfig(
            base_url="http://127.0.0.1:9",
            fleet_key="fk_x",
            devices=40,
            transport=transport,
            mqtt_url="mqtt://127.0.0.1:1883",
            mqtt_share=0.5,
        )
    )
    fleet.create_devices()

    # Then each device's push channel is the one it was given: all, none, or some on MQTT
    kinds = [type(sim.device._connection.transport) for sim in fleet.devices.values()]
    mqtt_devices = kinds.count(MqttTransport)
    assert kinds.count(WebSocketTransport) + mqtt_devices == 40
    if on_mqtt is None:
        assert 10 <= mqtt_devices <= 30
    else:
        assert mqtt_devices == on_mqtt


# --- the documents a device holds ----------------------------------------------------------------


def _document_bytes(version: int, fleet: str = "voice") -> bytes:
    return json.dumps(
        {**policy_document(version), "fleet": fleet, "etag": f'"v{version}-x"'}
    ).encode()


def test_held_documents__bounded__the_least_recently_used_goes_first() -> None:
    # Given room for two documents
    held = HeldDocuments(2)

    # When three are held, the first used again before the third comes
    assert held.hold(_document_bytes(1), "voice", 1)
    assert held.hold(_document_bytes(2), "voice", 2)
    assert held.payload("voice", 1) == _document_bytes(1)
    assert held.hold(_document_bytes(3), "voice", 3)

    # Then the one least recently used is gone
    assert held.versions() == [1, 3]


def test_held_documents__full__a_version_the_state_no_longer_names_goes_before_the_stable() -> None:
    # Given room for three, in a rollout of 2 over stable 1: 1 (left), 2 (run), then 3 published
    held = HeldDocuments(3)
    for version in (1, 2, 3):
        assert held.hold(_document_bytes(version), "voice", version, frozenset({1, 2, version}))

    # When 4 is published before 3 was rolled out, and taken ahead
    assert held.hold(_document_bytes(4), "voice", 4, frozenset({1, 2, 4}))

    # Then 3, which the state no longer names, goes: not stable 1, the least recently used,
    # which a rollback needs
    assert held.versions() == [1, 2, 4]


def test_held_documents__full_of_named_versions__the_least_recently_used_goes() -> None:
    held = HeldDocuments(2)
    assert held.hold(_document_bytes(1), "voice", 1, frozenset({1, 2, 3}))
    assert held.hold(_document_bytes(2), "voice", 2, frozenset({1, 2, 3}))
    assert held.hold(_document_bytes(3), "voice", 3, frozenset({1, 2, 3}))
    assert held.versions() == [2, 3]


@pytest.mark.parametrize(
    ("payload", "version", "fleet"),
    [
        (b'{"version": 2, "cells": [', 2, "voice"),  # truncated
        (_document_bytes(3), 2, "voice"),  # another version
        (_document_bytes(2, fleet="other"), 2, "voice"),  # another fleet
        (json.dumps({**policy_document(2), "cells": "x"}).encode(), 2, "voice"),  # not cells
        (_document_bytes(2) + b" " * (4 * 1024 * 1024), 2, "voice"),  # over the size bound
    ],
)
def test_held_documents__unusable_document__not_held(
    payload: bytes, version: int, fleet: str
) -> None:
    held = HeldDocuments(3)
    assert not held.hold(payload, fleet, version)
    assert version not in held


def test_held_documents__held_copy_corrupted__never_given_and_forgotten() -> None:
    # Given a document held
    held = HeldDocuments(3)
    assert held.hold(_document_bytes(2), "voice", 2)

    # When its bytes change in memory (still a usable document of version 2)
    entry = held._entries[2]
    tampered = entry.payload.replace(b"0.", b"1.", 1)
    assert tampered != entry.payload
    held._entries[2] = type(entry)(entry.etag, tampered, entry.digest)

    # Then it is not given out, and forgotten
    assert held.payload("voice", 2) is None
    assert 2 not in held
