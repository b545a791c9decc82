"""DeviceConfig: what a device needs to know to join its fleet."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edge_sdk.mqtt_topics import DEFAULT_PREFIX
from edge_sdk.segments import attributes_parse
from edge_sdk.wire.negotiation import WIRE_FORMATS, WireFormat

__all__ = ["SDK_VERSION", "DeviceConfig"]

SDK_VERSION = "0.1.0"

# The server's limits on hello / enrolment fields (routing_policies: consumers, apis).
_FIELD_LIMITS = {"device_id": 128, "platform": 64, "model": 128, "sdk": 64}
# What enrolment accepts as a device id (routing_policies.devices.apis.DEVICE_ID_RE).
_DEVICE_ID = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}\Z")
_FLEET = re.compile(r"\A[A-Za-z0-9_-]{1,64}\Z")  # a slug: never "/", "+" or "#" in a topic
_MQTT_SCHEMES = ("mqtt:", "mqtts:", "ws:", "wss:")


@dataclass(kw_only=True)
class DeviceConfig:
    """Where the control plane is, who the device is, and the SDK's bounds and timings."""

    base_url: str  # http(s)://host:port of the control plane (the ws URL is derived)
    fleet_key: str
    device_id: str
    platform: str
    model: str
    sdk: str = f"edge-sdk/{SDK_VERSION}"
    # What the device is beyond platform and model (docs/PROTOCOL.md, Device attributes):
    # os_version, app_version, accelerator, memory_gb, local_model, quantisation, region.
    # Sent at enrolment and in every hello; one left out is unknown to the fleet's segments.
    attributes: Mapping[str, Any] = field(default_factory=dict)
    state_dir: Path | None = None  # token + last policy + unsent telemetry; None = memory only
    telemetry_batch_max: int = 500
    telemetry_flush_s: float = 2.0
    telemetry_max_events: int = 20_000  # bounded; oldest dropped first, counted
    offline_queue_max: int = 1_000
    backoff_base_s: float = 0.5
    backoff_max_s: float = 30.0
    poll_interval_s: float = 30.0
    # Added beyond the contract (all optional):
    cache_max_entries: int = 256  # LRU result cache size
    online_check_s: float = 1.0  # how often a connected or offline device re-reads `online`
    keepalive_s: float = 20.0  # a ping after this long without a frame; no pong: reconnect
    http_timeout_s: float = 10.0  # per HTTP request (enrol, poll, telemetry)
    # The quality signals (PROTOCOL.md extensions):
    feedback_batch_max: int = 500  # feedback items per POST (the server takes 1,000)
    feedback_max_items: int = 20_000  # bounded; oldest dropped first, counted
    # The SDK's own bound on shadow refines, whatever the cell's rate: at most this many
    # started in any 60 s (0: none), so a high rate on a busy device cannot run up the bill.
    shadow_refines_per_minute: int = 6
    # The MQTT device link (`Device(..., transport="mqtt")`, edge_sdk.transport.mqtt):
    # mqtt://host:1883, mqtts://host:8883, or ws(s)://host:443/path for networks that allow
    # only web ports (the path is the URL's, "/mqtt" when it names none). Empty: not used.
    mqtt_url: str = ""
    mqtt_prefix: str = DEFAULT_PREFIX  # the deployment's topic prefix (MQTT_TOPIC_PREFIX)
    # The fleet's slug (topics, MQTT username). None: the one enrolment answered, or the one
    # the stored policy names.
    fleet: str | None = None
    mqtt_keepalive_s: int = (
        30  # MQTT keepalive: the broker drops (and publishes the will) after 1.5x
    )
    mqtt_session_expiry_s: int = 86_400  # the broker keeps the session this long after a drop
    # Over mqtts:// or wss://: the CA bundle (PEM file) the broker's certificate is checked
    # against, for a broker with a private CA. Empty: the system's CA store.
    mqtt_ca_file: str = ""
    # How long to wait for a version's retained document before asking the HTTP endpoint.
    mqtt_document_wait_s: float = 3.0
    # A state that names a stable, candidate or newest published version whose document the
    # device does not hold: the device takes it in the background after a random wait in
    # [0, this], so that a publish is not every device of the fleet asking at once (0: at once).
    mqtt_prefetch_jitter_s: float = 30.0
    # The ack of a version applied is published after a random wait in [0, this], with the
    # wait in it (`waited_ms`: the control plane still records when the version was applied),
    # so that a rollout's cohort does not ack all at once while the broker is still fanning the
    # state out to the rest of the fleet (0: at once).
    mqtt_ack_jitter_s: float = 2.0
    # Documents of recent versions kept in memory (the stable, the candidate, the newest
    # published, and the one it runs): a rollout's start, a later stage or a rollback applies
    # at once, with no round trip.
    mqtt_held_documents: int = 3
    # Policy deltas (docs/PROTOCOL.md, "Policy deltas"; edge_sdk.delta_sync): take only what
    # changed between versions when the server offers it (False: whole documents only).
    policy_deltas: bool = True
    # A weak link (edge_sdk.delta_sync.weak_link): the readings say metered, or slower / farther
    # than these. Telemetry is then batched this many times less often, and documents come as
    # deltas where they can (MQTT: the delta before the retained document, no prefetch).
    weak_link_kbps: float = 500.0
    weak_link_rtt_ms: float = 400.0
    weak_link_telemetry_factor: float = 5.0
    # Binary frames and compression (docs/PROTOCOL.md, "Binary frames and compression"):
    # "auto" uses protobuf (and compression) wherever the server offers it, JSON elsewhere;
    # "json" never does (JSON only, as before); "protobuf" is "auto", and also sends MQTT
    # telemetry in protobuf (over MQTT nothing answers to offer it: choose it only for a
    # control plane that reads it).
    wire_format: WireFormat = "auto"

    def __post_init__(self) -> None:
        for name, limit in _FIELD_LIMITS.items():
            value = getattr(self, name)
            if not isinstance(value, str) or len(value) > limit:
                raise ValueError(f"DeviceConfig.{name} must be a string of at most {limit}")
        try:
            self.attributes = attributes_parse(self.attributes)
        except ValueError as problem:
            raise ValueError(f"DeviceConfig.attributes: {problem}") from None
        if not _DEVICE_ID.match(self.device_id):
            raise ValueError(
                "DeviceConfig.device_id must start with a letter or digit and hold only "
                "letters, digits and . _ : @ -"
            )
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError("DeviceConfig.base_url must start with http:// or https://")
        self.base_url = self.base_url.rstrip("/")
        if self.state_dir is not None:
            self.state_dir = Path(self.state_dir)
        if self.mqtt_url and not self.mqtt_url.startswith(_MQTT_SCHEMES):
            schemes = ", ".join(f"{scheme}//" for scheme in _MQTT_SCHEMES)
            raise ValueError(f"DeviceConfig.mqtt_url must start with {schemes}")
        if self.wire_format not in WIRE_FORMATS:
            raise ValueError(f"DeviceConfig.wire_format must be one of {', '.join(WIRE_FORMATS)}")
        if self.fleet is not None and not _FLEET.match(self.fleet):
            raise ValueError("DeviceConfig.fleet must be a fleet slug (letters, digits, - and _)")

    @property
    def ws_url(self) -> str:
        """The device socket's URL: ws(s)://host:port/ws/device/."""
        return "ws" + self.base_url[len("http") :] + "/ws/device/"
