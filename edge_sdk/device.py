"""`Device`: the client of device protocol v1 that an app embeds.

Per device there are at most two background tasks: the connection loop (enrol, socket,
polling fallback, back-off) and the telemetry loop (batches, resends, the offline task queue).
Thousands of devices can share one event loop and one `httpx.AsyncClient`.

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
import contextlib
import json
import logging
import random
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Final

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI

from edge_sdk.cache import ResultCache
from edge_sdk.config import DeviceConfig
from edge_sdk.decision import Cell, Decision, FallbackKind, Route, fallback_route
from edge_sdk.feedback import FEEDBACK_PATH, FeedbackQueue, feedback_item
from edge_sdk.policy import PolicyDocumentError, PolicyStore
from edge_sdk.router import Router
from edge_sdk.storage import atomic_write, read_bytes, remove
from edge_sdk.task import (
    Answer,
    CloudInfer,
    DeviceInfer,
    Outcome,
    Readings,
    RefineInfer,
    RefineOutcome,
    RefineRequest,
    Task,
)
from edge_sdk.telemetry import (
    PostResult,
    TelemetryQueue,
    TelemetryRevoked,
    build_event,
    new_event_id,
    refine_fields,
)

__all__ = ["STATES", "Backoff", "Device", "Listener"]

logger = logging.getLogger(__name__)

STATES: Final = ("connecting", "connected", "polling", "offline", "revoked", "stopped")
TOKEN_FILE: Final = "token"
REVOKED_FILE: Final = "revoked"
CLOSE_UNAUTHORISED: Final = 4401
CLOSE_SUPERSEDED: Final = 4409
MAX_FRAME_BYTES: Final = 4 * 1024 * 1024
OFFLINE_DRAIN_CONCURRENCY: Final = 8
SOCKET_FAILURES_BEFORE_POLL: Final = 3
SHADOW_WINDOW_S: Final = 60.0  # shadow_refines_per_minute counts starts in this window

Listener = Callable[[str, dict[str, Any]], None]
# Back-off jitter for devices given no rng of their own (a Random costs 2.5 KiB each).
_JITTER: Final = random.Random()
_MISSING: Final[Any] = object()


class DeviceRevoked(Exception):
    """The server refused the device token."""


class EnrolmentRefused(Exception):
    """The server refused the enrolment (a bad fleet key, a bad device id)."""


class Backoff:
    """Jittered exponential back-off: the n-th wait is in [cap/2, cap], cap = base*2^n <= max."""

    __slots__ = ("attempt", "base_s", "max_s", "rng")

    def __init__(self, base_s: float, max_s: float, rng: random.Random) -> None:
        self.base_s = base_s
        self.max_s = max_s
        self.rng = rng
        self.attempt = 0

    def next_delay(self) -> float:
        """The next wait; each call doubles the cap until max_s."""
        cap = min(self.max_s, self.base_s * 2 ** min(self.attempt, 32))
        self.attempt += 1
        # Half fixed, half random: devices that lost the server together come back spread out.
        return float(cap / 2 + self.rng.uniform(0, cap / 2))

    def reset(self) -> None:
        """After a success: the next failure waits the shortest again."""
        self.attempt = 0


class Device:
    """One device: policy, routing, execution with fallback, cache, telemetry, connection."""

    def __init__(
        self,
        config: DeviceConfig,
        *,
        readings: Callable[[], Readings],
        device_infer: DeviceInfer,
        cloud_infer: CloudInfer,
        refine_infer: RefineInfer | None = None,
        http: httpx.AsyncClient | None = None,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.perf_counter,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        # `clock` (seconds, monotonic) times tasks and cache TTLs; `wall_clock` (Unix seconds)
        # stamps telemetry. A simulation on a virtual clock passes its own (simulate.virtual).
        self._clock = clock
        self._wall_clock = wall_clock
        self.config = config
        self._readings = readings
        self._device_infer = device_infer
        self._cloud_infer = cloud_infer
        # Refines a draft knowing it (draft_refine, shadow refines); without it draft_refine
        # calls cloud_infer as before and no shadow refine runs.
        self._refine_infer = refine_infer
        self._http = http
        self._owns_http = False
        self._rng = rng if rng is not None else _JITTER
        state_dir = config.state_dir
        self.policy = PolicyStore(state_dir)
        self.router = Router(self.policy, readings=readings)
        self.telemetry = TelemetryQueue(
            max_events=config.telemetry_max_events,
            batch_max=config.telemetry_batch_max,
            state_dir=state_dir,
            poster=self._post_telemetry,
            on_full=self._wake_telemetry,
        )
        self.feedback_queue = FeedbackQueue(
            max_events=config.feedback_max_items,
            batch_max=config.feedback_batch_max,
            state_dir=state_dir,
            poster=self._post_feedback,
            on_full=self._wake_telemetry,
        )
        self.cache = ResultCache(config.cache_max_entries, clock=clock)
        # Shadow refines (PROTOCOL.md extensions): running ones, recent starts, what became
        # of them.
        self._shadow_tasks: set[asyncio.Task[None]] = set()
        self._shadow_starts: deque[float] = deque()
        # Events of running shadow refines, by event id, until recorded (exactly once).
        self._shadow_events: dict[str, dict[str, Any]] = {}
        # Feedback on an answer whose event waits for its shadow refine: queued after it.
        self._feedback_after_shadow: dict[str, dict[str, Any]] = {}
        self.shadow_started = 0  # shadow refines started
        self.shadow_over_budget = 0  # drawn by the cell's rate, skipped: over the SDK's budget
        self.shadow_failed = 0  # the cloud failed or timed out: event sent without the outcome
        self._feedback_retry_at = 0.0  # event-loop time before which feedback is not retried
        self.connection_state = "stopped"
        self.last_error: str | None = None
        self.token: str | None = None
        self.offline_dropped = 0  # queued cloud-bound tasks pushed out while the queue was full
        self.server_errors = 0  # `error` frames received
        self.policy_errors = 0  # policy documents that could not be applied
        self.reconnects = 0  # sockets opened after the first
        self._offline_tasks: deque[Task] = deque()
        self._listeners: list[Listener] = []
        self._loops: list[asyncio.Task[None]] = []
        self._ws: ClientConnection | None = None
        self._telemetry_wake: asyncio.Event | None = None
        self._stopping = False
        self._revoked = False
        self._policy_saved: asyncio.Future[None] | None = None
        self._state_loaded = False
        self._sockets_opened = 0

    # --- public ------------------------------------------------------------------------------

    @property
    def cloud_pressure(self) -> float:
        """The pushed theta offset in force now (0 once its TTL has passed)."""
        return self.router.cloud_pressure

    @property
    def offline_pending(self) -> int:
        """Cloud-bound background tasks held until the device is online again."""
        return len(self._offline_tasks)

    def add_listener(self, fn: Listener) -> None:
        """Call fn(event, details) on "policy", "cloud_pressure", "state" and "queued_result"."""
        self._listeners.append(fn)

    async def start(self) -> None:
        """Load the stored token, policy and telemetry; start the connection and telemetry loops."""
        if self._loops:
            return
        self._stopping = False
        state_dir = self.config.state_dir
        if not self._state_loaded:  # a restart of the same object keeps what it has in memory
            self._state_loaded = True
            if state_dir is not None:
                raw_token = read_bytes(state_dir / TOKEN_FILE)
                self.token = raw_token.decode().strip() or None if raw_token else None
                self._revoked = (state_dir / REVOKED_FILE).exists()
            if self.policy.current is None:
                self.policy.load()
            self.telemetry.load()
            self.feedback_queue.load()
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=self.config.http_timeout_s)
            self._owns_http = True
        self._telemetry_wake = asyncio.Event()
        if self._revoked:
            self._set_state("revoked")
            return
        name = f"edge-sdk:{self.config.device_id}"
        self._loops = [
            asyncio.create_task(self._connection_loop(), name=f"{name}:connection"),
            asyncio.create_task(self._telemetry_loop(), name=f"{name}:telemetry"),
        ]

    async def stop(self) -> None:
        """Close the socket, try a last telemetry flush, persist what is left."""
        self._stopping = True
        loops, self._loops = self._loops, []
        for loop_task in loops:
            loop_task.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        await self._close_socket()
        # Shadow refines still running are cut: their events go without the outcome.
        await self.cancel_shadow_refines()
        if self.token is not None and not self._revoked and self._online():
            for queue in (self.telemetry, self.feedback_queue):
                if queue.pending:
                    with contextlib.suppress(Exception):
                        async with asyncio.timeout(self.config.http_timeout_s):
                            await queue.flush()
        await self.telemetry.save_async()
        await self.feedback_queue.save_async()
        if self._policy_saved is not None:
            await asyncio.shield(self._policy_saved)
        if self._owns_http and self._http is not None:
            await self._http.aclose()
            self._http = None
            self._owns_http = False
        if not self._revoked:
            self._set_state("stopped")

    def feedback(self, event_id: str, quality: float) -> None:
        """Report the app's quality (0-1) of the answer of an earlier task, by its event id
        (`Outcome.event_id`), however late: queued durably, sent after telemetry, resent until
        the server acknowledges it. ValueError for an id that is not a uuid or a quality
        outside [0, 1]."""
        item = feedback_item(event_id, quality)
        if item["event_id"] in self._shadow_events:
            # Its event is not recorded yet (a shadow refine runs): feedback follows it.
            self._feedback_after_shadow[item["event_id"]] = item
            return
        self.feedback_queue.record(item)

    @property
    def shadow_pending(self) -> int:
        """Shadow refines running in the background now."""
        return len(self._shadow_tasks)

    async def run(self, task: Task) -> Outcome:
        """Route the task, run it where the decision says, fall back, cache, record telemetry."""
        readings = self._readings()
        decision = self.router.route(task, readings)
        pressure = self.router.pressure_offset  # the offset route() used (0 once lapsed)
        policy = self.policy.current
        cell = self.policy.cells.get((task.task_type, task.latency_budget, task.privacy_tier))
        version = policy.version if policy is not None else None
        if decision.queue_until_online:
            self._offline_tasks.append(task)
            if len(self._offline_tasks) > self.config.offline_queue_max:
                self._offline_tasks.popleft()
                self.offline_dropped += 1
            return Outcome(
                decision=decision,
                route=decision.route,
                fallback="none",
                latency_ms=0.0,
                cache_hit=False,
                ok=True,
                queued=True,
                result=None,
                policy_version=version,
            )
        started = self._clock()
        cache_key: Any = None
        cached: Any = _MISSING
        if task.cache_key is not None and cell is not None and cell.cache_ttl_s > 0:
            cache_key = (
                self.policy.generation,
                task.task_type,
                task.latency_budget,
                task.privacy_tier,
                task.cache_key,
            )
            cached = self.cache.get(cache_key, _MISSING)
        cache_hit = cached is not _MISSING
        route: Route
        fallback: FallbackKind
        signals = _Signals()
        if cache_hit:  # answered from the cache: nothing of the task left the device
            route, fallback, ok, result, uploaded = decision.route, "none", True, cached, False
        else:
            route, fallback, ok, answer, uploaded = await self._execute(
                task, decision, cell, readings.online
            )
            result = signals.read(answer)
            if route != "draft_refine":  # only a refine of a draft says whether it changed
                signals.changed = signals.edit_ratio = None
            if ok and cache_key is not None and cell is not None:
                self.cache.put(cache_key, result, cell.cache_ttl_s)
        shadow = (
            not cache_hit
            and ok
            and route == "device"
            and fallback == "none"
            and decision.route == "device"
            and readings.online
            and cell is not None
            and version is not None
            and self._shadow_drawn(task, cell)
        )
        return self._finish(
            task,
            readings,
            decision,
            cell,
            version,
            started,
            route,
            fallback,
            ok,
            result,
            cache_hit=cache_hit,
            uploaded=uploaded,
            cloud_pressure=pressure,
            signals=signals,
            shadow=shadow,
        )

    # --- shadow refines ----------------------------------------------------------------------

    def _shadow_drawn(self, task: Task, cell: Cell) -> bool:
        """Whether this device answer is also refined by the cloud: drawn with the cell's
        `shadow_refine_rate` (never where the cell forbids uploads), within the SDK's budget,
        and only with a `refine_infer` to do it."""
        if self._refine_infer is None or not cell.upload_allowed:
            return False
        rate = self.policy.shadow_refine_rate(task)
        if rate <= 0 or self._rng.random() >= rate:
            return False
        now = self._clock()
        starts = self._shadow_starts
        while starts and now - starts[0] >= SHADOW_WINDOW_S:
            starts.popleft()
        if len(starts) >= self.config.shadow_refines_per_minute:
            self.shadow_over_budget += 1
            return False
        starts.append(now)
        return True

    def _start_shadow_refine(
        self, request: RefineRequest, cell: Cell, event: dict[str, Any]
    ) -> None:
        self.shadow_started += 1
        self._shadow_events[event["event_id"]] = event
        shadow = asyncio.get_running_loop().create_task(
            self._shadow_refine(request, cell, event),
            name=f"edge-sdk:{self.config.device_id}:shadow",
        )
        self._shadow_tasks.add(shadow)
        shadow.add_done_callback(self._shadow_tasks.discard)

    async def _shadow_refine(
        self, request: RefineRequest, cell: Cell, event: dict[str, Any]
    ) -> None:
        """Refine a draft already given as the answer, then record its event: with the
        outcome, or without it when the cloud failed, timed out (the cell's cloud_timeout_ms)
        or the device stopped meanwhile."""
        assert self._refine_infer is not None
        changed: bool | None = None
        edit_ratio: float | None = None
        try:
            async with asyncio.timeout(cell.cloud_timeout_ms / 1000):
                answer = await self._refine_infer(request)
            if isinstance(answer, RefineOutcome):
                changed, edit_ratio = answer.changed, answer.edit_ratio
        except Exception:  # TimeoutError included
            self.shadow_failed += 1
        finally:  # cancelled (stop) too: the event of the answer is never lost
            event.update(refine_fields(changed, edit_ratio))
            self._record_shadow_event(event)

    def _record_shadow_event(self, event: dict[str, Any]) -> None:
        if self._shadow_events.pop(event["event_id"], None) is not None:
            self.telemetry.record(event)
            item = self._feedback_after_shadow.pop(event["event_id"], None)
            if item is not None:
                self.feedback_queue.record(item)

    async def cancel_shadow_refines(self) -> None:
        """Cut the shadow refines still running (`stop` does it); their events are recorded
        without the outcome."""
        running = list(self._shadow_tasks)
        for shadow in running:
            shadow.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        # A refine cancelled before it began never ran its own `finally`.
        for event in list(self._shadow_events.values()):
            self._record_shadow_event(event)

    # --- execution ---------------------------------------------------------------------------

    def _finish(
        self,
        task: Task,
        readings: Readings,
        decision: Decision,
        cell: Cell | None,
        version: int | None,
        started: float,
        route: Route,
        fallback: FallbackKind,
        ok: bool,
        result: Any,
        *,
        cache_hit: bool,
        uploaded: bool,
        cloud_pressure: float = 0.0,
        signals: _Signals | None = None,
        shadow: bool = False,
    ) -> Outcome:
        latency_ms = (self._clock() - started) * 1000
        signals = signals or _Signals()
        event_id: str | None = None
        if cell is None or version is None:
            self.telemetry.skipped += 1  # nothing to report against: no published version
        else:
            event_id = new_event_id()
            if shadow:
                # The draft goes to the cloud, as the cell allows and de-identified as it asks.
                uploaded = True
            event = build_event(
                event_id=event_id,
                device_id=self.config.device_id,
                policy_version=version,
                task=task,
                readings=readings,
                decision=decision,
                route=decision.route,
                fallback=fallback,
                latency_ms=latency_ms,
                cache_hit=cache_hit,
                ok=ok,
                uploaded=uploaded,
                cloud_pressure=cloud_pressure,
                # The app's cloud_infer strips identifiers when the cell asks for it.
                deidentified=uploaded and cell.upload_deidentify,
                ts=self._wall_clock(),
                quality=signals.quality,
                refine_changed=signals.changed,
                refine_edit_ratio=signals.edit_ratio,
                shadow_refine=shadow,
            )
            if shadow:  # recorded once the shadow refine ends (the answer does not wait)
                request = RefineRequest(
                    task=task,
                    decision=decision,
                    draft=result,
                    deidentify=cell.upload_deidentify,
                    shadow=True,
                )
                self._start_shadow_refine(request, cell, event)
            else:
                self.telemetry.record(event)
        return Outcome(
            decision=decision,
            route=route,
            fallback=fallback,
            latency_ms=latency_ms,
            cache_hit=cache_hit,
            ok=ok,
            queued=False,
            result=result,
            policy_version=version,
            event_id=event_id,
            quality=signals.quality,
            refine_changed=signals.changed,
            # As the event says it: 0 when the cloud kept the draft.
            refine_edit_ratio=0.0 if signals.changed is False else signals.edit_ratio,
            shadow_refine=shadow and event_id is not None,
        )

    async def _execute(
        self, task: Task, decision: Decision, cell: Cell | None, online: bool
    ) -> tuple[Route, FallbackKind, bool, Any, bool]:
        """(route taken, fallback, ok, result or the error, whether the task's data left the
        device) under the cell's fallback setting. Data leaves with every cloud call made
        while online, even one that then fails or times out; offline, a cloud call fails
        before sending anything."""
        route = decision.route
        if route == "device" or cell is None:
            ok, result = await self._on_device(task)
            if ok or cell is None or fallback_route(cell, "device", "device") == "none":
                return "device", "none", ok, result, False
            ok, result = await self._on_cloud(task, decision, cell, online)
            return "cloud", "device_to_cloud", ok, result, online
        if route == "cloud":
            ok, result = await self._on_cloud(task, decision, cell, online)
            if ok or fallback_route(cell, "cloud", "cloud") == "none":
                return "cloud", "none", ok, result, online
            ok, result = await self._on_device(task)
            return "device", "cloud_to_device", ok, result, online
        # draft_refine: the device drafts, the cloud refines the draft.
        ok, draft = await self._on_device(task)
        if not ok:
            if fallback_route(cell, route, "device") == "none":
                return "device", "none", False, draft, False
            ok, result = await self._on_cloud(task, decision, cell, online)
            return "cloud", "device_to_cloud", ok, result, online
        ok, refined = await self._on_refine(task, decision, cell, online, draft)
        if ok:
            return "draft_refine", "none", True, refined, online
        if fallback_route(cell, route, "cloud") == "none":
            return "draft_refine", "none", False, refined, online
        return "device", "cloud_to_device", True, draft, online

    async def _on_device(self, task: Task) -> tuple[bool, Any]:
        try:
            return True, await self._device_infer(task)
        except Exception as error:
            return False, error

    async def _on_cloud(
        self, task: Task, decision: Decision, cell: Cell, online: bool
    ) -> tuple[bool, Any]:
        if not online:  # no network I/O while offline: a cloud call fails at once
            return False, ConnectionError("device is offline")
        try:
            async with asyncio.timeout(cell.cloud_timeout_ms / 1000):
                return True, await self._cloud_infer(task, decision)
        except Exception as error:  # TimeoutError included: cloud_timeout_ms passed
            return False, error

    async def _on_refine(
        self, task: Task, decision: Decision, cell: Cell, online: bool, draft: Any
    ) -> tuple[bool, Any]:
        """The cloud's refine of a draft: `refine_infer` with the draft when the app gave one,
        else `cloud_infer` (which does not see the draft)."""
        if self._refine_infer is None:
            return await self._on_cloud(task, decision, cell, online)
        if not online:
            return False, ConnectionError("device is offline")
        request = RefineRequest(
            task=task,
            decision=decision,
            draft=draft.result if isinstance(draft, Answer) else draft,
            deidentify=cell.upload_deidentify,
            shadow=False,
        )
        try:
            async with asyncio.timeout(cell.cloud_timeout_ms / 1000):
                return True, await self._refine_infer(request)
        except Exception as error:  # TimeoutError included: cloud_timeout_ms passed
            return False, error

    async def _drain_offline_tasks(self) -> None:
        """Run the cloud-bound tasks held while offline, routed again now that it is online."""
        while self._offline_tasks and self._online() and not self._stopping:
            chunk = [
                self._offline_tasks.popleft()
                for _ in range(min(OFFLINE_DRAIN_CONCURRENCY, len(self._offline_tasks)))
            ]
            try:
                outcomes = await asyncio.gather(*(self.run(task) for task in chunk))
            except asyncio.CancelledError:  # stopped meanwhile: the tasks wait for next time
                self._offline_tasks.extendleft(reversed(chunk))
                raise
            for task, outcome in zip(chunk, outcomes, strict=True):
                self._emit("queued_result", {"task": task, "outcome": outcome})

    # --- connection --------------------------------------------------------------------------

    def _online(self) -> bool:
        try:
            return bool(self._readings().online)
        except Exception:
            logger.warning("device.readings_failed device=%s", self.config.device_id, exc_info=True)
            return False

    def _set_state(self, state: str) -> None:
        if state != self.connection_state:
            previous, self.connection_state = self.connection_state, state
            self._emit("state", {"state": state, "previous": previous})

    def _emit(self, event: str, details: dict[str, Any]) -> None:
        for listener in self._listeners:
            try:
                listener(event, details)
            except Exception:
                logger.warning("device.listener_failed event=%s", event, exc_info=True)

    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    async def _connection_loop(self) -> None:
        backoff = Backoff(self.config.backoff_base_s, self.config.backoff_max_s, self._rng)
        try:
            while not self._stopping:
                if not self._online():
                    self._set_state("offline")
                    await asyncio.sleep(self.config.online_check_s)
                    continue
                if self.connection_state != "polling":
                    self._set_state("connecting")
                if self.token is None:
                    try:
                        await self._enrol()
                    except EnrolmentRefused as error:
                        self.last_error = str(error)
                        logger.error(
                            "device.enrol_refused device=%s error=%s", self.config.device_id, error
                        )
                        self._set_state("stopped")
                        return
                    except (httpx.HTTPError, OSError, ValueError) as error:
                        self.last_error = f"enrol: {error!r}"
                        await asyncio.sleep(backoff.next_delay())
                        continue
                ended = await self._socket_session(backoff)
                if ended == "superseded":
                    # Another connection of this device id replaced ours (a second instance
                    # with the same identity): reconnecting would only fight it.
                    logger.error("device.superseded device=%s", self.config.device_id)
                    self._set_state("stopped")
                    return
                if ended == "refused":
                    # A proxy or the server will not upgrade: poll, and try the socket later.
                    await self._poll_once()
                    self._set_state("polling")
                    await asyncio.sleep(self.config.poll_interval_s)
                elif ended != "offline":
                    if self.connection_state == "connected":
                        self._set_state("connecting")  # lost: back off, then reconnect
                    # A socket that keeps failing to open (a network that drops WebSocket
                    # handshakes without refusing them) still lets plain HTTP through at
                    # times: try one poll every few failures, so the policy stays current.
                    if (
                        ended == "failed"
                        and backoff.attempt >= SOCKET_FAILURES_BEFORE_POLL
                        and backoff.attempt % SOCKET_FAILURES_BEFORE_POLL == 0
                        and await self._poll_once()
                    ):
                        self._set_state("polling")
                    await asyncio.sleep(backoff.next_delay())
        except DeviceRevoked as error:
            await self._revoke(str(error))

    async def _enrol(self) -> None:
        assert self._http is not None
        config = self.config
        response = await self._http.post(
            f"{config.base_url}/api/v1/devices/enroll",
            json={
                "fleet_key": config.fleet_key,
                "device_id": config.device_id,
                "platform": config.platform,
                "model": config.model,
                "sdk": config.sdk,
            },
            timeout=config.http_timeout_s,
        )
        if response.status_code == 201:
            token = response.json()["device_token"]
            if not isinstance(token, str) or not token:
                raise ValueError("enrolment answer without a device_token")
            self.token = token
            if config.state_dir is not None:
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

    async def _socket_session(self, backoff: Backoff) -> str:
        """One socket, from connect to close.

        Returns "refused" (upgrade refused with an HTTP status), "failed" (no connection),
        "closed", "superseded" (4409) or "offline"; raises DeviceRevoked on 401 / 4401.
        """
        config = self.config
        try:
            ws = await connect(
                config.ws_url,
                additional_headers=self._auth(),
                user_agent_header=config.sdk,
                open_timeout=config.http_timeout_s,
                ping_interval=None,  # our own keepalive below: no extra task per socket
                close_timeout=2,
                max_size=MAX_FRAME_BYTES,
                compression=None,
                proxy=None,
            )
        except InvalidStatus as error:
            status = error.response.status_code
            if status == 401:
                raise DeviceRevoked("socket upgrade refused with 401") from None
            self.last_error = f"socket upgrade refused with {status}"
            return "refused"
        except (OSError, TimeoutError, InvalidHandshake, InvalidURI) as error:
            self.last_error = f"socket: {error!r}"
            return "failed"
        self._ws = ws
        self._sockets_opened += 1
        if self._sockets_opened > 1:
            self.reconnects += 1
        try:
            await ws.send(
                json.dumps(
                    {
                        "type": "hello",
                        "device_id": config.device_id,
                        "policy_version": self.policy.version,
                        "sdk": config.sdk,
                        "platform": config.platform,
                        "model": config.model,
                    }
                )
            )
            last_frame = time.monotonic()
            while not self._stopping:
                if not self._online():
                    self._set_state("offline")
                    return "offline"
                try:
                    async with asyncio.timeout(config.online_check_s):
                        frame = await ws.recv()
                except TimeoutError:
                    if time.monotonic() - last_frame >= config.keepalive_s:
                        pong = await ws.ping()
                        async with asyncio.timeout(config.keepalive_s):
                            await pong
                        last_frame = time.monotonic()
                    continue
                last_frame = time.monotonic()
                if isinstance(frame, str) and await self._on_frame(ws, frame):
                    backoff.reset()
            return "closed"
        except ConnectionClosed as closed:
            code = closed.rcvd.code if closed.rcvd is not None else None
            if code == CLOSE_UNAUTHORISED:
                raise DeviceRevoked("socket closed with 4401") from None
            if code == CLOSE_SUPERSEDED:
                self.last_error = "superseded by a newer connection of this device (4409)"
                return "superseded"
            self.last_error = f"socket closed ({code})"
            return "closed"
        except (OSError, TimeoutError) as error:
            self.last_error = f"socket: {error!r}"
            return "failed"
        finally:
            self._ws = None
            await _quietly_close(ws)

    async def _on_frame(self, ws: ClientConnection, frame: str) -> bool:
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
        if kind == "policy":
            rollout = message.get("rollout")
            document = {k: v for k, v in message.items() if k not in ("type", "rollout")}
            if not self._apply_policy(document, rollout if isinstance(rollout, dict) else None):
                return False
            await ws.send(json.dumps({"type": "ack", "version": self.policy.version}))
            self._set_state("connected")
            self._emit(
                "policy", {"version": self.policy.version, "rollout": rollout, "via": "socket"}
            )
            return True
        if kind == "up_to_date":
            self._set_state("connected")
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

    def _apply_policy(
        self,
        document: Mapping[str, Any],
        rollout: Mapping[str, Any] | None,
        etag: str | None = None,
    ) -> bool:
        try:
            self.policy.apply(document, rollout=rollout, etag=etag, save=False)
        except PolicyDocumentError as error:
            self.policy_errors += 1
            logger.error("device.policy_unusable device=%s error=%s", self.config.device_id, error)
            return False
        self.cache.clear()
        if self.config.state_dir is not None:
            # On a worker thread: thousands of simulated devices get a push at once, and an
            # fsync each would stall the event loop for seconds. The newest policy wins.
            self._policy_saved = asyncio.get_running_loop().run_in_executor(None, self.policy.save)
        return True

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
        self.router.set_cloud_pressure(float(offset), float(ttl))
        self._emit("cloud_pressure", {"theta_offset": float(offset), "ttl_s": float(ttl)})

    async def _poll_once(self) -> bool:
        """`GET /api/v1/devices/me/policy` with If-None-Match; applies a new version.

        True when the server answered (200, 304, or 404: no policy yet).
        """
        assert self._http is not None
        headers = self._auth()
        if self.policy.etag:
            headers["If-None-Match"] = self.policy.etag
        try:
            response = await self._http.get(
                f"{self.config.base_url}/api/v1/devices/me/policy",
                headers=headers,
                timeout=self.config.http_timeout_s,
            )
        except (httpx.HTTPError, OSError) as error:
            self.last_error = f"poll: {error!r}"
            return False
        if response.status_code == 401:
            raise DeviceRevoked("policy poll answered 401")
        if response.status_code == 200:
            try:
                document = response.json()
            except ValueError:
                self.policy_errors += 1
                return True
            if (
                isinstance(document, dict)
                and document.get("version") != self.policy.version
                and self._apply_policy(document, None, response.headers.get("ETag"))
            ):
                self._emit(
                    "policy",
                    {"version": self.policy.version, "rollout": None, "via": "polling"},
                )
            return True
        if response.status_code in (304, 404):
            return True
        self.last_error = f"poll answered {response.status_code}"
        return False

    async def _close_socket(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            await _quietly_close(ws)

    async def _revoke(self, reason: str) -> None:
        """The token is refused: stop every loop, remember it on disk, never loop."""
        self._revoked = True
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
        current = asyncio.current_task()
        for loop_task in self._loops:
            if loop_task is not current:
                loop_task.cancel()
        await self.telemetry.save_async()
        await self.feedback_queue.save_async()
        self._set_state("revoked")

    # --- telemetry ---------------------------------------------------------------------------

    def _wake_telemetry(self) -> None:
        if self._telemetry_wake is not None:
            self._telemetry_wake.set()

    async def _post_telemetry(self, body: bytes) -> PostResult:
        if self._http is None or self.token is None:
            return 0, b"", None
        try:
            response = await self._http.post(
                f"{self.config.base_url}/api/v1/telemetry",
                content=body,
                headers={**self._auth(), "Content-Type": "application/json"},
                timeout=self.config.http_timeout_s,
            )
        except (httpx.HTTPError, OSError) as error:
            self.last_error = f"telemetry: {error!r}"
            return 0, b"", None
        return response.status_code, response.content, response.headers.get("Retry-After")

    async def _post_feedback(self, body: bytes) -> PostResult:
        if self._http is None or self.token is None:
            return 0, b"", None
        try:
            response = await self._http.post(
                f"{self.config.base_url}{FEEDBACK_PATH}",
                content=body,
                headers={**self._auth(), "Content-Type": "application/json"},
                timeout=self.config.http_timeout_s,
            )
        except (httpx.HTTPError, OSError) as error:
            self.last_error = f"feedback: {error!r}"
            return 0, b"", None
        return response.status_code, response.content, response.headers.get("Retry-After")

    async def _flush_feedback(self, backoff: Backoff) -> bool:
        """One attempt to deliver pending feedback unless backing off; False when revoked."""
        loop = asyncio.get_running_loop()
        if loop.time() < self._feedback_retry_at:
            return True
        try:
            delivered = await self.feedback_queue.flush()
        except TelemetryRevoked as error:
            await self._revoke(str(error))
            return False
        if delivered:
            await self.feedback_queue.refresh_saved()
            backoff.reset()
            self._feedback_retry_at = 0.0
        else:
            await self.feedback_queue.save_async()
            delay = max(self.feedback_queue.retry_after, backoff.next_delay())
            self._feedback_retry_at = loop.time() + delay
        return True

    async def _telemetry_loop(self) -> None:
        backoff = Backoff(self.config.backoff_base_s, self.config.backoff_max_s, self._rng)
        feedback_backoff = Backoff(self.config.backoff_base_s, self.config.backoff_max_s, self._rng)
        wake = self._telemetry_wake
        assert wake is not None
        retry = False  # after a failed flush: try again after the back-off, not the interval
        while not self._stopping:
            if not retry:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.config.telemetry_flush_s):
                        await wake.wait()
                wake.clear()
            retry = False
            if not self._online():
                await self.telemetry.save_async()  # held until online: kept on disk meanwhile
                await self.feedback_queue.save_async()
                continue
            await self._drain_offline_tasks()
            if self.token is None:
                await self.telemetry.save_async()
                await self.feedback_queue.save_async()
                continue
            if self.telemetry.pending:
                try:
                    delivered = await self.telemetry.flush()
                except TelemetryRevoked as error:
                    await self._revoke(str(error))
                    return
                if delivered:
                    # While deliveries succeed events are not written to disk (a crash loses
                    # at most one flush interval); a file left by failures is brought up to
                    # date.
                    await self.telemetry.refresh_saved()
                    backoff.reset()
                else:
                    await self.telemetry.save_async()
                    await self.feedback_queue.save_async()
                    retry = True
                    await asyncio.sleep(max(self.telemetry.retry_after, backoff.next_delay()))
                    continue
            # Feedback after the events it refers to; its failures back off on their own and
            # never hold telemetry back.
            if self.feedback_queue.pending and not await self._flush_feedback(feedback_backoff):
                return


class _Signals:
    """The quality signals of one task's answer, read from what the app's callables returned
    (an Answer or a RefineOutcome, or a bare result that says nothing)."""

    __slots__ = ("changed", "edit_ratio", "quality")

    def __init__(self) -> None:
        self.quality: float | None = None
        self.changed: bool | None = None
        self.edit_ratio: float | None = None

    def read(self, answer: Any) -> Any:
        """The bare result of `answer`, noting what it says of its quality."""
        if isinstance(answer, RefineOutcome):
            self.quality = answer.quality
            self.changed = bool(answer.changed)
            self.edit_ratio = answer.edit_ratio
            return answer.result
        if isinstance(answer, Answer):
            self.quality = answer.quality
            return answer.result
        return answer


async def _quietly_close(ws: ClientConnection) -> None:
    with contextlib.suppress(Exception):
        await ws.close()
