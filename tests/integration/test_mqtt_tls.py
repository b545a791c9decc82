"""The MQTT device link over TLS, as a deployment on an existing broker runs it (issue 24;
docs/operations.md, "TLS"): the broker's certificate signed by a private CA, the control plane
(`MQTT_CA_FILE`, and `MQTT_CERT_FILE` / `MQTT_KEY_FILE` where the broker asks for a client
certificate) and the SDK (`DeviceConfig.mqtt_ca_file`) checking it; a client that does not
trust that CA, or that has no certificate where one is required, is never connected."""

import json
import ssl
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from edge_sdk import Device, DeviceConfig
from edge_sdk.mqtt_topics import fleet_state
from routing_policies.mqtt.client import publisher as mqtt_publisher
from routing_policies.mqtt.publish import fleets_reconcile
from routing_policies.services import fleet_switch_version
from tests.mqtt_broker import Broker, Certificates
from tests.unit.edge_sdk.sdk_helpers import Inference, readings

from .test_mqtt_fleet_live import (
    Fleet,
    control_plane,
    mqtt_prefix,
    sdk_fleet,
    server,
)
from .test_mqtt_link import PREFIX

pytestmark = pytest.mark.integration

# The live fleet test's fixtures: the control plane process, the MQTT link, SDK devices.
__all__ = ["control_plane", "mqtt_prefix", "sdk_fleet", "server"]


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return Certificates.make(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def broker(tmp_path: Path, certificates: Certificates) -> Iterator[Broker]:
    """A broker that speaks TLS only, its certificate signed by the private CA."""
    started = Broker.start(tmp_path / "mosquitto", tls=certificates)
    yield started
    started.stop()


def _retained(broker: Broker, topic: str, context: ssl.SSLContext) -> bytes | None:
    """The retained message on `topic` as a TLS client with `context` reads it; None when the
    client cannot connect (or nothing is retained)."""
    got: list[bytes] = []
    done = threading.Event()
    client = paho.Client(CallbackAPIVersion.VERSION2, protocol=paho.MQTTv5)
    client.tls_set_context(context)
    client.on_connect = lambda c, *_: c.subscribe(topic, qos=1)
    client.on_subscribe = lambda *_: threading.Timer(1.0, done.set).start()
    client.on_message = lambda _c, _u, message: (got.append(message.payload), done.set())
    try:
        client.connect("localhost", broker.port)
    except (ssl.SSLError, OSError):
        return None
    client.loop_start()
    done.wait(5)
    client.loop_stop()
    client.disconnect()
    return got[0] if got else None


def test_mqtt_tls__private_ca__control_plane_and_sdk_devices_converge_over_mqtts(
    sdk_fleet: Fleet,
    publish_version: Callable[..., Any],
    publisher: Any,
    broker: Broker,
    fleet_key: str,
    tmp_path: Path,
) -> None:
    # Given a TLS-only broker, the control plane and four SDK devices that trust its CA, and
    # one device that trusts only the system's CAs
    fleet = sdk_fleet.fleet
    publish_version(fleet, threshold=0.75)
    ids = [f"tls-{n}" for n in range(4)]
    for device_id in ids:
        sdk_fleet.add(device_id, "mqtt")
    untrusting = Device(
        DeviceConfig(
            base_url=sdk_fleet.server.url,
            fleet_key=fleet_key,
            device_id="tls-untrusting",
            platform="android",
            model="pixel-9",
            state_dir=tmp_path / "untrusting",
            mqtt_url=broker.url,
            mqtt_prefix=PREFIX,
            backoff_base_s=0.05,
            backoff_max_s=0.5,
        ),
        readings=readings,
        device_infer=Inference().on_device,
        cloud_infer=Inference().on_cloud,
        transport="mqtt",
    )

    # When they start, and the fleet is switched to v2
    sdk_fleet.start()
    sdk_fleet.background.run(untrusting.start())
    try:
        assert set(sdk_fleet.converged("v1 over TLS").values()) == {1}
        fleet_switch_version(actor=publisher, fleet=fleet, version=2)

        # Then every trusting device runs v2 and its ack landed, all over mqtts://
        assert set(sdk_fleet.converged("v2 over TLS").values()) == {2}
        # and the device that does not trust the private CA never connected to the broker
        # (whatever it runs, it took over HTTPS at enrolment)
        assert untrusting.connection_state != "connected"
        log = broker.log()
        assert f"as {fleet.slug}/tls-0 " in log
        assert "tls-untrusting" not in log
        assert "alert unknown ca" in log  # the device refused the broker's certificate
    finally:
        sdk_fleet.background.run(untrusting.stop())


def test_mqtt_tls__broker_asks_for_client_certificates__control_plane_publishes_with_its_own(
    transactional_db: None,
    fleet: Any,
    settings: Any,
    tmp_path: Path,
    certificates: Certificates,
) -> None:
    # Given a broker that admits only clients with a certificate of the private CA (mutual
    # TLS, as AWS IoT Core asks), and the control plane given its certificate and key
    strict = Broker.start(tmp_path / "strict", tls=certificates, require_client_certificate=True)
    settings.MQTT_URL = strict.url
    settings.MQTT_TOPIC_PREFIX = PREFIX
    settings.MQTT_CA_FILE = str(certificates.ca)
    settings.MQTT_CERT_FILE = str(certificates.client_cert)
    settings.MQTT_KEY_FILE = str(certificates.client_key)
    trusting = ssl.create_default_context(cafile=str(certificates.ca))
    with_certificate = ssl.create_default_context(cafile=str(certificates.ca))
    with_certificate.load_cert_chain(str(certificates.client_cert), str(certificates.client_key))
    try:
        # When it publishes the fleet's state (as after any change, or a reconcile)
        fleets_reconcile(force=True)

        # Then the broker holds the fleet's retained state, stable v1
        topic = fleet_state(PREFIX, fleet.slug)
        retained = _retained(strict, topic, with_certificate)
        assert retained is not None
        state = json.loads(retained)
        assert (state["fleet"], state["stable"]) == (fleet.slug, 1)
        # and a client that trusts the CA but has no certificate of its own is refused
        assert _retained(strict, topic, trusting) is None
    finally:
        mqtt_publisher().close()
        strict.stop()
