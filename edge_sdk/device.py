"""`Device`: the client of device protocol v1 that an app embeds.

`Device` is the app's one object; it wires together parts that each do one job:
- `PolicyStore` (edge_sdk.policy): the policy in force, its ETag, kept on disk; received
  documents go through `PolicySync` (edge_sdk.policy_sync);
- `Router` (edge_sdk.router, edge_sdk.decision): the decision for each task;
- `Executor` (edge_sdk.execution): the task run where decided, with fallback; here: the
  result cache, the offline task queue, the telemetry event of each task;
- `ShadowRefines` (edge_sdk.shadow): device answers the cloud also refines, in the background;
- `Connection` (edge_sdk.connection): token, connection state, the connection loop (enrol,
  a `Transport` session, polling, back-off) and the HTTP calls; the WebSocket is
  `WebSocketTransport` (edge_sdk.transport.websocket);
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
from typing import Any, Final

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
from edge_sdk.transport.websocket import WebSocketTransport

__all__ = ["STATES", "Backoff", "Device", "DeviceRevoked", "EnrolmentRefused", "Listener"]

OFFLINE_DRAIN_CONCURRENCY: Final = 8
_MISSING: Final[Any] = object()


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
        rng = rng if rng is not None else JITTER
        self._executor = Executor(device_infer, cloud_infer, refine_infer)
        self.policy = PolicyStore(config.state_dir)
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
            transport=WebSocketTransport(config),
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
            device_id=config.device_id,
            per_minute=config.shadow_refines_per_minute,
            refine_infer=refine_infer,
            policy=self.policy,
            telemetry=self.telemetry,
            feedback_queue=self.feedback_queue,
            rng=rng,
            clock=clock,
        )
        self.offline_dropped = 0  # queued cloud-bound tasks pushed out while the queue was full
        self._offline_tasks: deque[Task] = deque()
        self._loops: list[asyncio.Task[None]] = []
        self._state_loaded = False

    # --- public ------------------------------------------------------------------------------

    @property
    def connection_state(self) -> str:
        """One of STATES (edge_sdk.connection says what each means)."""
        return self._connection.state

    @property
    def last_error(self) -> str | None:
        """Why the last enrolment, session, poll or post failed, or why the token was refused."""
        return self._connection.last_error

    @property
    def token(self) -> str | None:
        """The device token (None before enrolment and once revoked)."""
        return self._connection.token

    @token.setter
    def token(self, token: str | None) -> None:
        self._connection.token = token

    @property
    def server_errors(self) -> int:
        """`error` frames received (and frames that were not JSON, bad cloud pressure)."""
        return self._connection.server_errors

    @property
    def policy_errors(self) -> int:
        """Policy documents from the server that could not be applied."""
        return self._policy_sync.errors

    @property
    def reconnects(self) -> int:
        """Sockets opened after the first."""
        return self._connection.reconnects

    @property
    def shadow_started(self) -> int:
        """Shadow refines started."""
        return self._shadow.started

    @property
    def shadow_over_budget(self) -> int:
        """Shadow refines drawn by the cell's rate but skipped: over the SDK's budget."""
        return self._shadow.over_budget

    @property
    def shadow_failed(self) -> int:
        """Shadow refines whose cloud call failed or timed out (event sent without outcome)."""
        return self._shadow.failed

    @property
    def shadow_pending(self) -> int:
        """Shadow refines running in the background now."""
        return self._shadow.pending

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
        """Close the socket, try a last telemetry flush, persist what is left."""
        connection = self._connection
        connection.stopping = True
        loops, self._loops = self._loops, []
        for loop_task in loops:
            loop_task.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        await connection.close()
        # Shadow refines still running are cut: their events go without the outcome.
        await self.cancel_shadow_refines()
        if connection.token is not None and not connection.revoked and connection.online():
            await self._sender.last_flush()
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
