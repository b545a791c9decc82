"""An MQTT SDK device with the real control plane (uvicorn + PostgreSQL + Redis) for what only
the server knows: enrolment answers the fleet's slug (the device's MQTT identity and topics),
and the document the control plane serves is the one a device applies from the broker.

The control plane's MQTT publisher is not part of this test: the test publishes the retained
state and document on a real Mosquitto as docs/PROTOCOL.md ("MQTT") says the server does.
"""

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.db import connection

from edge_sdk import Device, DeviceConfig
from tests.live_server import require_postgres_and_redis
from tests.mqtt_broker import Broker
from tests.unit.edge_sdk.sdk_helpers import Inference, readings

from .test_device_push import AsgiProcess
from .test_mqtt_device import ControlPlane
from .ws_clients import BackgroundLoop, wait_until

pytestmark = pytest.mark.integration

WAIT_S = 45.0


@pytest.fixture(scope="module")
def server(django_db_setup: None, django_db_blocker: Any) -> Iterator[AsgiProcess]:
    require_postgres_and_redis("the MQTT SDK's live test")
    process = AsgiProcess(dict(connection.settings_dict))
    try:
        process.start()
        yield process
    finally:
        process.stop()


def test_mqtt_sdk__enrolled_by_the_control_plane__fleet_from_enrolment_and_its_document_applied(
    transactional_db: None,
    server: AsgiProcess,
    fleet: Any,
    fleet_key: str,
    background: BackgroundLoop,
    tmp_path: Path,
) -> None:
    # Given a broker, and an MQTT device that knows only the control plane and its fleet key
    broker = Broker.start(tmp_path / "mosquitto")
    control = ControlPlane(broker, fleet=fleet.slug)
    inference = Inference()
    device = Device(
        DeviceConfig(
            base_url=server.url,
            fleet_key=fleet_key,
            device_id="mqtt-live-1",
            platform="android",
            model="pixel-9",
            state_dir=tmp_path / "device",
            mqtt_url=broker.url,
            backoff_base_s=0.05,
            backoff_max_s=0.5,
            online_check_s=0.1,
            mqtt_document_wait_s=0.5,
        ),
        readings=readings,
        device_infer=inference.on_device,
        cloud_infer=inference.on_cloud,
        transport="mqtt",
    )
    try:
        # When it starts
        background.run(device.start())

        # Then it enrols, learns its fleet from the answer (kept beside its token) and is born
        # on the broker under that fleet's topics
        wait_until(
            lambda: bool(control.of("mqtt-live-1", "presence")), timeout=WAIT_S, what="birth"
        )
        assert (tmp_path / "device" / "fleet").read_text() == fleet.slug
        assert control.of("mqtt-live-1", "presence")[0]["online"] is True

        # When the control plane's state names v1, with v1's document as the server serves it
        token = device.token
        assert token is not None
        served = httpx.get(
            f"{server.url}/api/v1/devices/me/policy",
            headers={"Authorization": f"Bearer {token}"},
            timeout=10,
        )
        assert served.status_code == 200
        control.version(1, served.content)
        control.state(
            json.dumps(
                {"seq": 1, "fleet": fleet.slug, "stable": 1, "candidate": None, "rollout": None}
            ).encode()
        )

        # Then the device runs it, with the server's ETag, and acks it on its topic
        wait_until(lambda: device.policy.version == 1, timeout=WAIT_S, what="v1 applied")
        assert device.policy.etag == served.headers["ETag"]
        wait_until(
            # (`waited_ms` beside it: the SDK spreads acks, docs/PROTOCOL.md "MQTT")
            lambda: [a["version"] for a in control.of("mqtt-live-1", "ack")] == [1],
            timeout=WAIT_S,
            what="the ack",
        )
        assert device.connection_state == "connected"
    finally:
        background.run(device.stop())
        control.close()
        broker.stop()
