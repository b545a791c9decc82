"""`Connection`: a device's link to the control plane, behind `Device`.

It holds the device's token (enrolment, `state_dir/token`, the `revoked` marker), its
connection state, and the connection loop: enrol, keep a session of its `Transport` open
(the WebSocket by default, or MQTT; edge_sdk.transport says what one must do), fall back to
polling the policy over HTTP when the socket is refused or keeps failing, and back off
between attempts. The frames a session receives are the protocol's messages (PROTOCOL.md):
a policy goes to `PolicySync` and is acked, cloud pressure to the router, errors are counted.
It also makes the device's HTTP calls (enrolment, the policy poll, telemetry and feedback
posts) with one `httpx.AsyncClient`, shared by thousands of devices when the app passes one.

Connection states (`Device.connection_state`):
- "connecting": enrolling or opening the socket (also while backing off after a failure);
- "connected": the socket is open and the server answered `hello`;
- "polling": the socket upgrade was refused; the policy is polled with ETag instead;
- "offline": `readings().online` is False: no network I/O at all;
- "revoked": the server refused the device token (401 / close 4401): nothing more is tried;
- "stopped": not started, stopped, or enrolment refused (see `last_error`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Callable, Mapping
from typing import Any, Final

import httpx

from edge_sdk.backoff import Backoff
from edge_sdk.config import DeviceConfig
from edge_sdk.delta_sync import DELTA_IM, PolicyDeltas, weak_link
from edge_sdk.feedback import FEEDBACK_PATH
from edge_sdk.listeners import Listeners
from edge_sdk.policy_sync import PolicySync
from edge_sdk.router import Router
from edge_sdk.storage import atomic_write, read_bytes, remove
from edge_sdk.task import Readings
from edge_sdk.telemetry import PostResult
from edge_sdk.transport import CarriesTelemetry, Channel, DeviceRevoked, Transport
from edge_sdk.wire.negotiation import DOCUMENT_ACCEPT, TelemetryWire, document_of

__all__ = ["STATES", "Connection", "DeviceRevoked", "EnrolmentRefused"]

logger = logging.getLogger(__name__)

STATES: Final = ("connecting", "connected", "polling", "offline", "revoked", "stopped")
TOKEN_FILE: Final = "token"
FLEET_FILE: Final = "fleet"
REVOKED_FILE: Final = "revoked"
SOCKET_FAILURES_BEFORE_POLL: Final = 3
TELEMETRY_PATH: Final = "/api/v1/telemetry"
POLICY_PATH: Final = "/api/v1/devices/me/policy"
ENROL_PATH: Final = "/api/v1/devices/enroll"


class EnrolmentRefused(Exception):
    """The server refused the enrolment (a bad fleet key, a bad device id)."""


class Connection:
    """The token, the connection state and loop, and the HTTP calls of one device."""

    __slots__ = (
        "_listeners",
        "_owns_http",
        "_policy",
        "_readings",
        "_rng",
        "_router",
        "_sessions_opened",
        "config",
        "deltas",
        "enrolled_fleet",
        "http",
        "last_error",
        "reconnects",
        "revoked",
        "server_errors",
        "state",
        "stopping",
        "telemetry_wire",
        "token",
        "transport",
    )

    def __init__(
        self,
        config: DeviceConfig,
        *,
        transport: Transport,
        readings: Callable[[], Readings],
        policy: PolicySync,
        router: Router,
        listeners: Listeners,
        rng: random.Random,
        http: httpx.AsyncClient | None,
    ) -> None:
        self.config = config
        self.transport = transport
        self._readings = readings
        self._policy = policy
        self._router = router
        self._listeners = listeners
        self._rng = rng
        self.http = http
        self._owns_http = False
        self.state = "stopped"
        self.last_error: str | None = None
        self.token: str | None = None
        self.enrolled_fleet: str | None = None  # the fleet's slug, as enrolment answered it
        self.revoked = False
        self.stopping = False
        self.server_errors = 0  # `error` frames received
        # Protobuf and compression of telemetry, once the server says it reads them.
        self.telemetry_wire = TelemetryWire(config.wire_format)
        self.reconnects = 0  # sessions opened after the first
        self._sessions_opened = 0
        self.deltas = PolicyDeltas(device_id=config.device_id, enabled=config.policy_deltas)

    # --- what the device and its transport use ------------------------------------------------

    def online(self) -> bool:
        """The app's `readings().online` (False when the readings raise)."""
        try:
            return bool(self._readings().online)
        except Exception:
            logger.warning("device.readings_failed device=%s", self.config.device_id, exc_info=True)
            return False

    def weak_link(self) -> bool:
        """The app's readings say the link is weak (edge_sdk.delta_sync.weak_link)."""
        try:
            return weak_link(self._readings(), self.config)
        except Exception:
            return False

    def set_state(self, state: str) -> None:
        """Change the connection state; listeners hear of a change."""
        if state != self.state:
            previous, self.state = self.state, state
            self._listeners.emit("state", {"state": state, "previous": previous})

    def auth_headers(self) -> dict[str, str]:
        """The device token as a bearer header."""
        return {"Authorization": f"Bearer {self.token}"}

    def fleet(self) -> str | None:
        """The fleet's slug: configured, answered by enrolment, or named by the stored policy."""
        if self.config.fleet is not None:
            return self.config.fleet
        if self.enrolled_fleet is not None:
            return self.enrolled_fleet
        current = self._policy.store.current
        named = current.document.get("fleet") if current is not None else None
        return named if isinstance(named, str) and named else None

    def hello(self) -> dict[str, Any]:
        """The first message of a session, with the version the device runs now."""
        config = self.config
        return {
            "type": "hello",
            "device_id": config.device_id,
            "policy_version": self._policy.store.version,
            "sdk": config.sdk,
            "platform": config.platform,
            "model": config.model,
            **({"attributes": dict(config.attributes)} if config.attributes else {}),
            "delta": self.deltas.offered,  # Policy deltas: a `policy_delta` frame is welcome
        }

    def policy_document(self) -> Mapping[str, Any] | None:
        """The document of the version the device runs now (None before the first)."""
        return self._policy.store.document

    def opened(self) -> None:
        """A session's channel opened: every one after the first is a reconnect."""
        self._sessions_opened += 1
        self.deltas.session_opened()
        if self._sessions_opened > 1:
            self.reconnects += 1

    # --- start, stop, revocation ---------------------------------------------------------------

    def load_credentials(self) -> None:
        """The token and the revoked marker a previous run left in state_dir."""
        state_dir = self.config.state_dir
        if state_dir is not None:
            raw_token = read_bytes(state_dir / TOKEN_FILE)
            self.token = raw_token.decode().strip() or None if raw_token else None
            self.revoked = (state_dir / REVOKED_FILE).exists()
            raw_fleet = read_bytes(state_dir / FLEET_FILE)
            self.enrolled_fleet = raw_fleet.decode().strip() or None if raw_fleet else None

    def open_http(self) -> None:
        """An HTTP client of its own unless the app passed one."""
        if self.http is None:
            self.http = httpx.AsyncClient(timeout=self.config.http_timeout_s)
            self._owns_http = True

    async def close_http(self) -> None:
        """Close the HTTP client if it is the connection's own."""
        if self._owns_http and self.http is not None:
            await self.http.aclose()
            self.http = None
            self._owns_http = False

    def revoke(self, reason: str) -> None:
        """The token is refused: forget it, and remember on disk never to enrol again."""
        self.revoked = True
        self.last_error = reason
        self.token = None
        logger.error("device.revoked device=%s reason=%s", self.config.device_id, reason)
        state_dir = self.config.state_dir
        if state_dir is not None:
            try:
                atomic_write(state_dir / REVOKED_FILE, reason.encode())
                remove(state_dir / TOKEN_FILE)
            except OSError:
                logger.warning("device.revoked_not_saved device=%s", self.config.device_id)

    # --- the connection loop -------------------------------------------------------------------

    async def run(self) -> None:
        """Enrol, then keep a session open (or poll) until stopped; DeviceRevoked ends it."""
        config = self.config
        backoff = Backoff(config.backoff_base_s, config.backoff_max_s, self._rng)
        while not self.stopping:
            if not self.online():
                self.set_state("offline")
                await asyncio.sleep(config.online_check_s)
                continue
            if self.state != "polling":
                self.set_state("connecting")
            if self.token is None:
                try:
                    await self._enrol()
                except EnrolmentRefused as error:
                    self.last_error = str(error)
                    logger.error("device.enrol_refused device=%s error=%s", config.device_id, error)
                    self.set_state("stopped")
                    return
                except (httpx.HTTPError, OSError, ValueError) as error:
                    self.last_error = f"enrol: {error!r}"
                    await asyncio.sleep(backoff.next_delay())
                    continue
            ended = await self.transport.session(self, backoff)
            if ended == "superseded":
                # Another connection of this device id replaced ours (a second instance
                # with the same identity): reconnecting would only fight it.
                logger.error("device.superseded device=%s", config.device_id)
                self.set_state("stopped")
                return
            if ended == "refused":
                # A proxy or the server will not upgrade: poll, and try the socket later.
                await self.poll_once()
                self.set_state("polling")
                await asyncio.sleep(config.poll_interval_s)
            elif ended != "offline":
                if self.state == "connected":
                    self.set_state("connecting")  # lost: back off, then reconnect
                # A socket that keeps failing to open (a network that drops WebSocket
                # handshakes without refusing them) still lets plain HTTP through at
                # times: try one poll every few failures, so the policy stays current.
                if (
                    ended == "failed"
                    and backoff.attempt >= SOCKET_FAILURES_BEFORE_POLL
                    and backoff.attempt % SOCKET_FAILURES_BEFORE_POLL == 0
                    and await self.poll_once()
                ):
                    self.set_state("polling")
                await asyncio.sleep(backoff.next_delay())

    async def close(self) -> None:
        """Close the transport's open channel, if any."""
        await self.transport.close()

    async def _enrol(self) -> None:
        assert self.http is not None
        config = self.config
        response = await self.http.post(
            f"{config.base_url}{ENROL_PATH}",
            json={
                "fleet_key": config.fleet_key,
                "device_id": config.device_id,
                "platform": config.platform,
                "model": config.model,
                "sdk": config.sdk,
                **({"attributes": dict(config.attributes)} if config.attributes else {}),
            },
            timeout=config.http_timeout_s,
        )
        if response.status_code == 201:
            answer = response.json()
            token = answer["device_token"]
            if not isinstance(token, str) or not token:
                raise ValueError("enrolment answer without a device_token")
            fleet = answer.get("fleet")
            self.enrolled_fleet = fleet if isinstance(fleet, str) and fleet else None
            self.token = token
            if config.state_dir is not None:
                if self.enrolled_fleet is not None:
                    await asyncio.to_thread(
                        atomic_write, config.state_dir / FLEET_FILE, self.enrolled_fleet.encode()
                    )
                await asyncio.to_thread(atomic_write, config.state_dir / TOKEN_FILE, token.encode())
            return
        if response.status_code in (400, 401, 403, 404):
            raise EnrolmentRefused(
                f"enrolment refused ({response.status_code}): {response.text[:300]}"
            )
        raise httpx.HTTPStatusError(
            f"enrolment answered {response.status_code}",
            request=response.request,
            response=response,
        )

    async def poll_once(self, *, delta: bool = True) -> bool:
        """`GET /api/v1/devices/me/policy` with If-None-Match; applies a new version (from a
        delta, `226 IM Used`, when the server sends one: asked with `A-IM`).

        True when the server answered (200, 226, 304, or 404: no policy yet).
        """
        assert self.http is not None
        store = self._policy.store
        headers = self.auth_headers()
        if self.config.wire_format != "json":
            headers["Accept"] = DOCUMENT_ACCEPT  # protobuf when the server has it
        if store.etag:
            headers["If-None-Match"] = store.etag
            if delta and self.deltas.enabled:
                headers["A-IM"] = DELTA_IM
        try:
            response = await self.http.get(
                f"{self.config.base_url}{POLICY_PATH}",
                headers=headers,
                timeout=self.config.http_timeout_s,
            )
        except (httpx.HTTPError, OSError) as error:
            self.last_error = f"poll: {error!r}"
            return False
        if response.status_code == 401:
            raise DeviceRevoked("policy poll answered 401")
        if response.status_code in (200, 226):
            try:
                document = document_of(
                    response.headers.get("Content-Type", ""),
                    response.content,
                    delta=response.status_code == 226,
                )
            except ValueError:
                self._policy.errors += 1
                return True
            if response.status_code == 226:  # Policy deltas (edge_sdk/delta_sync.py)
                document = self.deltas.document(store.document, document)
                if document is None:  # not applied: the whole document, asked without A-IM
                    return await self.poll_once(delta=False)
            if (
                isinstance(document, dict)
                and document.get("version") != store.version
                and self._policy.receive(document, None, response.headers.get("ETag"))
            ):
                self._listeners.emit(
                    "policy", {"version": store.version, "rollout": None, "via": "polling"}
                )
            return True
        if response.status_code in (304, 404):
            return True
        self.last_error = f"poll answered {response.status_code}"
        return False

    # --- frames from the server ----------------------------------------------------------------

    async def on_frame(self, channel: Channel, frame: str) -> bool:
        """Handle one server frame; True when it answered our hello (we are in sync)."""
        try:
            message = json.loads(frame)
        except ValueError:
            self.server_errors += 1
            logger.warning("device.bad_frame device=%s", self.config.device_id)
            return False
        if not isinstance(message, dict):
            return False
        kind = message.get("type")
        if kind == "policy_delta":  # Policy deltas (edge_sdk/delta_sync.py)
            document = self.deltas.from_frame(self._policy.store.document, message)
            if document is None:  # ask for the whole document: hello again, without deltas
                await channel.send(json.dumps(self.hello()))
                return False
            message, kind = {**document, "rollout": message.get("rollout")}, "policy"
        if kind == "policy":
            rollout = message.get("rollout")
            document = {k: v for k, v in message.items() if k not in ("type", "rollout")}
            if not self._policy.receive(document, rollout if isinstance(rollout, dict) else None):
                return False
            store = self._policy.store
            await channel.send(json.dumps({"type": "ack", "version": store.version}))
            self.set_state("connected")
            self._listeners.emit(
                "policy", {"version": store.version, "rollout": rollout, "via": "socket"}
            )
            return True
        if kind == "up_to_date":
            self.set_state("connected")
            return True
        if kind == "cloud_pressure":
            self._apply_cloud_pressure(message)
        elif kind == "error":
            self.server_errors += 1
            logger.warning(
                "device.server_error device=%s code=%s detail=%s",
                self.config.device_id,
                message.get("code"),
                message.get("detail"),
            )
        # Other types are new protocol messages this SDK does not know: ignored.
        return False

    def _apply_cloud_pressure(self, message: Mapping[str, Any]) -> None:
        offset, ttl = message.get("theta_offset"), message.get("ttl_s")
        if (
            isinstance(offset, bool)
            or not isinstance(offset, int | float)
            or isinstance(ttl, bool)
            or not isinstance(ttl, int | float)
            or not -1.0 <= offset <= 1.0
            or not 0 <= ttl < 10**7
        ):
            self.server_errors += 1
            logger.warning(
                "device.bad_cloud_pressure device=%s message=%s", self.config.device_id, message
            )
            return
        self._router.set_cloud_pressure(float(offset), float(ttl))
        self._listeners.emit("cloud_pressure", {"theta_offset": float(offset), "ttl_s": float(ttl)})

    # --- telemetry and feedback posts (the queues' posters) ------------------------------------

    async def post_telemetry(self, body: bytes) -> PostResult:
        """`POST /api/v1/telemetry` with a batch (status 0: no answer, or no token yet); on a
        transport that carries telemetry (MQTT) the batch goes through it instead, and counts
        as accepted (202) once the broker has it."""
        transport = self.transport
        if isinstance(transport, CarriesTelemetry):
            if self.token is None or not await transport.publish_telemetry(body):
                return 0, b"", None
            return 202, b"", None
        return await self._post(TELEMETRY_PATH, body, "telemetry")

    async def post_feedback(self, body: bytes) -> PostResult:
        """`POST /api/v1/telemetry/feedback` with a batch (like `post_telemetry`)."""
        return await self._post(FEEDBACK_PATH, body, "feedback")

    async def _post(self, path: str, body: bytes, what: str) -> PostResult:
        if self.http is None or self.token is None:
            return 0, b"", None
        content, headers = body, {"Content-Type": "application/json"}
        if path == TELEMETRY_PATH:
            content, headers = self.telemetry_wire.http_body(body)
        try:
            response = await self.http.post(
                f"{self.config.base_url}{path}",
                content=content,
                headers={**self.auth_headers(), **headers},
                timeout=self.config.http_timeout_s,
            )
        except (httpx.HTTPError, OSError) as error:
            self.last_error = f"{what}: {error!r}"
            return 0, b"", None
        if path == TELEMETRY_PATH:
            self.telemetry_wire.learn(response.headers)
        return response.status_code, response.content, response.headers.get("Retry-After")
