"""`MqttTransport`: the device link over an MQTT 5 broker (docs/PROTOCOL.md, "MQTT"; issue 24).

Where the WebSocket transport is told its version by the server, a device on MQTT works it out
itself: it reads its fleet's retained rollout state (`{prefix}/fleets/{fleet}/state`), computes
its version with the server's own rule (`edge_sdk.assignment.FleetAssignment.version_for`) and,
when that is not the version it runs, takes the document from the version's retained topic
(subscribed for that one message), or from the immutable HTTP document when the broker has
none. A device configured for protobuf (`DeviceConfig.wire_format = "protobuf"`) takes the
version's protobuf twin (`…/versions/{n}/protobuf`, MQTT 5 content type
`application/x-protobuf`) instead, read as the JSON document it stands for and checked alike.
The document then goes to the connection as the `policy` frame the socket would have carried,
so storing, applying and acking are the connection's, unchanged; the `ack` it sends
back is published on the device's ack topic. Cloud pressure arrives retained with an MQTT 5
message expiry: the broker's remaining expiry is the `ttl_s` handed on.

Documents ahead of need: a state that names a stable, candidate or newest published version
(`published`) whose document the device does not hold (and its bucket does not need now) makes
it take that document in the background, once per version, after a random wait in
[0, `mqtt_prefetch_jitter_s`]; the documents of its last `mqtt_held_documents` versions are
held (`HeldDocuments`; the versions the newest state names go last), checked whole when taken
and again before use, so a rollout's start (its candidate published, and so taken, before), a
later stage or a rollback applies from memory with no round trip.

The session: client id and username `{fleet}/{device_id}`, the device token as password,
keepalive `mqtt_keepalive_s`, a persistent session (clean start off, session expiry
`mqtt_session_expiry_s`), a retained last will `{"online": false, "session": n}` on the
presence topic, a retained birth on every connect, and the same offline presence again on a
graceful stop; `n` grows with each connection (the link applies only the newest presence).
Reconnects are the connection loop's, with its jittered back-off. A broker that refuses the
credentials ends the session as "refused": the connection then asks the HTTP API, which says
whether the token is revoked (401) or the broker merely does not know it yet. A broker that
takes the session over for a newer connection of the same client id ends it as "superseded".

Telemetry batches go on the device's telemetry topic (QoS 1) and leave the queue only once the
broker's PUBACK says it has them (`publish_telemetry`).

paho-mqtt runs on the device's event loop, without a thread of its own: its socket is watched
with `add_reader`/`add_writer` (thousands of simulated devices share one loop), and only the
blocking connect (TCP, TLS, the WebSocket handshake) runs on a worker thread. Over WebSockets
(`ws://` or `wss://` URLs) the same session runs through paho's WebSocket transport, for
networks that allow only port 443.

Messages a device must not trust are dropped and counted by reason (`dropped`): malformed or
oversized state, documents and cloud pressure, a state of another fleet, a stale sequence
number (not newer than the last one applied), a document that is not the version asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import logging
import random
import socket
import ssl
import time
from collections import Counter, OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

import httpx
import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from edge_sdk import mqtt_topics
from edge_sdk.assignment import FleetAssignment
from edge_sdk.backoff import Backoff
from edge_sdk.config import DeviceConfig
from edge_sdk.delta_sync import is_delta
from edge_sdk.policy import PolicyDocumentError, parse_policy
from edge_sdk.segments import RuleProblem, device_attributes, rule_check
from edge_sdk.transport import Channel, Link, SessionEnd
from edge_sdk.wire import PROTOBUF_MEDIA_TYPE
from edge_sdk.wire.negotiation import DOCUMENT_ACCEPT, TelemetryWire, json_answer

__all__ = [
    "DOCUMENT_PATH",
    "MAX_DOCUMENT_BYTES",
    "MAX_STATE_BYTES",
    "FleetState",
    "HeldDocuments",
    "MqttTransport",
    "parse_state",
]

logger = logging.getLogger(__name__)

MAX_DOCUMENT_BYTES: Final = 4 * 1024 * 1024  # as the socket's largest frame
MAX_STATE_BYTES: Final = 64 * 1024
MAX_PRESSURE_BYTES: Final = 4 * 1024
# An ack's `waited_ms` at most (docs/PROTOCOL.md, "MQTT"): the control plane's own bound.
MAX_ACK_WAIT_MS: Final = 2**31 - 1
# The immutable, CDN-cacheable document of a published version (docs/PROTOCOL.md, "MQTT").
DOCUMENT_PATH: Final = "/api/v1/fleets/{fleet}/documents/{version}"
# Where a device whose credentials the broker refused asks the control plane to restore them
# (docs/PROTOCOL.md, "MQTT"), at most once per ACCESS_ASK_INTERVAL_S.
ACCESS_PATH: Final = "/api/v1/devices/me/broker-access"
ACCESS_ASK_INTERVAL_S: Final = 60.0
# CONNACK reason codes meaning "these credentials are not accepted here".
_REFUSED_CREDENTIALS: Final = frozenset(
    {0x86, 0x87, 0x8C}
)  # bad credentials, not authorised, bad auth method
_SESSION_TAKEN_OVER: Final = 0x8E
_STOP_WAIT_S: Final = 2.0  # at stop: for the offline presence's PUBACK, then the DISCONNECT
_SHARED_PARSES: Final = 8  # recent states and documents parsed once per process


@dataclass(frozen=True, slots=True)
class FleetState:
    """A fleet's retained rollout state, checked: its sequence number, its assignment, the
    `rollout` a policy frame names, and the fleet's newest published version (None when the
    state does not say: a control plane before it, or a value that is not a version)."""

    seq: int
    assignment: FleetAssignment
    rollout: dict[str, int] | None
    published: int | None = None

    def named(self) -> frozenset[int]:
        """The versions this state names: the ones a device holds ahead of need."""
        versions = (self.assignment.stable, self.assignment.candidate, self.published)
        return frozenset(v for v in versions if v is not None)


def _whole(value: Any, low: int, high: int) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        return None
    return int(value)


def _version(value: Any) -> tuple[bool, int | None]:
    """(valid, number) of a version field: a whole number >= 1, or null."""
    if value is None:
        return True, None
    number = _whole(value, 1, 2**31 - 1)
    return number is not None, number


@functools.lru_cache(maxsize=_SHARED_PARSES)
def parse_state(payload: bytes, fleet: str) -> FleetState | str:
    """The state message of `fleet`, or the reason it is dropped ("oversized", "malformed",
    "wrong_fleet"). Parsed once per process: a simulator's devices all get the same one."""
    if len(payload) > MAX_STATE_BYTES:
        return "oversized"
    try:
        message = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return "malformed"
    if not isinstance(message, dict):
        return "malformed"
    if message.get("fleet", fleet) != fleet:
        return "wrong_fleet"
    seq = _whole(message.get("seq"), 0, 2**63 - 1)
    stable_ok, stable = _version(message.get("stable"))
    candidate_ok, candidate = _version(message.get("candidate"))
    if seq is None or not stable_ok or not candidate_ok:
        return "malformed"
    # Advisory (what to take ahead): one that is not a version is ignored, the state applies.
    _, published = _version(message.get("published"))
    raw = message.get("rollout")
    scoped = message.get("scoped_rollout")
    if raw is None and scoped is None:
        return FleetState(seq, FleetAssignment(stable, candidate), None, published)
    scope: dict[str, Any] | None = None
    if raw is None:
        # A rollout scoped to a segment (docs/PROTOCOL.md, "Scoped rollouts"): its candidate
        # and rule are inside it, so a device that does not read it stays on stable.
        if not isinstance(scoped, dict) or candidate is not None:
            return "malformed"
        candidate_ok, candidate = _version(scoped.get("candidate"))
        scope = scoped.get("rule")
        try:
            rule_check(scope)
        except RuleProblem:
            return "malformed"
        if not candidate_ok or candidate is None or not isinstance(scoped.get("segment"), str):
            return "malformed"
        raw = scoped
    if not isinstance(raw, dict):
        return "malformed"
    rollout_id = _whole(raw.get("id"), 1, 2**63 - 1)
    stage = _whole(raw.get("stage"), 0, 100)
    holdback = _whole(raw.get("holdback", 0), 0, 100)
    salt = raw.get("salt")
    if rollout_id is None or stage is None or holdback is None or not isinstance(salt, str):
        return "malformed"
    assignment = FleetAssignment(
        stable,
        candidate,
        salt,
        percent=stage,
        rollout_id=rollout_id,
        holdback=holdback,
        scope=scope,
        scope_name=str(raw.get("segment", "")) if scope is not None else "",
    )
    rollout = {"id": rollout_id, "stage": stage}
    if holdback:
        rollout["holdback"] = holdback
    return FleetState(seq, assignment, rollout, published)


def _document_of(payload: bytes, fleet: str, version: int) -> dict[str, Any] | None:
    """The JSON object in `payload` when it is within the size bound and says it is version
    `version` of `fleet`; else None (a fresh object each call: callers may change it)."""
    if not payload or len(payload) > MAX_DOCUMENT_BYTES:
        return None
    try:
        document = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return None
    if (
        not isinstance(document, dict)
        or document.get("version") != version
        or document.get("fleet", fleet) != fleet
    ):
        return None
    return document


@functools.lru_cache(maxsize=_SHARED_PARSES)
def _document_frame(payload: bytes, fleet: str, version: int, rollout: str) -> str | None:
    """The `policy` frame the socket would carry for this document (`rollout`: the frame's
    rollout as JSON); None when the payload is not version `version` of `fleet` (the
    connection checks the rest). Built once per process for the devices that share it."""
    document = _document_of(payload, fleet, version)
    if document is None:
        return None
    document.pop("type", None)
    return json.dumps({"type": "policy", **document, "rollout": json.loads(rollout)})


@functools.lru_cache(maxsize=_SHARED_PARSES)
def _usable_document(payload: bytes, fleet: str, version: int) -> Mapping[str, Any] | None:
    """The document in `payload` when it is version `version` of `fleet` and checked whole as
    the policy store checks it (size, JSON, version, fleet, every cell), else None. Checked
    once per process for the devices that share it."""
    document = _document_of(payload, fleet, version)
    if document is None:
        return None
    try:
        parse_policy(document)
    except PolicyDocumentError:
        return None
    return document


@functools.lru_cache(maxsize=_SHARED_PARSES)
def _protobuf_document_json(payload: bytes) -> bytes | None:
    """A retained protobuf document (`…/versions/{n}/protobuf`) as the JSON it stands for, or
    None when it is over the size bound or not a `PolicyDocument` (truncated, not protobuf,
    nested past protobuf's limit); unknown fields are ignored, as in JSON. Converted once per
    process for the devices that share it; then checked whole like the JSON one."""
    if not payload or len(payload) > MAX_DOCUMENT_BYTES:
        return None
    try:
        return json_answer(PROTOBUF_MEDIA_TYPE, payload, delta=False)
    except (ValueError, RecursionError):
        return None


def _json_object(payload: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


@functools.lru_cache(maxsize=_SHARED_PARSES)
def _shared(payload: bytes) -> bytes:
    """One copy per process of a document many simulated devices hold."""
    return payload


@dataclass(frozen=True, slots=True)
class _Held:
    etag: str | None
    payload: bytes
    digest: bytes


class HeldDocuments:
    """The documents of a few recent versions (the fleet's stable, candidate and newest
    published, the one the device runs), so that a rollout's start, a later stage or a rollback
    applies without a round trip.

    A document is kept only when checked whole (`_usable_document`), under its version and
    etag with a digest of its bytes; before it is used it is checked again (the same bytes,
    version and etag, and whole): a held copy that fails is forgotten, never applied. At most
    `max_entries`: the least recently used of those the fleet's state no longer names goes
    first (a version published and superseded before any rollout, not the stable a rollback
    needs), then the least recently used.
    """

    __slots__ = ("_entries", "max_entries")

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[int, _Held] = OrderedDict()

    def __contains__(self, version: object) -> bool:
        return version in self._entries

    def versions(self) -> list[int]:
        """The versions held, least recently used first."""
        return list(self._entries)

    def hold(
        self, payload: bytes, fleet: str, version: int, keep: frozenset[int] = frozenset()
    ) -> bool:
        """Keep version `version`'s document, evicting first what `keep` (the versions the
        state names) does not hold; False (nothing kept) when it is not usable."""
        document = _usable_document(payload, fleet, version)
        if document is None or self.max_entries <= 0:
            return False
        etag = document.get("etag")
        self._entries[version] = _Held(
            etag if isinstance(etag, str) else None,
            _shared(payload),
            hashlib.sha256(payload).digest(),
        )
        self._entries.move_to_end(version)
        while len(self._entries) > self.max_entries:
            unnamed = (v for v in self._entries if v not in keep and v != version)
            del self._entries[next(unnamed, next(iter(self._entries)))]
        return True

    def payload(self, fleet: str, version: int) -> bytes | None:
        """Version `version`'s held document, checked again; None when none is held or the
        held one fails (then it is forgotten)."""
        held = self._entries.get(version)
        if held is None:
            return None
        document = (
            _usable_document(held.payload, fleet, version)
            if hashlib.sha256(held.payload).digest() == held.digest
            else None
        )
        if document is None or document.get("etag") != held.etag:
            del self._entries[version]
            return None
        self._entries.move_to_end(version)
        return held.payload

    def forget(self, version: int) -> None:
        """Drop version `version`'s document (the connection refused it)."""
        self._entries.pop(version, None)


async def fetch_document(
    http: httpx.AsyncClient | None,
    base_url: str,
    fleet: str,
    version: int,
    timeout_s: float,
    *,
    since: int | None = None,
    protobuf: bool = False,
) -> bytes | None:
    """Version `version`'s immutable document over HTTP (a CDN may answer it), as JSON, or None
    when the endpoint does not answer it. Without credentials: the document is public to the
    fleet's devices and a request with an Authorization header is not cached by CDNs. With
    `since`, the answer is the delta from that version, or the whole document (docs/PROTOCOL.md,
    "Policy deltas"). With `protobuf` it is asked for in protobuf (`Accept`), and what comes in
    protobuf is written as the JSON it stands for (`negotiation.json_answer`); None when it is
    not the message it says."""
    if http is None:
        return None
    url = base_url + DOCUMENT_PATH.format(fleet=fleet, version=version)
    if since is not None:
        url += f"?since={since}"
    headers = {"Accept": DOCUMENT_ACCEPT} if protobuf else None
    body = bytearray()
    try:
        async with http.stream("GET", url, headers=headers, timeout=timeout_s) as response:
            if response.status_code != 200:
                return None
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_DOCUMENT_BYTES:  # never held whole: refused
                    return None
    except (httpx.HTTPError, OSError):
        return None
    try:
        return json_answer(
            response.headers.get("Content-Type", ""), bytes(body), delta="IM" in response.headers
        )
    except ValueError:
        return None


def _json_properties() -> Properties:
    properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
    properties.PayloadFormatIndicator = 1
    properties.ContentType = "application/json"
    return properties


def _protobuf_properties() -> Properties:
    properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
    properties.PayloadFormatIndicator = 0  # bytes, not UTF-8
    properties.ContentType = PROTOBUF_MEDIA_TYPE
    return properties


# Every publish carries the same properties: built once (paho only packs them), since paho's
# Properties cost more CPU than the rest of a publish.
_JSON: Final = _json_properties()
_PROTOBUF: Final = _protobuf_properties()


class _AckChannel:
    """The connection's answers, as the MQTT link carries them: an `ack` frame becomes
    `{"version": n}` on the device's ack topic (spread: `MqttTransport.ack`); other frames have
    no MQTT form (dropped)."""

    __slots__ = ("_transport",)

    def __init__(self, transport: MqttTransport) -> None:
        self._transport = transport

    async def send(self, text: str, /) -> None:
        try:
            message = json.loads(text)
        except ValueError:
            return
        if isinstance(message, dict) and message.get("type") == "ack":
            self._transport.ack(message.get("version"))


class MqttTransport:
    """Sessions over an MQTT 5 broker: the fleet's retained state in, acks, presence and
    telemetry out (see the module's docstring)."""

    def __init__(self, config: DeviceConfig) -> None:
        if not config.mqtt_url:
            raise ValueError('transport "mqtt" needs DeviceConfig.mqtt_url')
        url = urlsplit(config.mqtt_url)
        self.config = config
        # Telemetry, and the retained documents it takes, in protobuf only when the device's
        # maker chose it (`wire_format`): nothing on the broker answers to negotiate with.
        self.telemetry_wire = TelemetryWire(config.wire_format)
        self._protobuf_documents = config.wire_format == "protobuf"
        # The device's own attributes as rules read them: a rollout scoped to a segment is
        # decided here with the server's own function (edge_sdk.assignment).
        self._attributes = device_attributes(
            platform=config.platform, model=config.model, reported=config.attributes
        )
        self._websockets = url.scheme in ("ws", "wss")
        self._tls = url.scheme in ("mqtts", "wss")
        self._host = url.hostname or "127.0.0.1"
        self._port = url.port or {"mqtt": 1883, "mqtts": 8883, "ws": 80, "wss": 443}[url.scheme]
        self._ws_path = url.path or "/mqtt"
        self._client: mqtt.Client | None = None
        self._fleet: str | None = None
        self._sock: Any = None  # the socket watched on the loop, while attached
        self._loop: asyncio.AbstractEventLoop | None = None
        self._inbox: asyncio.Queue[tuple[str, Any]] | None = None
        self._connected = False  # CONNACK accepted and not lost since
        self._pubacks: dict[int, asyncio.Future[bool]] = {}
        # Retained documents awaited, by topic (a stage change's and a prefetch's may overlap).
        self._waiting: dict[str, asyncio.Future[bytes]] = {}
        # Recent versions' documents: a stage change or rollback to one applies from memory.
        self.held = HeldDocuments(config.mqtt_held_documents)
        self._prefetch: asyncio.Task[None] | None = None
        self._prefetch_state: FleetState | None = None  # the newest state naming versions
        self._prefetch_tried: set[int] = set()  # each version is prefetched once
        # How the versions it ran came: "held" (from memory), "fetched" (when needed),
        # "prefetched" (in the background, before needed).
        self.documents: Counter[str] = Counter()
        self._ack_channel = _AckChannel(self)
        # The ack of the version applied last, not yet published: (version, monotonic time it
        # was applied), and the timer that publishes it (`ack`).
        self._ack_due: tuple[Any, float] | None = None
        self._ack_timer: asyncio.TimerHandle | None = None
        self._pending: FleetState | None = None  # a state whose document is still missing
        self._retry_at = 0.0
        self._retry: Backoff | None = None
        self._access_asked_at: float | None = None  # monotonic time of the last ask
        self.last_seq: int | None = None  # the newest state applied (kept across sessions)
        # The current connection's number in its birth, will and goodbye (docs/PROTOCOL.md,
        # "MQTT", Presence): 0 before the first.
        self.presence_session = 0
        self.session_present = False  # the broker kept this device's session from before
        self.dropped: Counter[str] = Counter()  # messages not trusted, by reason

    # --- the Transport protocol -----------------------------------------------------------------

    @property
    def channel(self) -> Channel | None:
        """The ack channel while connected; None between sessions."""
        return self._ack_channel if self._connected else None

    @property
    def connected(self) -> bool:
        """The broker accepted the session and it has not been lost since."""
        return self._connected

    async def session(self, link: Link, backoff: Backoff) -> SessionEnd:
        """One MQTT connection, from connect to its loss, a stop or going offline."""
        fleet = link.fleet()
        if fleet is None or link.token is None:
            link.last_error = "mqtt: the fleet's slug is not known yet (enrolment names it)"
            return "refused"
        self._fleet = fleet
        self._loop = asyncio.get_running_loop()
        self._inbox = asyncio.Queue()
        if self._retry is None:
            self._retry = Backoff(
                self.config.backoff_base_s, self.config.backoff_max_s, backoff.rng
            )
        client = self._client_for(link, fleet)
        connecting = asyncio.ensure_future(asyncio.to_thread(client.reconnect))
        try:
            await asyncio.shield(connecting)
        except asyncio.CancelledError:  # stopped meanwhile: the socket it opens is closed
            connecting.add_done_callback(functools.partial(_abandoned, client))
            raise
        except (OSError, ssl.SSLError, mqtt.WebsocketConnectionError, ValueError) as error:
            link.last_error = f"mqtt: {error!r}"
            return "failed"
        self._attach(client)
        link.opened()
        try:
            ended = await self._open(client, link)
            if ended is not None:
                return ended
            return await self._receive(client, link, backoff, fleet)
        finally:
            if not (link.stopping and self._connected):  # else `close` says goodbye
                self._drop()

    async def close(self) -> None:
        """A graceful stop: the offline presence on its topic, then DISCONNECT (the
        broker keeps the session and does not publish the will)."""
        client = self._client
        if client is None or self._sock is None:
            return
        with contextlib.suppress(Exception):
            if self._connected:
                if self._ack_due is not None:  # a stopping device still says what it runs
                    self._publish_ack()
                goodbye = self.publish_own("presence", self._offline(), retain=True)
                if goodbye is not None:
                    async with asyncio.timeout(_STOP_WAIT_S):
                        await goodbye
                client.disconnect()
                deadline = time.monotonic() + _STOP_WAIT_S
                while self._sock is not None and time.monotonic() < deadline:
                    await asyncio.sleep(0.01)
        self._drop()

    # --- publishing -----------------------------------------------------------------------------

    def ack(self, version: Any) -> None:
        """The device applied `version`: its ack is published after a random wait in
        [0, `mqtt_ack_jitter_s`] (at once with 0), saying how long it waited (`waited_ms`) so
        that the control plane records when the version was applied. A rollout's cohort thus
        acks over a window instead of all at once, while the broker is still fanning the state
        out to the rest of the fleet. A newer ack replaces one still waiting; one whose wait
        ends while the device is away is published after the next connection's birth."""
        if self._ack_timer is not None:
            self._ack_timer.cancel()
            self._ack_timer = None
        self._ack_due = (version, time.monotonic())
        jitter = self.config.mqtt_ack_jitter_s
        if jitter <= 0 or self._loop is None:
            self._publish_ack()
            return
        rng = self._retry.rng if self._retry is not None else random.Random()
        self._ack_timer = self._loop.call_later(rng.uniform(0, jitter), self._publish_ack)

    def _publish_ack(self) -> None:
        self._ack_timer = None
        if self._ack_due is None:
            return
        version, applied = self._ack_due
        message: dict[str, Any] = {"version": version}
        waited_ms = int((time.monotonic() - applied) * 1000)
        if waited_ms > 0:
            message["waited_ms"] = min(waited_ms, MAX_ACK_WAIT_MS)
        if self.publish_own("ack", message) is not None:
            self._ack_due = None

    def _next_presence_session(self) -> int:
        """A number above every earlier connection's: the wall clock in milliseconds, at least
        one more than the last (so that a will of an earlier connection, landing after this
        one's birth, is seen to be older; also across restarts while the clock is sane)."""
        self.presence_session = max(self.presence_session + 1, time.time_ns() // 1_000_000)
        return self.presence_session

    def _offline(self) -> dict[str, Any]:
        """The connection's last will, and what a graceful stop says."""
        return {"online": False, "session": self.presence_session}

    def publish_own(
        self,
        kind: str,
        message: dict[str, Any] | None,
        *,
        payload: bytes | None = None,
        retain: bool = False,
        properties: Properties | None = None,
    ) -> asyncio.Future[bool] | None:
        """Publish on one of the device's own topics (QoS 1); a future of the PUBACK (True:
        the broker has it), or None when not connected."""
        client, fleet = self._client, self._fleet
        if client is None or fleet is None or not self._connected or self._loop is None:
            return None
        if payload is None:
            payload = json.dumps(message, separators=(",", ":")).encode()
        topic = mqtt_topics.device_topic(
            self.config.mqtt_prefix, fleet, self.config.device_id, kind
        )
        info = client.publish(topic, payload, qos=1, retain=retain, properties=properties or _JSON)
        if info.rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
            return None
        future = self._loop.create_future()
        self._pubacks[info.mid] = future
        return future

    async def publish_telemetry(self, body: bytes) -> bool:
        """A telemetry batch on the device's telemetry topic; True once the broker's PUBACK
        came (the queue may drop it then), False when not connected or no PUBACK in time."""
        payload, content_type = self.telemetry_wire.mqtt_payload(body)
        properties = _PROTOBUF if content_type == PROTOBUF_MEDIA_TYPE else None
        puback = self.publish_own("telemetry", None, payload=payload, properties=properties)
        if puback is None:
            return False
        try:
            async with asyncio.timeout(self.config.http_timeout_s):
                return await puback
        except TimeoutError:
            return False

    # --- the session ----------------------------------------------------------------------------

    def _client_for(self, link: Link, fleet: str) -> mqtt.Client:
        """The paho client (one per transport, so its in-flight QoS 1 messages outlive a
        session), with this session's credentials, will and connect properties."""
        config = self.config
        identity = f"{fleet}/{config.device_id}"
        client = self._client
        if client is None or client._client_id != identity.encode():
            client = mqtt.Client(
                CallbackAPIVersion.VERSION2,
                client_id=identity,
                protocol=mqtt.MQTTv5,
                transport="websockets" if self._websockets else "tcp",
            )
            if self._websockets:
                client.ws_set_options(path=self._ws_path)
            if self._tls:
                client.tls_set_context(
                    ssl.create_default_context(cafile=self.config.mqtt_ca_file or None)
                )
            client.on_connect = self._on_connect
            client.on_disconnect = self._on_disconnect
            client.on_message = self._on_message
            client.on_publish = self._on_publish
            client.on_subscribe = self._on_subscribe
            client.on_unsubscribe = self._on_subscribe
            client.on_socket_close = self._on_socket_close
            client.on_socket_register_write = self._on_register_write
            client.on_socket_unregister_write = self._on_unregister_write
            client.connect_timeout = config.http_timeout_s
            self._client = client
        client.username_pw_set(identity, link.token)
        self._next_presence_session()
        client.will_set(
            mqtt_topics.device_topic(config.mqtt_prefix, fleet, config.device_id, "presence"),
            json.dumps(self._offline(), separators=(",", ":")).encode(),
            qos=1,
            retain=True,
            properties=_JSON,
        )
        connect = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
        connect.SessionExpiryInterval = config.mqtt_session_expiry_s
        # The broker drops (never sends) a message larger than a document could be.
        connect.MaximumPacketSize = MAX_DOCUMENT_BYTES + 64 * 1024
        client.connect_async(
            self._host,
            self._port,
            keepalive=config.mqtt_keepalive_s,
            clean_start=False,
            properties=connect,
        )
        return client

    async def _ask_access(self, link: Link) -> bool:
        """Ask the control plane to give the broker this device's credentials again; True
        when it did (204). At most once per ACCESS_ASK_INTERVAL_S."""
        now = time.monotonic()
        if link.http is None or (
            self._access_asked_at is not None
            and now - self._access_asked_at < ACCESS_ASK_INTERVAL_S
        ):
            return False
        self._access_asked_at = now
        try:
            response = await link.http.post(
                self.config.base_url + ACCESS_PATH,
                headers=link.auth_headers(),
                timeout=self.config.http_timeout_s,
            )
        except (httpx.HTTPError, OSError) as error:
            link.last_error = f"mqtt: asking for broker access: {error!r}"
            return False
        return response.status_code == 204

    async def _open(self, client: mqtt.Client, link: Link) -> SessionEnd | None:
        """Wait for the CONNACK; on success publish the birth and subscribe to the fleet's
        topics. None when the session is open, else how it ended."""
        assert self._inbox is not None
        try:
            async with asyncio.timeout(self.config.http_timeout_s):
                kind, code = await self._inbox.get()
        except TimeoutError:
            link.last_error = "mqtt: no CONNACK"
            return "failed"
        if kind != "connack":
            link.last_error = f"mqtt: connection lost before CONNACK ({code})"
            return "failed"
        if code in _REFUSED_CREDENTIALS:
            # The control plane may restore them (the broker lost the device's client, or it
            # enrolled while the broker was down); else the HTTP API says whether the token is
            # revoked (the connection polls it).
            link.last_error = f"mqtt: the broker refused the credentials ({code:#x})"
            if await self._ask_access(link):
                return "failed"  # the broker knows the device now: reconnect after back-off
            return "refused"
        if code != 0:
            link.last_error = f"mqtt: CONNACK {code:#x}"
            return "failed"
        self._connected = True
        hello = link.hello()
        birth = {
            "online": True,
            **{k: hello.get(k) for k in ("policy_version", "sdk", "platform", "model")},
            **({"attributes": hello["attributes"]} if "attributes" in hello else {}),
            "session": self.presence_session,
        }
        self.publish_own("presence", birth, retain=True)
        if self._ack_due is not None and self._ack_timer is None:
            self._publish_ack()  # its wait ended while the device was away
        prefix, fleet = self.config.mqtt_prefix, self._fleet
        assert fleet is not None
        client.subscribe(
            [
                (mqtt_topics.fleet_state(prefix, fleet), 1),
                (mqtt_topics.fleet_cloud_pressure(prefix, fleet), 1),
            ]
        )
        return None

    async def _receive(
        self, client: mqtt.Client, link: Link, backoff: Backoff, fleet: str
    ) -> SessionEnd:
        """Messages until the connection is lost, stopped or offline; keepalive on each tick."""
        assert self._inbox is not None
        assert self._loop is not None
        in_sync = False
        tick = min(self.config.online_check_s, 1.0)
        while not link.stopping:
            if not link.online():
                link.set_state("offline")
                return "offline"
            try:
                async with asyncio.timeout(tick):
                    kind, value = await self._inbox.get()
            except TimeoutError:
                kind, value = "tick", None
            if client.loop_misc() != MQTTErrorCode.MQTT_ERR_SUCCESS and kind == "tick":
                kind, value = "lost", None
            if kind in ("lost", "disconnect"):
                return self._ended(link, value)
            if kind == "suback" and not in_sync:
                # Subscribed: the retained state follows; the session is up.
                in_sync = await link.on_frame(self._ack_channel, '{"type":"up_to_date"}')
                if in_sync:
                    backoff.reset()
            elif kind == "message":
                topic, payload, expiry = value
                await self._on_fleet_message(link, fleet, topic, payload, expiry)
            # States queued while the device was away arrive together: the newest one counts.
            if (
                self._pending is not None
                and self._inbox.empty()
                and self._loop.time() >= self._retry_at
                and await self._converge(link, fleet)
            ):
                backoff.reset()
        return "closed"

    def _ended(self, link: Link, code: int | None) -> SessionEnd:
        self._connected = False
        if code == _SESSION_TAKEN_OVER:
            link.last_error = "mqtt: the session was taken over by a newer connection (0x8e)"
            return "superseded"
        link.last_error = f"mqtt: connection lost ({code if code is None else hex(code)})"
        return "failed"

    # --- the fleet's messages -------------------------------------------------------------------

    async def _on_fleet_message(
        self, link: Link, fleet: str, topic: str, payload: bytes, expiry: int | None
    ) -> None:
        """One message of the fleet's topics: a newer state becomes the pending one."""
        prefix = self.config.mqtt_prefix
        if topic == mqtt_topics.fleet_state(prefix, fleet):
            state = parse_state(payload, fleet)
            if isinstance(state, str):
                self._drop_message(state, topic)
                return
            pending = self._pending
            newest = pending.seq if pending is not None else self.last_seq
            if newest is not None and state.seq < newest:
                self._drop_message("stale", topic)
            elif newest is None or state.seq > newest:  # the same again (resubscribed): no news
                self._pending = state
                self._retry_at = 0.0
            if newest is None or state.seq >= newest:
                self._prefetch_for(link, fleet, state)
        elif topic == mqtt_topics.fleet_cloud_pressure(prefix, fleet):
            await self._on_cloud_pressure(link, payload, expiry)
        elif topic.startswith(mqtt_topics.fleet_version(prefix, fleet, "")):
            self.dropped["late_document"] += 1  # a retained document after its wait ended
        else:
            self._drop_message("wrong_topic", topic)

    async def _converge(self, link: Link, fleet: str) -> bool:
        """Run the version the pending state assigns this device: True when a document was
        applied (from memory when held, else fetched). A document that cannot be had (or
        applied) is tried again after a back-off."""
        state, retry = self._pending, self._retry
        assert state is not None
        assert retry is not None
        assert self._loop is not None
        version = state.assignment.version_for(self.config.device_id, self._attributes)
        if version is None or version == link.hello().get("policy_version"):
            self._settled(state)
            return False
        self._hold_running(link, fleet)
        rollout = json.dumps(state.rollout)
        was_held = version in self.held
        held = self.held.payload(fleet, version)
        if held is not None:
            frame = _document_frame(held, fleet, version, rollout)
            if frame is not None and await link.on_frame(self._ack_channel, frame):
                self.documents["held"] += 1
                self._settled(state)
                return True
            self.held.forget(version)
        if was_held:  # its held copy failed the checks: never applied, fetched again
            self._drop_message("bad_held_document", f"versions/{version}")
        payload = await self._document(link, fleet, version)
        frame = _document_frame(payload, fleet, version, rollout) if payload else None
        if frame is not None and await link.on_frame(self._ack_channel, frame):
            assert payload is not None
            self.held.hold(payload, fleet, version, self._named())
            self.documents["fetched"] += 1
            self._settled(state)
            return True
        link.last_error = f"mqtt: no usable document for version {version}"
        self._retry_at = self._loop.time() + retry.next_delay()
        return False

    async def _document(self, link: Link, fleet: str, version: int) -> bytes | None:
        """Version `version`'s document, checked whole: the retained one, or the immutable HTTP
        one when the broker has none (or a bad one) within `mqtt_document_wait_s`, made from a
        delta of the document it runs when the server sends one (`_delta_document`). On a weak
        link the delta comes first: bytes count more there than a request to the control plane
        (or its CDN); elsewhere the broker's copy does, which costs the control plane nothing."""
        weak = link.weak_link()
        if weak and (made := await self._delta_document(link, fleet, version)) is not None:
            return made
        payload = await self._retained_document(fleet, version)
        if payload is not None:
            if self._protobuf_documents:
                payload = _protobuf_document_json(payload) or b""
            if payload and _usable_document(payload, fleet, version) is not None:
                return payload
            self._drop_message("bad_document", f"versions/{version}")
        if not weak and (made := await self._delta_document(link, fleet, version)) is not None:
            return made
        fetched = await fetch_document(
            link.http,
            self.config.base_url,
            fleet,
            version,
            self.config.http_timeout_s,
            protobuf=self.config.wire_format != "json",
        )
        if fetched is not None and _usable_document(fetched, fleet, version) is not None:
            return fetched
        return None

    async def _delta_document(self, link: Link, fleet: str, version: int) -> bytes | None:
        """Policy deltas (edge_sdk/delta_sync.py): version `version`'s document made from the
        one the device runs and the delta `?since=` answers (or the whole document it answers
        instead), checked whole; None without deltas or a base, or when none came or applied."""
        held = link.policy_document()
        base = held.get("version") if held is not None else None
        if not link.deltas.enabled or not isinstance(base, int) or base == version:
            return None
        body = await fetch_document(
            link.http,
            self.config.base_url,
            fleet,
            version,
            self.config.http_timeout_s,
            since=base,
            protobuf=self.config.wire_format != "json",
        )
        answer = _json_object(body) if body is not None else None
        if answer is not None and is_delta(answer):
            document = link.deltas.document(held, answer)
            body = (
                json.dumps(document, separators=(",", ":")).encode()
                if document is not None
                else None
            )
        if body is None or _usable_document(body, fleet, version) is None:
            return None
        return body

    def _hold_running(self, link: Link, fleet: str) -> None:
        """Before leaving the version it runs, keep its document (a rollback comes back to it)."""
        document = link.policy_document()
        version = document.get("version") if document is not None else None
        if document is not None and isinstance(version, int) and version not in self.held:
            self.held.hold(json.dumps(dict(document)).encode(), fleet, version, self._named())

    # --- prefetching the versions a state names ---------------------------------------------------

    def _named(self) -> frozenset[int]:
        """The versions the newest state names (held last when documents must go)."""
        state = self._prefetch_state
        return state.named() if state is not None else frozenset()

    def _prefetch_for(self, link: Link, fleet: str, state: FleetState) -> None:
        """A state names a stable, candidate or newest published version whose document is not
        held: take it in the background (after the jitter), once per version, whatever this
        device's bucket. A version published and superseded while a device waits out its
        jitter is never taken: only what the newest state names is."""
        self._prefetch_state = state
        if link.weak_link():  # no documents taken on speculation over a weak link
            return
        idle = self._prefetch is None or self._prefetch.done()
        if idle and self._prefetch_next(link) is not None:
            self._prefetch = asyncio.ensure_future(self._prefetch_documents(link, fleet))

    def _prefetch_next(self, link: Link) -> int | None:
        state = self._prefetch_state
        if state is None:
            return None
        running = link.hello().get("policy_version")
        own = state.assignment.version_for(self.config.device_id, self._attributes)
        # Converging takes `own`; a scoped rollout's candidate is no business of a device
        # outside its segment.
        candidate = (
            state.assignment.candidate if state.assignment.in_scope(self._attributes) else None
        )
        for version in (candidate, state.assignment.stable, state.published):
            if (
                version is not None
                and version not in (running, own)
                and version not in self.held
                and version not in self._prefetch_tried
            ):
                return version
        return None

    async def _prefetch_documents(self, link: Link, fleet: str) -> None:
        jitter = self.config.mqtt_prefetch_jitter_s
        if jitter > 0:
            rng = self._retry.rng if self._retry is not None else random.Random()
            await asyncio.sleep(rng.uniform(0, jitter))
        while self._connected and (version := self._prefetch_next(link)) is not None:
            self._prefetch_tried.add(version)
            try:
                payload = await self._document(link, fleet, version)
            except asyncio.CancelledError:
                self._prefetch_tried.discard(version)  # cut short (a lost session): again later
                raise
            if payload is not None and version not in self.held:
                self.held.hold(payload, fleet, version, self._named())
                self.documents["prefetched"] += 1

    def _settled(self, state: FleetState) -> None:
        self.last_seq = state.seq
        self._pending = None
        if self._retry is not None:
            self._retry.reset()

    async def _retained_document(self, fleet: str, version: int) -> bytes | None:
        """Version `version`'s retained document: subscribe to its topic, take the message,
        unsubscribe (or wait for the one already asked for); None when none came within
        `mqtt_document_wait_s`."""
        client, loop = self._client, self._loop
        if client is None or loop is None or not self._connected:
            return None
        retained = (
            mqtt_topics.fleet_version_protobuf
            if self._protobuf_documents
            else mqtt_topics.fleet_version
        )
        topic = retained(self.config.mqtt_prefix, fleet, version)
        asked = self._waiting.get(topic)
        if asked is not None:  # a prefetch of the same version is on its way: share it
            try:
                async with asyncio.timeout(self.config.mqtt_document_wait_s):
                    return await asyncio.shield(asked) or None
            except (TimeoutError, ConnectionError):
                return None
        future: asyncio.Future[bytes] = loop.create_future()
        self._waiting[topic] = future
        try:
            result, _ = client.subscribe(topic, qos=1)
            if result != MQTTErrorCode.MQTT_ERR_SUCCESS:
                return None
            async with asyncio.timeout(self.config.mqtt_document_wait_s):
                return await asyncio.shield(future) or None
        except (TimeoutError, ConnectionError):
            return None
        finally:
            del self._waiting[topic]
            if not future.done():  # b"": none came (for one that shares the wait)
                future.set_result(b"")
            if self._connected:
                client.unsubscribe(topic)

    async def _on_cloud_pressure(self, link: Link, payload: bytes, expiry: int | None) -> None:
        """The fleet's θ nudge, with the seconds the broker says it has left; an empty
        payload (the nudge ended) clears it."""
        if len(payload) > MAX_PRESSURE_BYTES:
            self._drop_message("oversized", "cloud_pressure")
            return
        if not payload:
            message: Any = {"theta_offset": 0.0, "ttl_s": 0}
        else:
            try:
                message = json.loads(payload)
            except (ValueError, UnicodeDecodeError):
                message = None
            if not isinstance(message, dict):
                self._drop_message("malformed", "cloud_pressure")
                return
            if expiry is not None:
                message["ttl_s"] = expiry
        frame = {"type": "cloud_pressure", "theta_offset": message.get("theta_offset")}
        frame["ttl_s"] = message.get("ttl_s")
        await link.on_frame(self._ack_channel, json.dumps(frame))

    def _drop_message(self, reason: str, topic: str) -> None:
        self.dropped[reason] += 1
        logger.warning(
            "device.mqtt_dropped device=%s reason=%s topic=%s",
            self.config.device_id,
            reason,
            topic,
        )

    # --- paho on the event loop -----------------------------------------------------------------

    def _attach(self, client: mqtt.Client) -> None:
        """Watch the new socket on the loop (the CONNECT may still wait to be written)."""
        loop, sock = self._loop, client.socket()
        assert loop is not None
        assert sock is not None
        self._sock = sock
        _no_delay(sock)
        loop.add_reader(sock, self._readable)
        if client.want_write():
            loop.add_writer(sock, self._writable)

    def _detach(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None and self._loop is not None:
            with contextlib.suppress(ValueError, OSError):
                self._loop.remove_reader(sock)
                self._loop.remove_writer(sock)

    def _drop(self) -> None:
        """End the session's socket without a DISCONNECT (the broker publishes the will)."""
        sock = self._sock
        self._detach()
        self._connected = False
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()
        self._fail_waiters()
        if self._prefetch is not None:
            self._prefetch.cancel()

    def _fail_waiters(self) -> None:
        for puback in self._pubacks.values():
            if not puback.done():
                puback.set_result(False)
        self._pubacks.clear()
        for document in self._waiting.values():
            if not document.done():
                document.set_exception(ConnectionError("mqtt connection lost"))

    def _readable(self) -> None:
        client = self._client
        if client is None:
            return
        ok = client.loop_read() == MQTTErrorCode.MQTT_ERR_SUCCESS
        while ok and self._sock is not None and _pending(self._sock):
            ok = client.loop_read() == MQTTErrorCode.MQTT_ERR_SUCCESS

    def _writable(self) -> None:
        if self._client is not None:
            self._client.loop_write()

    def _on_register_write(self, client: mqtt.Client, userdata: Any, sock: Any) -> None:
        # Called on the loop's thread only once attached (the connect's worker thread finds
        # no socket attached; `_attach` then watches for writes itself).
        if sock is self._sock and self._loop is not None:
            self._loop.add_writer(sock, self._writable)

    def _on_unregister_write(self, client: mqtt.Client, userdata: Any, sock: Any) -> None:
        if sock is self._sock and self._loop is not None:
            with contextlib.suppress(ValueError, OSError):
                self._loop.remove_writer(sock)

    def _on_socket_close(self, client: mqtt.Client, userdata: Any, sock: Any) -> None:
        if sock is self._sock:
            self._detach()

    def _put(self, kind: str, value: Any) -> None:
        if self._inbox is not None:
            self._inbox.put_nowait((kind, value))

    def _on_connect(
        self, client: mqtt.Client, userdata: Any, flags: Any, reason: ReasonCode, properties: Any
    ) -> None:
        self.session_present = bool(getattr(flags, "session_present", False))
        self._put("connack", int(reason.value))

    def _on_disconnect(
        self, client: mqtt.Client, userdata: Any, flags: Any, reason: ReasonCode, properties: Any
    ) -> None:
        self._connected = False
        self._fail_waiters()
        self._put("disconnect", int(reason.value) if isinstance(reason, ReasonCode) else None)

    def _on_message(self, client: mqtt.Client, userdata: Any, message: mqtt.MQTTMessage) -> None:
        topic, payload = message.topic, bytes(message.payload)
        waiting = self._waiting.get(topic)
        if waiting is not None:
            if not waiting.done():
                waiting.set_result(payload)
            return
        expiry = getattr(message.properties, "MessageExpiryInterval", None)
        self._put("message", (topic, payload, expiry if isinstance(expiry, int) else None))

    def _on_publish(
        self, client: mqtt.Client, userdata: Any, mid: int, reason: ReasonCode, properties: Any
    ) -> None:
        future = self._pubacks.pop(mid, None)
        if future is not None and not future.done():
            future.set_result(not reason.is_failure)

    def _on_subscribe(
        self,
        client: mqtt.Client,
        userdata: Any,
        mid: int,
        reasons: list[ReasonCode],
        properties: Any,
    ) -> None:
        self._put("suback", mid)


def _pending(sock: Any) -> bool:
    """TLS (and paho's WebSocket wrapper over TLS) may hold decrypted bytes the selector
    cannot see."""
    pending = getattr(sock, "pending", None)
    return callable(pending) and pending() > 0


def _no_delay(sock: Any) -> None:
    """TCP_NODELAY: a device's packets are small and answer the broker's; Nagle's algorithm
    would hold one behind the broker's delayed ACK (~40 ms: a document fetched in 44 ms
    instead of 1). Under paho's WebSocket wrapper, its socket."""
    raw = sock if isinstance(sock, socket.socket) else getattr(sock, "_socket", None)
    if isinstance(raw, socket.socket) and raw.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _abandoned(client: mqtt.Client, connecting: asyncio.Future[Any]) -> None:
    """A connect the device stopped waiting for: its socket, once open, is closed."""
    if connecting.cancelled() or connecting.exception() is not None:
        return
    sock = client.socket()
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.close()
