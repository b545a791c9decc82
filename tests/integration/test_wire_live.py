"""Protobuf and compression on a real control plane (uvicorn + PostgreSQL + Redis, a real
Mosquitto and `manage.py mqtt_link`): each negotiated path lands exactly like JSON, and hostile
binary input gets its clear refusal, never a crash (docs/PROTOCOL.md, "Binary frames and
compression")."""

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from websockets.asyncio.client import ClientConnection, connect
from websockets.typing import Subprotocol

from edge_sdk import Device, DeviceConfig
from edge_sdk.wire import PROTOBUF_MEDIA_TYPE, PROTOBUF_SUBPROTOCOL, codec, compression
from routing_policies.models import Device as DeviceRow
from routing_policies.services import device_enroll, rollout_advance, rollout_start
from telemetry.ingest.services import landed_batches_process
from telemetry.models import Event, EventKey, LandedBatch
from tests.factories import make_event, make_events
from tests.hostile_protobuf import hostile_messages, with_unknown_fields
from tests.live_server import asgi_server, free_port, require_postgres_and_redis
from tests.mqtt_broker import Broker, mosquitto  # noqa: F401  # the fixture
from tests.unit.edge_sdk.sdk_helpers import Inference, readings

from .test_mqtt_link import Links, RawDevice, links  # noqa: F401  # the fixture
from .test_sdk_client import _task
from .ws_clients import BackgroundLoop, wait_until, ws_url

__all__ = ["asgi_server"]

pytestmark = pytest.mark.integration

WAIT_S = 45.0
_ROWS = ("event_id", "ts", "route", "decided_by", "score", "tokens", "latency_ms", "ok")


@pytest.fixture
def phone(transactional_db: None, fleet: Any, fleet_key: str) -> tuple[str, str]:
    require_postgres_and_redis("the binary wire's live tests")
    _, token = device_enroll(fleet_key=fleet_key, device_id="phone-1", platform="android")
    return "phone-1", token


def _stored(device_id: str) -> list[tuple[str, ...]]:
    while landed_batches_process().batches:
        pass
    rows = Event.objects.filter(device_id=device_id).values_list(*_ROWS)
    return sorted(tuple(str(value) for value in row) for row in rows)


def _post(asgi_server: str, token: str, body: bytes, **headers: str) -> httpx.Response:
    return httpx.post(
        f"{asgi_server}/api/v1/telemetry",
        content=body,
        headers={"Authorization": f"Bearer {token}", **headers},
        timeout=30,
        trust_env=False,
    )


# --- telemetry over HTTP --------------------------------------------------------------------------


def test_wire_live__protobuf_and_gzip_batches__land_exactly_like_json(
    asgi_server: str, phone: tuple[str, str]
) -> None:
    # Given the same events sent three ways: JSON, protobuf, and gzip-compressed protobuf
    token = phone[1]
    events = make_events(9)
    as_json = json.dumps({"events": events[:3]}).encode()
    as_protobuf = codec.batch_to_protobuf({"events": events[3:6]})
    as_gzip = compression.compress(codec.batch_to_protobuf({"events": events[6:]}), "gzip")

    # When each is posted to the live server (its ASGI fast path)
    answers = [
        _post(asgi_server, token, as_json, **{"Content-Type": "application/json"}),
        _post(asgi_server, token, as_protobuf, **{"Content-Type": PROTOBUF_MEDIA_TYPE}),
        _post(
            asgi_server,
            token,
            as_gzip,
            **{"Content-Type": PROTOBUF_MEDIA_TYPE, "Content-Encoding": "gzip"},
        ),
    ]

    # Then each is a 202 of 3 events, and the nine events are stored as the JSON ones would be
    assert [(a.status_code, a.json()) for a in answers] == [
        (202, {"accepted": 3, "duplicates": 0})
    ] * 3
    assert PROTOBUF_MEDIA_TYPE in answers[0].headers["Accept-Post"]
    stored = _stored("phone-1")
    assert [row[0] for row in stored] == sorted(e["event_id"] for e in events)
    by_id = {row[0]: row for row in stored}
    for event in events:
        row = by_id[event["event_id"]]
        assert (row[2], row[3], float(row[4]), int(row[5])) == (
            event["route"],
            event["decided_by"],
            event["score"],
            event["tokens"],
        )


@pytest.mark.parametrize("coding", compression.CODINGS)
def test_wire_live__decompression_bomb__413_nothing_stored(
    asgi_server: str, phone: tuple[str, str], coding: str
) -> None:
    # Given a small body that inflates to 256 MiB
    bomb = compression.compress(b"\x0a" * (256 * 1024 * 1024), coding)

    # When it is posted
    answer = _post(
        asgi_server,
        phone[1],
        bomb,
        **{"Content-Type": PROTOBUF_MEDIA_TYPE, "Content-Encoding": coding},
    )

    # Then 413, nothing stored, the refusal on /metrics, and the server still answers
    assert answer.status_code == 413, answer.text
    assert not LandedBatch.objects.exists()
    assert not EventKey.objects.exists()
    metrics = httpx.get(f"{asgi_server}/metrics", timeout=30, trust_env=False).text
    assert 'controlplane_wire_refused_total{channel="http",reason="too_large"}' in metrics
    good = _post(asgi_server, phone[1], json.dumps({"events": make_events(1)}).encode())
    assert good.status_code == 202


# --- documents ------------------------------------------------------------------------------------


def test_wire_live__document_in_protobuf_and_compressed__the_same_document(
    asgi_server: str, phone: tuple[str, str], fleet: Any
) -> None:
    # Given the device's policy in JSON, as always
    auth = {"Authorization": f"Bearer {phone[1]}"}
    url = f"{asgi_server}/api/v1/devices/me/policy"
    plain = httpx.get(url, headers={**auth, "Accept-Encoding": "identity"}, trust_env=False)
    assert plain.headers["Content-Type"] == "application/json"

    # When it is asked in protobuf, zstd-compressed (and, immutable, gzip-compressed)
    binary = httpx.get(
        url,
        headers={**auth, "Accept": PROTOBUF_MEDIA_TYPE, "Accept-Encoding": "zstd"},
        trust_env=False,
    )
    immutable = httpx.get(
        f"{asgi_server}/api/v1/fleets/{fleet.slug}/documents/1",
        headers={"Accept": PROTOBUF_MEDIA_TYPE, "Accept-Encoding": "gzip"},
        trust_env=False,
    )

    # Then both decode to the JSON document, say how they are encoded, and vary by it
    for answer in (binary, immutable):
        assert answer.status_code == 200
        assert answer.headers["Content-Type"] == PROTOBUF_MEDIA_TYPE
        assert "Accept" in answer.headers["Vary"]
        assert codec.document_from_protobuf(answer.content) == plain.json()
        assert answer.headers["ETag"] == f"W/{plain.headers['ETag']}"
    assert binary.headers["Content-Encoding"] == "zstd"
    assert immutable.headers["Content-Encoding"] == "gzip"
    # and the weak tag answers 304 on the next poll
    again = httpx.get(
        url,
        headers={**auth, "Accept": PROTOBUF_MEDIA_TYPE, "If-None-Match": binary.headers["ETag"]},
        trust_env=False,
    )
    assert again.status_code == 304


# --- the device socket ----------------------------------------------------------------------------


async def _protobuf_socket(asgi_server: str, token: str) -> ClientConnection:
    return await connect(
        ws_url(asgi_server),
        additional_headers={"Authorization": f"Bearer {token}"},
        subprotocols=[Subprotocol(PROTOBUF_SUBPROTOCOL)],
        proxy=None,
        compression=None,
    )


async def _frame(socket: ClientConnection) -> Any:
    raw = await asyncio.wait_for(socket.recv(), timeout=WAIT_S)
    assert isinstance(raw, bytes), raw
    return codec.frame_from_protobuf(raw)


def _hello(**extra: Any) -> bytes:
    frame = {"type": "hello", "device_id": "phone-1", "policy_version": None, "sdk": "t/1"}
    return codec.frame_to_protobuf({**frame, **extra})


def test_wire_live__protobuf_socket__policy_ack_and_hostile_frames(
    asgi_server: str, phone: tuple[str, str]
) -> None:
    # Given a socket opened with the protobuf subprotocol
    async def scenario() -> list[Any]:
        socket = await _protobuf_socket(asgi_server, phone[1])
        assert socket.subprotocol == PROTOBUF_SUBPROTOCOL
        seen: list[Any] = []
        try:
            # When it says hello and acks, then sends garbage, a NUL, an oversized frame and a
            # frame of a kind the schema does not know, then hello again
            await socket.send(_hello())
            seen.append(await _frame(socket))
            await socket.send(codec.frame_to_protobuf({"type": "ack", "version": 1}))
            await socket.send(b"\xff\xff\xff")
            seen.append(await _frame(socket))
            await socket.send(_hello(sdk="evil\x00/1"))
            seen.append(await _frame(socket))
            await socket.send(b"\x7a" + b"\x00" * (70 * 1024))
            seen.append(await _frame(socket))
            await socket.send(b"")
            seen.append(await _frame(socket))
            await socket.send(_hello(policy_version=1))
            seen.append(await _frame(socket))
        finally:
            await socket.close()
        return seen

    policy, garbage, nul, oversized, unknown, again = asyncio.run(scenario())

    # Then the policy comes in protobuf, the ack is recorded, each bad frame gets its error
    # (in protobuf) and the socket carries on; the refusals are counted
    assert (policy["type"], policy["version"], policy["fleet"]) == ("policy", 1, "fleet-a")
    assert (garbage["type"], garbage["code"]) == ("error", "bad_message")
    assert (nul["code"], nul["field"]) == ("bad_message", "sdk")
    assert oversized["code"] == "too_large"
    assert unknown["code"] == "unknown_type"
    assert again == {"type": "up_to_date", "version": 1}
    row = DeviceRow.objects.get(device_id="phone-1")
    assert (row.acked_version, row.sdk) == (1, "t/1")
    metrics = httpx.get(f"{asgi_server}/metrics", timeout=30, trust_env=False).text
    assert 'channel="websocket",reason="malformed_protobuf"' in metrics


def test_wire_live__sdk_devices_json_and_protobuf__both_converge_and_send_telemetry(
    transactional_db: None,
    asgi_server: str,
    background: BackgroundLoop,
    fleet: Any,
    fleet_key: str,
    publish_version: Callable[..., Any],
    publisher: Any,
) -> None:
    # Given two SDK devices of one fleet: one negotiating (auto), one forced to JSON
    def make(device_id: str, wire_format: str) -> Device:
        inference = Inference()
        return Device(
            DeviceConfig(
                base_url=asgi_server,
                fleet_key=fleet_key,
                device_id=device_id,
                platform="android",
                model="pixel-9",
                telemetry_flush_s=3600,
                backoff_base_s=0.05,
                backoff_max_s=0.5,
                online_check_s=0.1,
                wire_format=wire_format,  # type: ignore[arg-type]
            ),
            readings=readings,
            device_infer=inference.on_device,
            cloud_infer=inference.on_cloud,
        )

    binary, plain = make("wire-pb-1", "auto"), make("wire-json-1", "json")
    for device in (binary, plain):
        background.run(device.start())
    try:
        for device in (binary, plain):
            wait_until(lambda d=device: d.policy.version == 1, timeout=WAIT_S, what="v1")
        transports = (binary._connection.transport, plain._connection.transport)
        assert [t.socket.subprotocol for t in transports] == [PROTOBUF_SUBPROTOCOL, None]

        # When v2 is published and rolled out to all
        publish_version(fleet, threshold=0.95)
        rollout_start(actor=publisher, fleet=fleet, version=2)
        rollout_advance(actor=publisher, fleet=fleet, to_stage=100)

        # Then both apply and ack v2, and hold the same document
        for device_id, device in (("wire-pb-1", binary), ("wire-json-1", plain)):
            wait_until(lambda d=device: d.policy.version == 2, timeout=WAIT_S, what="v2")
            wait_until(
                lambda i=device_id: DeviceRow.objects.get(device_id=i).acked_version == 2,
                timeout=WAIT_S,
                what="ack of v2",
            )
        assert binary.policy.current is not None
        assert plain.policy.current is not None
        assert binary.policy.current.document == plain.policy.current.document

        # When each runs tasks and flushes twice (the first answer tells what the server reads)
        async def work(device: Device) -> None:
            for i in range(4):
                await device.run(_task(tokens=10 + i))
            assert await device.telemetry.flush()
            for i in range(4):
                await device.run(_task(tokens=20 + i))
            assert await device.telemetry.flush()

        for device in (binary, plain):
            background.run(work(device))

        # Then the negotiating device sends protobuf after the first answer, the JSON one never,
        # and every event of both lands once
        assert binary._connection.telemetry_wire.protobuf is True
        assert plain._connection.telemetry_wire.protobuf is False
        assert len(_stored("wire-pb-1")) == len(_stored("wire-json-1")) == 8
    finally:
        for device in (binary, plain):
            background.run(device.stop())


# --- MQTT -----------------------------------------------------------------------------------------


def _protobuf_properties() -> Properties:
    properties = Properties(PacketTypes.PUBLISH)
    properties.ContentType = PROTOBUF_MEDIA_TYPE
    return properties


def test_wire_live__mqtt_protobuf_telemetry__lands_once_hostile_dropped(
    links: Links,  # noqa: F811
    mosquitto: Broker,  # noqa: F811
    fleet: Any,
    fleet_key: str,
    tmp_path: Path,
) -> None:
    # Given an enrolled device on the broker, and the link running
    device_enroll(fleet_key=fleet_key, device_id="mqtt-pb-1", platform="android")
    raw = RawDevice(mosquitto, fleet.slug, "mqtt-pb-1")
    events = make_events(4, device_id="mqtt-pb-1")
    body = codec.batch_to_protobuf({"events": events})
    bad_value = codec.batch_to_protobuf({"events": [make_event("mqtt-pb-1", task_type="x\x00")]})

    try:
        # (the links are subscribed once their reconcile has published the fleet's state)
        wait_until(lambda: bool(raw.states), timeout=60, what="the fleet's state")
        # When it publishes the batch in protobuf (MQTT 5 content type) twice, a truncated
        # protobuf batch, and one whose event holds a NUL
        for payload in (body, body, body[:-7], bad_value):
            raw.client.publish(
                raw.topic("telemetry"), payload, qos=1, properties=_protobuf_properties()
            ).wait_for_publish(timeout=10)

        # Then the four events land once; the bad batches are dropped, nothing of them stored
        wait_until(
            lambda: EventKey.objects.count() >= 4,
            timeout=60,
            what="the protobuf batch to land",
        )
        assert sorted(str(k) for k in EventKey.objects.values_list("event_id", flat=True)) == (
            sorted(e["event_id"] for e in events)
        )

        def dropped() -> list[str]:
            logs = "".join(p.read_text() for p in tmp_path.glob("link-*.log"))
            return [line for line in logs.splitlines() if "mqtt.message_dropped" in line]

        wait_until(lambda: len(dropped()) >= 2, timeout=60, what="the bad batches' drops")
        assert all("reason=invalid" in line for line in dropped()), dropped()
        assert EventKey.objects.count() == 4
    finally:
        raw.client.disconnect()
        raw.client.loop_stop()


def _metric(text: str, name: str, **labels: str) -> float:
    """A sample's value in a Prometheus text exposition (0 when it is not there)."""
    wanted = name + (
        "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else ""
    )
    for line in text.splitlines():
        sample, _, value = line.rpartition(" ")
        if sample == wanted:
            return float(value)
    return 0.0


def test_wire_live__mqtt_hostile_protobuf_telemetry__dropped_counted_by_reason_link_lives(
    mosquitto: Broker,  # noqa: F811
    transactional_db: None,
    fleet: Any,
    fleet_key: str,
    tmp_path: Path,
) -> None:
    # Given an enrolled device on the broker, and a link serving its Prometheus metrics
    require_postgres_and_redis("the MQTT link")
    device_enroll(fleet_key=fleet_key, device_id="mqtt-hostile", platform="android")
    link = Links(mosquitto, tmp_path)
    port = free_port()
    link.start("m", "--metrics-port", str(port))
    raw = RawDevice(mosquitto, fleet.slug, "mqtt-hostile")
    events = make_events(6, device_id="mqtt-hostile")
    valid = codec.batch_to_protobuf({"events": events[:3]})
    # hostile batches (the oversized one past the 1 MiB limit), and a valid batch with fields
    # the schema does not have around it
    hostile = hostile_messages(valid, oversized_bytes=1_200_000)
    with_unknown = with_unknown_fields(codec.batch_to_protobuf({"events": events[3:]}))

    def metrics() -> str:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        except httpx.HTTPError:
            return ""

    try:
        wait_until(
            lambda: "mqtt.link_started" in (tmp_path / "link-m.log").read_text(),
            timeout=60,
            what="the link subscribed",
        )
        # When the device publishes each hostile protobuf batch (MQTT 5 content type), then a
        # valid one, and a valid one with unknown fields
        for payload in (*hostile.values(), valid, with_unknown):
            raw.client.publish(
                raw.topic("telemetry"), payload, qos=1, properties=_protobuf_properties()
            ).wait_for_publish(timeout=10)

        # Then the valid batches land, every event once, the unknown fields ignored
        wait_until(lambda: EventKey.objects.count() >= 6, timeout=60, what="the valid batches")
        assert sorted(str(k) for k in EventKey.objects.values_list("event_id", flat=True)) == (
            sorted(e["event_id"] for e in events)
        )
        # and each hostile one is dropped, nothing of it stored, counted on the link's /metrics
        # by reason: the oversized one as too_large, the others invalid; those that are no
        # TelemetryBatch also as refused protobuf
        wait_until(
            lambda: _metric(metrics(), "edge_routing_mqtt_dropped_total", reason="invalid") >= 4,
            timeout=60,
            what="the drops counted",
        )
        text = metrics()
        assert _metric(text, "edge_routing_mqtt_dropped_total", reason="invalid") == 4, text
        assert _metric(text, "edge_routing_mqtt_dropped_total", reason="too_large") == 1, text
        assert _metric(text, "edge_routing_mqtt_messages_total") == len(hostile) + 2, text
        refused = _metric(
            text, "controlplane_wire_refused_total", channel="mqtt", reason="malformed_protobuf"
        )
        assert refused == 3, text  # truncated, deep, garbage
        assert EventKey.objects.count() == 6
        # and the link never crashed
        assert link.processes["m"].poll() is None
        assert "Traceback" not in (tmp_path / "link-m.log").read_text()
    finally:
        raw.client.disconnect()
        raw.client.loop_stop()
        link.stop_all()
