"""`Device`: the client of device protocol v1 that an app embeds.

`Device` is the app's one object; it wires together parts that each do one job:
- `PolicyStore` (edge_sdk.policy): the policy in force, its ETag, kept on disk; received
  documents go through `PolicySync` (edge_sdk.policy_sync);
- `Router` (edge_sdk.router, edge_sdk.decision): the decision for each task;
- `Executor` (edge_sdk.execution): the task run where decided, with fallback; here: the
  result cache, the offline task queue, the telemetry event of each task;
- `ShadowRefines` (edge_sdk.shadow): device answers the cloud also refines, in the background;
- `Connection` (edge_sdk.connection): token, connection state, the connection loop (enrol,
  a `Transport` session, polling, back-off) and the HTTP calls; the transport is picked by
  name (`transport=`, "websocket" by default: `WebSocketTransport`, edge_sdk.transport.websocket;
  "mqtt": `MqttTransport`, edge_sdk.transport.mqtt, at `DeviceConfig.mqtt_url`) through
  `edge_sdk.transport.transport_named`;
- `TelemetrySender` (edge_sdk.telemetry_sender): the telemetry and feedback queues and the
  loop that delivers them.

Per device there are at most two background tasks: the connection loop and the telemetry
loop (batches, resends, the offline task queue). Thousands of devices can share one event
loop and one `httpx.AsyncClient`. Connection states (`Device.connection_state`): see
edge_sdk.connection.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import deque
from collections.abc import Callable
from operator import attrgetter
from typing import Any, Final, Generic, TypeVar, cast, overload

import httpx

from edge_sdk.backoff import JITTER, Backoff
from edge_sdk.cache import ResultCache
from edge_sdk.config import DeviceConfig
from edge_sdk.connection import STATES, Connection, DeviceRevoked, EnrolmentRefused
from edge_sdk.decision import Cell, Decision, FallbackKind, Route
from edge_sdk.execution import Executor, Signals
from edge_sdk.feedback import feedback_item
from edge_sdk.listeners import Listener, Listeners
from edge_sdk.policy import PolicyStore
from edge_sdk.policy_sync import PolicySync
from edge_sdk.router import Router
from edge_sdk.segments import device_attributes
from edge_sdk.shadow import ShadowRefines
from edge_sdk.task import (
    CloudInfer,
    DeviceInfer,
    Outcome,
    Readings,
    RefineInfer,
    RefineRequest,
    Task,
)
from edge_sdk.telemetry import TelemetryRevoked, build_event, new_event_id
from edge_sdk.telemetry_sender import TelemetrySender
from edge_sdk.transport import DEFAULT_TRANSPORT, CarriesTelemetry, Transport, transport_named

__all__ = ["STATES", "Backoff", "Device", "DeviceRevoked", "EnrolmentRefused", "Listener"]

OFFLINE_DRAIN_CONCURRENCY: Final = 8
_MISSING: Final[Any] = object()
_T = TypeVar("_T")


class _Shown(Generic[_T]):
    """A read-only attribute of `Device` that is one of its parts' own: the device shows it,
    the part keeps it (`Device.reconnects` is `Device._connection.reconnects`)."""

    def __init__(self, path: str, doc: str) -> None:
        self._read = attrgetter(path)  # "<part>.<its attribute>"
        self._name = path
        self.__doc__ = doc

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, device: None, owner: type) -> _Shown[_T]: ...

    @overload
    def __get__(self, device: object, owner: type) -> _T: ...

    def __get__(self, device: object, owner: type) -> _Shown[_T] | _T:
        return self if device is None else cast(_T, self._read(device))

    def __set__(self, device: object, value: object) -> None:
        raise AttributeError(f"Device.{self._name} is read-only")


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
        transport: str | Transport = DEFAULT_TRANSPORT,
    ) -> None:
        # `transport` is how the push channel is carried: a name `transport_named` knows
        # ("websocket"; "mqtt", which also carries telemetry, with `config.mqtt_url`), or a
        # Transport of the app's own (edge_sdk.transport says what one does).
        # `clock` (seconds, monotonic) times tasks and cache TTLs; `wall_clock` (Unix seconds)
        # stamps telemetry. A simulation on a virtual clock passes its own (simulate.virtual).
        push_channel = (
            transport_named(transport, config) if isinstance(transport, str) else transport
        )
        self._clock = clock
        self._wall_clock = wall_clock
        self.config = config
        self._readings = readings
        rng = rng if rng is not None else JITTER
        self._executor = Executor(device_infer, cloud_infer, refine_infer)
        self.policy = PolicyStore(
            config.state_dir,
            attributes=device_attributes(
                platform=config.platform, model=config.model, reported=config.attributes
            ),
        )
        self.router = Router(self.policy, readings=readings)
        self.cache = ResultCache(config.cache_max_entries, clock=clock)
        self._listeners = Listeners()
        self._policy_sync = PolicySync(
            self.policy,
            device_id=config.device_id,
            persist=config.state_dir is not None,
            on_applied=self._policy_applied,
        )
        self._connection = Connection(
            config,
            transport=push_channel,
            readings=readings,
            policy=self._policy_sync,
            router=self.router,
            listeners=self._listeners,
            rng=rng,
            http=http,
        )
        self._sender = TelemetrySender(
            config, connection=self._connection, rng=rng, before_flush=self._drain_offline_tasks
        )
        self.telemetry = self._sender.telemetry
        self.feedback_queue = self._sender.feedback_queue
        self._shadow = ShadowRefines(
            config,
            refine_infer=refine_infer,
            policy=self.policy,
            sender=self._sender,
            rng=rng,
            clock=clock,
        )
        self.offline_dropped = 0  # queued cloud-bound tasks pushed out while the queue was full
        self._offline_tasks: deque[Task] = deque()
        self._loops: list[asyncio.Task[None]] = []
        self._state_loaded = False

    # --- public ------------------------------------------------------------------------------

    connection_state = _Shown[str](
        "_connection.state", "One of STATES (edge_sdk.connection says what each means)."
    )
    last_error = _Shown[str | None](
        "_connection.last_error",
        "Why the last enrolment, session, poll or post failed, or why the token was refused.",
    )
    server_errors = _Shown[int](
        "_connection.server_errors",
        "`error` frames received (and frames that were not JSON, bad cloud pressure).",
    )
    policy_errors = _Shown[int](
        "_policy_sync.errors", "Policy documents from the server that could not be applied."
    )
    reconnects = _Shown[int]("_connection.reconnects", "Sockets opened after the first.")
    deltas_applied = _Shown[int](
        "_connection.deltas.applied", "Policy deltas applied (docs/PROTOCOL.md, Policy deltas)."
    )
    deltas_refused = _Shown[int](
        "_connection.deltas.refused",
        "Policy deltas not applied (no base, another base, hash mismatch): the whole document "
        "was asked for instead.",
    )
    shadow_started = _Shown[int]("_shadow.started", "Shadow refines started.")
    shadow_over_budget = _Shown[int](
        "_shadow.over_budget",
        "Shadow refines drawn by the cell's rate but skipped: over the SDK's budget.",
    )
    shadow_failed = _Shown[int](
        "_shadow.failed",
        "Shadow refines whose cloud call failed or timed out (event sent without outcome).",
    )
    shadow_pending = _Shown[int]("_shadow.pending", "Shadow refines running in the background now.")
    cloud_pressure = _Shown[float](
        "router.cloud_pressure",
        "The pushed theta offset in force now (0 once its TTL has passed).",
    )

    @property
    def token(self) -> str | None:
        """The device token (None before enrolment and once revoked)."""
        return self._connection.token

    @token.setter
    def token(self, token: str | None) -> None:
        self._connection.token = token

    @property
    def offline_pending(self) -> int:
        """Cloud-bound background tasks held until the device is online again."""
        return len(self._offline_tasks)

    def add_listener(self, fn: Listener) -> None:
        """Call fn(event, details) on "policy", "cloud_pressure", "state" and "queued_result"."""
        self._listeners.add(fn)

    async def start(self) -> None:
        """Load the stored token, policy and telemetry; start the connection and telemetry loops."""
        if self._loops:
            return
        connection = self._connection
        connection.stopping = False
        if not self._state_loaded:  # a restart of the same object keeps what it has in memory
            self._state_loaded = True
            connection.load_credentials()
            self._policy_sync.load()
            self._sender.load()
        connection.open_http()
        self._sender.open()
        if connection.revoked:
            connection.set_state("revoked")
            return
        name = f"edge-sdk:{self.config.device_id}"
        self._loops = [
            asyncio.create_task(self._connection_loop(), name=f"{name}:connection"),
            asyncio.create_task(self._telemetry_loop(), name=f"{name}:telemetry"),
        ]

    async def stop(self) -> None:
        """Close the socket, try a last telemetry flush, persist what is left (a push channel
        that carries the telemetry, MQTT, closes after that flush instead)."""
        connection = self._connection
        connection.stopping = True
        loops, self._loops = self._loops, []
        for loop_task in loops:
            loop_task.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        carries_telemetry = isinstance(connection.transport, CarriesTelemetry)
        if not carries_telemetry:
            await connection.close()
        # Shadow refines still running are cut: their events go without the outcome.
        await self.cancel_shadow_refines()
        if connection.token is not None and not connection.revoked and connection.online():
            await self._sender.last_flush()
        if carries_telemetry:
            await connection.close()
        await self._sender.save()
        await self._policy_sync.saved()
        await connection.close_http()
        if not connection.revoked:
            connection.set_state("stopped")

    def feedback(self, event_id: str, quality: float) -> None:
        """Report the app's quality (0-1) of the answer of an earlier task, by its event id
        (`Outcome.event_id`), however late: queued durably, sent after telemetry, resent until
        the server acknowledges it. ValueError for an id that is not a uuid or a quality
        outside [0, 1]."""
        item = feedback_item(event_id, quality)
        # Its event is not recorded while a shadow refine runs: the feedback follows it.
        if not self._shadow.hold_feedback(item):
            self.feedback_queue.record(item)

    async def cancel_shadow_refines(self) -> None:
        """Cut the shadow refines still running (`stop` does it); their events are recorded
        without the outcome."""
        await self._shadow.cancel()

    async def run(self, task: Task) -> Outcome:
        """Route the task, run it where the decision says, fall back, cache, record telemetry."""
        readings = self._readings()
        decision = self.router.route(task, readings)
        pressure = self.router.pressure_offset  # the offset route() used (0 once lapsed)
        cell = self.policy.cell(task)
        version = self.policy.version
        if decision.queue_until_online:
            self._hold_until_online(task)
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
        cache_key = self._cache_key(task, cell)
        cached = _MISSING if cache_key is None else self.cache.get(cache_key, _MISSING)
        cache_hit = cached is not _MISSING
        route: Route
        fallback: FallbackKind
        signals = Signals()
        if cache_hit:  # answered from the cache: nothing of the task left the device
            route, fallback, ok, result, uploaded = decision.route, "none", True, cached, False
        else:
            route, fallback, ok, answer, uploaded = await self._executor.execute(
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
            and self._shadow.drawn(task, cell)
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

    # --- execution ---------------------------------------------------------------------------

    def _hold_until_online(self, task: Task) -> None:
        """Queue a cloud-bound background task until the device is online again; the oldest
        goes (counted) when the queue is full."""
        self._offline_tasks.append(task)
        if len(self._offline_tasks) > self.config.offline_queue_max:
            self._offline_tasks.popleft()
            self.offline_dropped += 1

    def _cache_key(self, task: Task, cell: Cell | None) -> Any:
        """The task's key in the result cache (under this policy's generation), or None when
        its answer is not cached."""
        if task.cache_key is None or cell is None or cell.cache_ttl_s <= 0:
            return None
        return (
            self.policy.generation,
            task.task_type,
            task.latency_budget,
            task.privacy_tier,
            task.cache_key,
        )

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
        signals: Signals | None = None,
        shadow: bool = False,
    ) -> Outcome:
        latency_ms = (self._clock() - started) * 1000
        signals = signals or Signals()
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
                self._shadow.start(request, cell, event)
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

    async def _drain_offline_tasks(self) -> None:
        """Run the cloud-bound tasks held while offline, routed again now that it is online."""
        while self._offline_tasks and self._connection.online() and not self._connection.stopping:
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
                self._listeners.emit("queued_result", {"task": task, "outcome": outcome})

    # --- the background loops ----------------------------------------------------------------

    async def _connection_loop(self) -> None:
        try:
            await self._connection.run()
        except DeviceRevoked as error:
            await self._revoke(str(error))

    async def _telemetry_loop(self) -> None:
        try:
            await self._sender.run()
        except TelemetryRevoked as error:
            await self._revoke(str(error))

    async def _revoke(self, reason: str) -> None:
        """The token is refused: stop every loop, remember it on disk, never loop."""
        self._connection.revoke(reason)
        current = asyncio.current_task()
        for loop_task in self._loops:
            if loop_task is not current:
                loop_task.cancel()
        await self._sender.save()
        self._connection.set_state("revoked")

    def _policy_applied(self) -> None:
        """A new policy from the server: no cached result of the old one is served."""
        self.cache.clear()
