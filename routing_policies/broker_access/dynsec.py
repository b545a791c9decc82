"""Mosquitto's dynamic-security plugin, driven over MQTT: a list of commands published to
`$CONTROL/dynamic-security/v1` as the admin account, the answers read from
`…/v1/response` (each command carries our correlation data, so several processes may drive
the plugin at once). One short-lived connection per call: enrolments are rare next to
everything else a broker does, and a process holds no broker connection it does not need."""

import json
import logging
import threading
import uuid
from typing import Any, Final, NamedTuple
from urllib.parse import urlsplit

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

logger = logging.getLogger(__name__)

COMMAND_TOPIC: Final = "$CONTROL/dynamic-security/v1"
RESPONSE_TOPIC: Final = "$CONTROL/dynamic-security/v1/response"
# The plugin answers a message's commands in one response; big reconciles go in slices.
MAX_COMMANDS_PER_MESSAGE: Final = 200


class TlsFiles(NamedTuple):
    """PEM files for mqtts:// (empty: the system's CA store; no client certificate)."""

    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""


NO_TLS_FILES: Final = TlsFiles()


class BrokerUnavailable(Exception):
    """The broker could not be reached, refused the admin account, or did not answer in time."""


def run(
    commands: list[dict[str, Any]],
    *,
    url: str,
    username: str,
    password: str,
    timeout: float,
    tls: TlsFiles = NO_TLS_FILES,
) -> list[dict[str, Any]]:
    """Run the commands in order; one response per command (`error` set when it failed)."""
    if not commands:
        return []
    with _AdminSession(url, username, password, timeout, tls) as session:
        responses: list[dict[str, Any]] = []
        for start in range(0, len(commands), MAX_COMMANDS_PER_MESSAGE):
            responses += session.call(commands[start : start + MAX_COMMANDS_PER_MESSAGE])
        return responses


class _AdminSession:
    """One MQTT 5 connection of the admin account, subscribed to the plugin's responses."""

    def __init__(
        self,
        url: str,
        username: str,
        password: str,
        timeout: float,
        tls: TlsFiles,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("mqtt", "mqtts") or not parts.hostname:
            raise BrokerUnavailable(f"MQTT_URL {url!r} is not mqtt://host:port or mqtts://…")
        self.host = parts.hostname
        self.port = parts.port or (8883 if parts.scheme == "mqtts" else 1883)
        self.timeout = timeout
        self.client = mqtt.Client(
            CallbackAPIVersion.VERSION2,
            client_id=f"controlplane-dynsec-{uuid.uuid4().hex[:12]}",
            protocol=mqtt.MQTTv5,
        )
        self.client.username_pw_set(username, password)
        if parts.scheme == "mqtts":
            self.client.tls_set(
                ca_certs=tls.ca_file or None,
                certfile=tls.cert_file or None,
                keyfile=tls.key_file or None,
            )
        self.client.connect_timeout = timeout
        self._connected = threading.Event()
        self._subscribed = threading.Event()
        self._answered = threading.Event()
        self._connect_reason = ""
        self._pending: dict[str, dict[str, Any] | None] = {}
        self._lock = threading.Lock()
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = self._on_subscribe
        self.client.on_message = self._on_message

    def __enter__(self) -> "_AdminSession":
        try:
            self.client.connect(self.host, self.port, keepalive=30)
        except OSError as exc:
            raise BrokerUnavailable(f"{self.host}:{self.port}: {exc}") from exc
        self.client.loop_start()
        try:
            self._wait(self._connected, "connect")
            if self._connect_reason:
                raise BrokerUnavailable(f"admin account refused: {self._connect_reason}")
            self.client.subscribe(RESPONSE_TOPIC, qos=1)
            self._wait(self._subscribed, "subscribe")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *_: Any) -> None:
        self.client.disconnect()
        self.client.loop_stop()

    def _wait(self, event: threading.Event, what: str) -> None:
        if not event.wait(self.timeout):
            raise BrokerUnavailable(f"no {what} answer in {self.timeout} s")

    def call(self, commands: list[dict[str, Any]]) -> list[dict[str, Any]]:
        tags = [uuid.uuid4().hex for _ in commands]
        with self._lock:
            self._pending = dict.fromkeys(tags)
            self._answered.clear()
        tagged = [
            {**command, "correlationData": tag} for command, tag in zip(commands, tags, strict=True)
        ]
        self.client.publish(COMMAND_TOPIC, json.dumps({"commands": tagged}), qos=1)
        self._wait(self._answered, "dynamic-security")
        with self._lock:
            return [self._pending[tag] or {} for tag in tags]

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        if reason.is_failure:
            self._connect_reason = str(reason)
        self._connected.set()

    def _on_subscribe(self, client: Any, userdata: Any, mid: Any, reasons: Any, props: Any) -> None:
        self._subscribed.set()

    def _on_message(self, client: Any, userdata: Any, message: Any) -> None:
        try:
            responses = json.loads(message.payload)["responses"]
        except (ValueError, KeyError, TypeError):
            logger.warning("broker_access.dynsec_unreadable_response")
            return
        with self._lock:
            for response in responses:
                tag = response.get("correlationData") if isinstance(response, dict) else None
                if tag in self._pending:
                    self._pending[tag] = response
            if self._pending and all(r is not None for r in self._pending.values()):
                self._answered.set()
