"""An SDK device the broker does not know (it enrolled while the broker was away, or the broker
lost its accounts) gets in by itself: refused, it asks the control plane for its broker access
(`POST /api/v1/devices/me/broker-access`), which gives the broker the device's client, and
reconnects. Real parts: uvicorn with MQTT_ACCESS=dynsec, Mosquitto with dynamic security."""

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from edge_sdk import Device, DeviceConfig
from tests.live_server import require_postgres_and_redis
from tests.mqtt_broker import Broker
from tests.unit.edge_sdk.sdk_helpers import Inference, readings

from .test_device_push import AsgiProcess
from .test_mqtt_access import ADMIN, PREFIX
from .ws_clients import BackgroundLoop, wait_until

pytestmark = pytest.mark.integration

WAIT_S = 30.0


@pytest.fixture
def directory() -> Iterator[Path]:
    # Readable by the `mosquitto` user the broker drops to when run as root.
    made = Path(tempfile.mkdtemp(prefix="mqtt-access-sdk-"))
    made.chmod(0o755)
    yield made
    shutil.rmtree(made, ignore_errors=True)


def test_mqtt_access_sdk__broker_lost_its_accounts__device_asks_for_access_and_connects(
    transactional_db: None,
    fleet: Any,
    fleet_key: str,
    background: BackgroundLoop,
    directory: Path,
) -> None:
    require_postgres_and_redis("the SDK's broker access test")
    # Given a control plane that drives a Mosquitto's accounts, and an SDK device enrolled and
    # connected over MQTT
    first = Broker.start(directory / "first", dynsec_admin=ADMIN)
    server = AsgiProcess(
        dict(connection.settings_dict),
        extra_env={
            "MQTT_ACCESS": "dynsec",
            "MQTT_URL": first.url,
            "MQTT_TOPIC_PREFIX": PREFIX,
            "MQTT_DYNSEC_USERNAME": ADMIN[0],
            "MQTT_DYNSEC_PASSWORD": ADMIN[1],
        },
    )
    server.start()
    device = Device(
        DeviceConfig(
            base_url=server.url,
            fleet_key=fleet_key,
            device_id="phone-1",
            platform="android",
            model="pixel-9",
            state_dir=directory / "device",
            mqtt_url=first.url,
            mqtt_prefix=PREFIX,
            backoff_base_s=0.05,
            backoff_max_s=0.5,
            online_check_s=0.1,
            poll_interval_s=1.0,
        ),
        readings=readings,
        device_infer=Inference().on_device,
        cloud_infer=Inference().on_cloud,
        transport="mqtt",
    )
    second: Broker | None = None
    try:
        background.run(device.start())
        wait_until(lambda: device.connection_state == "connected", timeout=WAIT_S, what="up")

        # When the broker is replaced, in its place, by one that knows none of the devices
        first.stop()
        second = Broker.start(directory / "second", dynsec_admin=ADMIN, port=first.port)

        # Then the device, refused, asks the control plane, and is connected again with the
        # same token (no re-enrolment)
        token = device.token
        wait_until(lambda: device.connection_state != "connected", timeout=WAIT_S, what="lost")
        wait_until(lambda: device.connection_state == "connected", timeout=WAIT_S, what="back")
        assert device.token == token
        assert '"POST /api/v1/devices/me/broker-access HTTP/1.1" 204' in server_log(server)
    finally:
        background.run(device.stop())
        server.stop()
        first.stop()
        if second is not None:
            second.stop()


def server_log(server: AsgiProcess) -> str:
    return Path(server.log.name).read_text(errors="replace")
