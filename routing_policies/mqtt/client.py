"""The control plane's connections to the broker (paho-mqtt 2, MQTT 5): the process's publisher,
opened on first use, and the link's subscriber (mqtt.link). Settings: MQTT_URL,
MQTT_USERNAME, MQTT_PASSWORD (controlplane/settings/mqtt.py)."""

import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import paho.mqtt.client as paho
from django.conf import settings
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5.0
PUBLISH_TIMEOUT_S = 5.0
# After a failed connect, publishes fail at once for this long instead of each waiting for the
# broker (the change is committed; the link's reconcile publishes it: docs/PROTOCOL.md, "MQTT").
RETRY_CONNECT_AFTER_S = 5.0


@dataclass(frozen=True)
class BrokerAddress:
    """Where the broker is and how the control plane logs in."""

    host: str
    port: int
    tls: bool
    username: str
    password: str

    @classmethod
    def from_settings(cls) -> "BrokerAddress":
        url = urlparse(settings.MQTT_URL)
        tls = url.scheme in ("mqtts", "ssl")
        return cls(
            host=url.hostname or "127.0.0.1",
            port=url.port or (8883 if tls else 1883),
            tls=tls,
            username=settings.MQTT_USERNAME,
            password=settings.MQTT_PASSWORD,
        )


def client_id(role: str) -> str:
    """A client id of its own for each process (the broker closes a second connection with an
    id already connected)."""
    return f"controlplane-{role}-{socket.gethostname()[:40]}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def new_client(
    address: BrokerAddress, role: str, *, manual_ack: bool = False, fixed_id: str = ""
) -> paho.Client:
    """A paho MQTT 5 client for `address`, not yet connected (with `fixed_id` as its client id,
    else one of its own)."""
    client = paho.Client(
        CallbackAPIVersion.VERSION2,
        client_id=fixed_id or client_id(role),
        protocol=paho.MQTTv5,
        manual_ack=manual_ack,
    )
    if address.username:
        client.username_pw_set(address.username, address.password or None)
    if address.tls:  # the broker's CA (else the system's), the client certificate if any
        client.tls_set(
            ca_certs=settings.MQTT_CA_FILE or None,
            certfile=settings.MQTT_CERT_FILE or None,
            keyfile=settings.MQTT_KEY_FILE or None,
        )
    return client


def publish_properties(
    *, expiry_s: int | None = None, content_type: str = "application/json"
) -> Properties:
    """The content type (UTF-8 JSON by default, payload format indicator 1; anything else, such
    as protobuf, is bytes: indicator 0), and a Message Expiry Interval."""
    properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
    properties.PayloadFormatIndicator = 1 if content_type == "application/json" else 0
    properties.ContentType = content_type
    if expiry_s is not None:
        properties.MessageExpiryInterval = expiry_s
    return properties


class Publisher:
    """One connection per process that publishes retained fleet topics at QoS 1 and waits for
    the broker's PUBACK (so that, under the fleet's row lock, publishes reach it in order)."""

    def __init__(self, address: BrokerAddress) -> None:
        self.address = address
        self.pid = os.getpid()
        self._client: paho.Client | None = None
        self._connected = threading.Event()
        self._lock = threading.Lock()
        self._failed_at = 0.0
        self.published = 0  # for the logs and the tests

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        if isinstance(reason, ReasonCode) and reason.is_failure:
            logger.warning("mqtt.publisher_refused reason=%s", reason)
            return
        self._connected.set()

    def _on_disconnect(self, client: Any, userdata: Any, flags: Any, reason: Any, p: Any) -> None:
        self._connected.clear()

    def _ensure_connected(self) -> paho.Client | None:
        with self._lock:
            if self._client is not None:
                return self._client if self._connected.wait(CONNECT_TIMEOUT_S) else None
            if time.monotonic() - self._failed_at < RETRY_CONNECT_AFTER_S:
                return None
            client = new_client(self.address, "publisher")
            client.on_connect = self._on_connect
            client.on_disconnect = self._on_disconnect
            client.reconnect_delay_set(min_delay=1, max_delay=30)
            try:
                client.connect(self.address.host, self.address.port, keepalive=60)
            except OSError:
                self._failed_at = time.monotonic()
                logger.warning("mqtt.publisher_unreachable host=%s", self.address.host)
                return None
            client.loop_start()
            self._client = client
            if not self._connected.wait(CONNECT_TIMEOUT_S):
                return None
            return client

    def publish(
        self,
        topic: str,
        payload: bytes,
        *,
        retain: bool = True,
        expiry_s: int | None = None,
        content_type: str = "application/json",
    ) -> bool:
        """Publish at QoS 1 and wait for the broker's acknowledgement; False when it did not
        come (logged: the caller leaves the publish to the reconcile)."""
        client = self._ensure_connected()
        if client is None:
            return False
        properties = publish_properties(expiry_s=expiry_s, content_type=content_type)
        info = client.publish(topic, payload, qos=1, retain=retain, properties=properties)
        try:
            info.wait_for_publish(PUBLISH_TIMEOUT_S)
        except (RuntimeError, ValueError):
            logger.warning("mqtt.publish_failed topic=%s", topic, exc_info=True)
            return False
        if not info.is_published():
            logger.warning("mqtt.publish_timeout topic=%s", topic)
            return False
        self.published += 1
        return True

    def close(self) -> None:
        """Disconnect (tests, and a process that stops)."""
        with self._lock:
            if self._client is not None:
                self._client.disconnect()
                self._client.loop_stop()
                self._client = None
            self._connected.clear()


_publisher: Publisher | None = None
_publisher_lock = threading.Lock()


def publisher() -> Publisher:
    """This process's publisher for the configured broker (a new one after a fork, or when the
    settings name another broker)."""
    global _publisher
    address = BrokerAddress.from_settings()
    with _publisher_lock:
        current = _publisher
        if current is None or current.pid != os.getpid() or current.address != address:
            if current is not None and current.pid == os.getpid():
                current.close()
            current = _publisher = Publisher(address)
        return current
