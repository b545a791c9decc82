"""Policy deltas end to end (docs/PROTOCOL.md, "Policy deltas"): SDK devices and raw sockets
against a real control plane (uvicorn + PostgreSQL + Redis), on the socket and polling paths.

The server keeps deltas between versions at most 2 apart (`POLICY_DELTA_WINDOW=2`), so a device
further behind shows the whole-document fallback. (The MQTT path: test_mqtt_sdk_live.py.)
"""

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.db import connection
from websockets.asyncio.client import connect
from websockets.typing import Subprotocol

from edge_sdk import Device
from edge_sdk.delta import apply_delta, canonical_bytes
from edge_sdk.wire import PROTOBUF_SUBPROTOCOL, codec
from edge_sdk.wire import edge_routing_pb2 as pb
from routing_policies.models import Device as DeviceRow
from routing_policies.services import fleet_switch_version
from tests.live_server import require_postgres_and_redis

from .tcp_proxy import TcpProxy
from .test_device_push import AsgiProcess
from .test_sdk_client import devices  # noqa: F401  # the fixture
from .ws_clients import BackgroundLoop, enroll, open_socket, recv_json, wait_until

pytestmark = pytest.mark.integration

WAIT_S = 45.0


@pytest.fixture(scope="module")
def server(django_db_setup: None, django_db_blocker: Any) -> Iterator[AsgiProcess]:
    require_postgres_and_redis("the SDK's delta tests")
    process = AsgiProcess(dict(connection.settings_dict), extra_env={"POLICY_DELTA_WINDOW": "2"})
    try:
        process.start()
        yield process
    finally:
        process.stop()


def _server_document(server: AsgiProcess, fleet: Any, number: int) -> dict[str, Any]:
    response = httpx.get(f"{server.url}/api/v1/fleets/{fleet.slug}/documents/{number}")
    assert response.status_code == 200
    document = response.json()
    assert isinstance(document, dict)
    return document


def _on_version(device: Device, number: int) -> None:
    wait_until(lambda: device.policy.version == number, timeout=WAIT_S, what=f"v{number}")


def _holds_the_servers(device: Device, server: AsgiProcess, fleet: Any, number: int) -> None:
    """The device runs version `number`, byte-equal (after canonical encoding) to the server's."""
    _on_version(device, number)
    assert canonical_bytes(device.policy.document) == canonical_bytes(
        _server_document(server, fleet, number)
    )


@pytest.fixture
def v2(fleet: Any, publish_version: Callable[..., Any], publisher: Any) -> Any:
    """v2 (one cell's θ changed) published and assigned to the whole fleet."""
    version = publish_version(fleet, threshold=0.95)
    fleet_switch_version(actor=publisher, fleet=fleet, version=2)
    return version


def _ran_v1_and_stopped(background: BackgroundLoop, device: Device) -> None:
    """The device (with a state_dir) applies v1, then stops: v1 is stored for its next start."""
    _on_version(device, 1)
    background.run(device.stop())


# A device on JSON frames and one on protobuf frames (`policy_delta` as a PolicyDelta) end alike.
@pytest.mark.parametrize("wire_format", ["json", "auto"])
def test_sdk_delta__switch_to_v2__pushed_as_a_delta_applied_byte_equal_and_acked(
    wire_format: str,
    transactional_db: None,
    server: AsgiProcess,
    devices: Callable[..., Device],  # noqa: F811
    fleet: Any,
    fleet_key: str,
    publish_version: Callable[..., Any],
    publisher: Any,
) -> None:
    # Given a connected device on v1, and v2 published with one cell changed
    device = devices(server.url, fleet_key, "delta-push-1", wire_format=wire_format)
    _on_version(device, 1)
    publish_version(fleet, threshold=0.95)

    # When the fleet switches to v2
    fleet_switch_version(actor=publisher, fleet=fleet, version=2)

    # Then the device gets v2 as a delta, holds v2 byte-equal (after canonical encoding) to the
    # server's document, and acks it
    _holds_the_servers(device, server, fleet, 2)
    assert (device.deltas_applied, device.deltas_refused) == (1, 0)
    wait_until(
        lambda: DeviceRow.objects.get(device_id="delta-push-1").acked_version == 2,
        timeout=WAIT_S,
        what="the ack of v2",
    )

    # And a chain: v3 then back to v1 (a rollback), each a delta from the version it holds
    publish_version(fleet, threshold=0.4)
    fleet_switch_version(actor=publisher, fleet=fleet, version=3)
    _on_version(device, 3)
    fleet_switch_version(actor=publisher, fleet=fleet, version=1)
    _holds_the_servers(device, server, fleet, 1)
    assert device.deltas_applied == 3


def test_sdk_delta__stored_base_corrupted__hash_mismatch_then_the_whole_document(
    transactional_db: None,
    server: AsgiProcess,
    background: BackgroundLoop,
    devices: Callable[..., Device],  # noqa: F811
    fleet: Any,
    fleet_key: str,
    publish_version: Callable[..., Any],
    publisher: Any,
    tmp_path: Path,
) -> None:
    # Given a device that ran v1 and stopped, whose stored v1 was altered on disk (one cell's
    # θ changed: still a usable document, but not the server's v1)
    _ran_v1_and_stopped(
        background, devices(server.url, fleet_key, "delta-corrupt-1", state_dir=tmp_path)
    )
    stored = json.loads((tmp_path / "policy.json").read_text())
    stored["document"]["cells"][3]["threshold"] = 0.123
    (tmp_path / "policy.json").write_text(json.dumps(stored))
    publish_version(fleet, threshold=0.95)
    fleet_switch_version(actor=publisher, fleet=fleet, version=2)

    # When it starts again (its hello names v1 and offers deltas)
    again = devices(server.url, fleet_key, "delta-corrupt-1", state_dir=tmp_path)

    # Then the delta it gets does not hash right: it is refused, the device asks again without
    # deltas and runs the server's v2, whole
    _holds_the_servers(again, server, fleet, 2)
    assert (again.deltas_applied, again.deltas_refused) == (0, 1)


def test_sdk_delta__base_beyond_the_servers_window__the_whole_document(
    transactional_db: None,
    server: AsgiProcess,
    background: BackgroundLoop,
    devices: Callable[..., Device],  # noqa: F811
    fleet: Any,
    fleet_key: str,
    publish_version: Callable[..., Any],
    publisher: Any,
    tmp_path: Path,
) -> None:
    # Given a device that ran v1 and stopped, and v2, v3, v4 published since (the server keeps
    # deltas between versions at most 2 apart)
    _ran_v1_and_stopped(
        background, devices(server.url, fleet_key, "delta-old-1", state_dir=tmp_path)
    )
    for threshold in (0.7, 0.8, 0.9):
        publish_version(fleet, threshold=threshold)
    fleet_switch_version(actor=publisher, fleet=fleet, version=4)

    # When it starts again on v1
    again = devices(server.url, fleet_key, "delta-old-1", state_dir=tmp_path)

    # Then it gets v4 whole (no delta offered, none refused)
    _holds_the_servers(again, server, fleet, 4)
    assert (again.deltas_applied, again.deltas_refused) == (0, 0)


def test_sdk_delta__polling__226_applied(
    transactional_db: None,
    server: AsgiProcess,
    background: BackgroundLoop,
    devices: Callable[..., Device],  # noqa: F811
    fleet: Any,
    fleet_key: str,
    publish_version: Callable[..., Any],
    publisher: Any,
) -> None:
    # Given a device that can only poll (its network refuses WebSocket upgrades), on v1
    proxy = TcpProxy(server.port)
    background.run(proxy.start())
    try:
        proxy.mode = "refuse_upgrade"
        device = devices(proxy.url, fleet_key, "delta-poll-1")
        wait_until(
            lambda: device.connection_state == "polling" and device.policy.version == 1,
            timeout=WAIT_S,
            what="v1 by polling",
        )

        # When the fleet switches to v2
        publish_version(fleet, threshold=0.95)
        fleet_switch_version(actor=publisher, fleet=fleet, version=2)

        # Then the next poll brings it as a delta (226), applied byte-equal
        _holds_the_servers(device, server, fleet, 2)
        assert device.deltas_applied == 1
        assert device.policy.etag == fleet.versions.get(number=2).etag
    finally:
        background.run(proxy.close())


def test_socket_delta__hello_by_hand__delta_frame_whole_document_or_error(
    transactional_db: None, server: AsgiProcess, background: BackgroundLoop, fleet_key: str, v2: Any
) -> None:
    # Given v2 assigned to the fleet (`v2`)

    async def speak() -> list[dict[str, Any]]:
        async with httpx.AsyncClient(trust_env=False) as http:
            token = await enroll(http, server.url, fleet_key=fleet_key, device_id="delta-raw-1")
        socket = await open_socket(server.url, token)
        frames = []
        hello = {"type": "hello", "device_id": "delta-raw-1", "sdk": "raw"}
        for extra in (
            {"policy_version": 1, "delta": True},  # holds v1, takes deltas
            {"policy_version": 1},  # does not say: the whole document
            {"policy_version": 99, "delta": True},  # a version the fleet never had
            {"policy_version": 1, "delta": "yes"},  # not a boolean
            {"policy_version": 1, "delta": None},
        ):
            await socket.send(json.dumps({**hello, **extra}))
            frames.append(await recv_json(socket))
        await socket.close()
        return frames

    delta, whole, unknown_base, bad, null = background.run(speak())

    # Then: a delta from v1 with v2's hash; whole documents; errors naming `delta`
    assert delta["type"] == "policy_delta"
    assert (delta["base"], delta["version"], delta["rollout"]) == (1, 2, None)
    assert delta["hash"].startswith("sha256:")
    assert whole["type"] == "policy"
    assert whole["version"] == 2
    assert unknown_base["type"] == "policy"
    assert unknown_base["version"] == 2
    for error in (bad, null):
        assert (error["type"], error["code"], error["field"]) == ("error", "bad_message", "delta")


def test_protobuf_socket_delta__hello_by_hand__policy_delta_message_then_hostile_frames(
    transactional_db: None,
    server: AsgiProcess,
    background: BackgroundLoop,
    fleet: Any,
    fleet_key: str,
    v2: Any,
) -> None:
    # Given v2 assigned to the fleet (`v2`), and a socket opened with the protobuf subprotocol
    hello = {"type": "hello", "device_id": "delta-pb-raw", "sdk": "raw", "policy_version": 1}

    async def speak() -> list[Any]:
        async with httpx.AsyncClient(trust_env=False) as http:
            token = await enroll(http, server.url, fleet_key=fleet_key, device_id="delta-pb-raw")
        socket = await connect(
            server.url.replace("http", "ws", 1) + "/ws/device/",
            additional_headers={"Authorization": f"Bearer {token}"},
            subprotocols=[Subprotocol(PROTOBUF_SUBPROTOCOL)],
            proxy=None,
            compression=None,
        )
        got = []
        # (a hello that holds v1 and takes deltas; then a device sending the server a delta
        # frame of its own, and one whose delta is not protobuf)
        for raw in (
            codec.frame_to_protobuf({**hello, "delta": True}),
            codec.frame_to_protobuf({"type": "policy_delta", **_some_delta(), "rollout": None}),
            b"\x3a\x04\x0a\x02\xff\xff",
        ):
            await socket.send(raw)
            got.append(await asyncio.wait_for(socket.recv(), timeout=WAIT_S))
        await socket.close()
        return got

    delta_raw, own_delta, garbage = background.run(speak())

    # Then the answer is the Frame kind policy_delta, which applied to v1 gives v2
    message = pb.Frame()
    message.ParseFromString(delta_raw)
    assert message.WhichOneof("kind") == "policy_delta"
    frame = codec.frame_from_protobuf(delta_raw)
    assert isinstance(frame, dict)
    assert (frame["type"], frame["base"], frame["version"], frame["rollout"]) == (
        "policy_delta",
        1,
        2,
        None,
    )
    delta = {k: v for k, v in frame.items() if k not in ("type", "rollout")}
    v1, v2 = (_server_document(server, fleet, n) for n in (1, 2))
    assert canonical_bytes(apply_delta(v1, delta)) == canonical_bytes(v2)
    # And a delta frame from a device is not a message it may send; bytes that are not a
    # Frame are a bad_message; the socket stays open for both
    assert codec.frame_from_protobuf(own_delta)["code"] == "unknown_type"  # type: ignore[index]
    assert codec.frame_from_protobuf(garbage)["code"] == "bad_message"  # type: ignore[index]


def _some_delta() -> dict[str, Any]:
    return {"fleet": "f", "base": 1, "version": 2, "hash": "sha256:00", "patch": {}}
