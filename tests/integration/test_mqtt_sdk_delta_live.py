"""Policy deltas on the MQTT path (docs/PROTOCOL.md, "Policy deltas"): an MQTT SDK device that
runs v1 and whose fleet's state names v2 takes v2 as a delta from the control plane's immutable
document (`?since=1`), real uvicorn + PostgreSQL + Redis and a real Mosquitto.

As in test_mqtt_sdk_live.py, the test publishes the retained state and v1's document as the
control plane's MQTT publisher would; v2's document is deliberately not on the broker, so the
device could only have it from the delta (or the whole document over HTTP).
"""

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from edge_sdk import Device, DeviceConfig
from edge_sdk.delta import canonical_bytes
from edge_sdk.transport.mqtt import MqttTransport, fetch_document
from edge_sdk.wire import PROTOBUF_MEDIA_TYPE
from tests.mqtt_broker import Broker
from tests.unit.edge_sdk.sdk_helpers import Inference, readings

from .test_device_push import AsgiProcess
from .test_mqtt_device import ControlPlane
from .test_mqtt_sdk_live import server  # noqa: F401  # the fixture
from .ws_clients import BackgroundLoop, wait_until

pytestmark = pytest.mark.integration

WAIT_S = 45.0


def _state(fleet: Any, seq: int, stable: int, candidate: int | None = None) -> bytes:
    rollout = {"id": 1, "stage": 5, "salt": "s", "holdback": 0} if candidate else None
    message = {"seq": seq, "fleet": fleet.slug, "stable": stable, "candidate": candidate}
    return json.dumps({**message, "rollout": rollout}).encode()


@pytest.mark.parametrize(
    ("metered", "wire_format"), [(True, "auto"), (False, "auto"), (True, "json")]
)
def test_mqtt_sdk_delta__state_names_v2__taken_as_a_delta_applied_byte_equal_and_acked(
    metered: bool,
    wire_format: str,
    transactional_db: None,
    server: AsgiProcess,  # noqa: F811
    fleet: Any,
    fleet_key: str,
    publish_version: Callable[..., Any],
    background: BackgroundLoop,
    tmp_path: Path,
) -> None:
    # Given an MQTT device running v1 (from the broker), and v2 and v3 published
    publish_version(fleet, threshold=0.95)
    publish_version(fleet, threshold=0.3)
    documents = {
        n: httpx.get(f"{server.url}/api/v1/fleets/{fleet.slug}/documents/{n}", timeout=10)
        for n in (1, 2, 3)
    }
    broker = Broker.start(tmp_path / "mosquitto")
    control = ControlPlane(broker, fleet=fleet.slug)
    inference = Inference()
    device = Device(
        DeviceConfig(
            base_url=server.url,
            fleet_key=fleet_key,
            device_id="mqtt-delta-1",
            platform="android",
            model="pixel-9",
            mqtt_url=broker.url,
            backoff_base_s=0.05,
            backoff_max_s=0.5,
            online_check_s=0.1,
            mqtt_document_wait_s=0.5,
            mqtt_prefetch_jitter_s=0,
            # "auto": the documents and deltas it fetches come in protobuf; "json": as JSON
            wire_format=wire_format,  # type: ignore[arg-type]
        ),
        # Metered, a weak link: deltas first, no prefetch; else the broker's copy first (none
        # here), then the delta
        readings=lambda: readings(metered=metered),
        device_infer=inference.on_device,
        cloud_infer=inference.on_cloud,
        transport="mqtt",
    )
    transport = device._connection.transport
    assert isinstance(transport, MqttTransport)
    try:
        background.run(device.start())
        control.version(1, documents[1].content)
        control.state(_state(fleet, 1, stable=1))
        wait_until(lambda: device.policy.version == 1, timeout=WAIT_S, what="v1 applied")

        # When the state names v3 as a candidate (a device on a metered link takes no document
        # ahead of need; another takes it, as a delta too), then v2 as the fleet's stable version
        control.state(_state(fleet, 2, stable=1, candidate=3))
        control.state(_state(fleet, 3, stable=2))

        # Then it runs v2 made from the delta since v1, byte-equal to the server's v2, and acks
        wait_until(lambda: device.policy.version == 2, timeout=WAIT_S, what="v2 applied")
        if not metered:
            wait_until(lambda: 3 in transport.held, timeout=WAIT_S, what="v3 prefetched")
        assert (device.deltas_applied, device.deltas_refused) == (1 if metered else 2, 0)
        assert canonical_bytes(device.policy.document) == canonical_bytes(documents[2].json())
        assert device.policy.etag == documents[2].headers["ETag"]
        wait_until(
            lambda: 2 in [a["version"] for a in control.of("mqtt-delta-1", "ack")],
            timeout=WAIT_S,
            what="the ack of v2",
        )
        assert transport.documents["prefetched"] == (0 if metered else 1)
        assert (3 in transport.held) is not metered
    finally:
        background.run(device.stop())
        control.close()
        broker.stop()


@pytest.mark.parametrize("since", [None, 1])
def test_mqtt_fetch__protobuf_asked__protobuf_answered_read_as_the_json_one(
    transactional_db: None,
    server: AsgiProcess,  # noqa: F811
    fleet: Any,
    publish_version: Callable[..., Any],
    background: BackgroundLoop,
    since: int | None,
) -> None:
    # Given v2 published (one cell changed)
    publish_version(fleet, threshold=0.95)
    answers: list[httpx.Response] = []  # (headers only: the body is streamed)

    async def fetch(protobuf: bool) -> bytes | None:
        async def seen(response: httpx.Response) -> None:
            answers.append(response)

        hooks = {"response": [seen]}
        async with httpx.AsyncClient(trust_env=False, event_hooks=hooks) as http:
            return await fetch_document(
                http, server.url, fleet.slug, 2, 10.0, since=since, protobuf=protobuf
            )

    # When the MQTT transport fetches v2 (whole, or since v1) as JSON, then asking for protobuf
    as_json = background.run(fetch(False))
    as_protobuf = background.run(fetch(True))

    # Then the second answer came in protobuf (a delta with `since`), and reads as the same JSON
    # value (same canonical bytes)
    assert [a.headers["Content-Type"] for a in answers] == ["application/json", PROTOBUF_MEDIA_TYPE]
    im = None if since is None else "policy-delta"
    assert [a.headers.get("IM") for a in answers] == [im, im]
    assert as_json is not None
    assert as_protobuf is not None
    assert canonical_bytes(json.loads(as_protobuf)) == canonical_bytes(json.loads(as_json))
