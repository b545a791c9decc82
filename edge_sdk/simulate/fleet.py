"""A fleet of simulated devices in one asyncio process, each an `edge_sdk.Device`.

The simulator only supplies what an app would: live `readings`, and `device_infer` /
`cloud_infer` callables that sleep for the modelled latency (and sometimes fail). Enrolment,
the socket, policy updates, routing, fallback, caching, offline queues and telemetry are
the SDK's own code, so the control plane sees exactly what real devices would send.

All devices share one `httpx.AsyncClient` and one cloud queue; they connect staggered
(`connect_per_s`) so a large fleet does not hit the server with one enrolment storm.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TextIO

import httpx

from .. import Device, DeviceConfig, Outcome, Readings, Task
from ..decision import Decision, score_terms
from ..task import RefineOutcome, RefineRequest
from ..wire.negotiation import WireFormat
from .models import (
    DEVICE_PROFILES,
    LINK_PROFILES,
    CloudOverloaded,
    CloudQueue,
    DeviceFailure,
    DeviceProfile,
    Link,
    LinkReading,
    Load,
    device_infer_ms,
    pick_weighted,
    profile_attributes,
    upload_ms,
)
from .quality import DEGRADED_QUALITY, STABLE_QUALITY, QualityModel
from .scenarios import BuggyRule, Scenario, scenario_named
from .workload import BUGGY_MODEL, STABLE_MODEL, ModelConfidence, TaskDraw, Workload

__all__ = [
    "CLOUD_CAPACITY_PER_TASK",
    "FleetConfig",
    "FleetStats",
    "SimDevice",
    "SimulatedFleet",
    "reported_by_device",
]

logger = logging.getLogger(__name__)

# The cloud is sized for the steady fleet at about 45% utilisation: 0.7 cloud requests/s of
# capacity per fleet task/s (steady, ~31% of tasks reach the cloud). The buggy candidate at
# 100% (~76% reach it) saturates it: the seed's alarm, felt as latency and timeouts too.
CLOUD_CAPACITY_PER_TASK: Final = 0.7
_LONGEST_SLEEP_S: Final = 120.0
_POLICY_WAIT_S: Final = 0.5
_STOP_CONCURRENCY: Final = 20
DRAIN_S: Final = 30.0  # at most this long delivering pending telemetry when stopping
_SEED_DIMENSIONS: Final = {
    "task_type": ["voice", "text", "image"],
    "latency_budget": ["interactive", "background"],
    "privacy_tier": ["sensitive", "normal"],
}
ONLINE_STATES: Final = frozenset({"connected", "polling"})
SIM_TRANSPORTS: Final = ("websocket", "mqtt", "mixed")
SIM_ENCODINGS: Final = ("json", "protobuf", "mixed")


@dataclass(kw_only=True)
class FleetConfig:
    """How big the fleet is, how busy, against which control plane, in which world."""

    base_url: str
    fleet_key: str
    devices: int = 500
    rate: float = 20.0  # tasks per second for the whole fleet (Poisson, spread over devices)
    scenario: str = "steady"
    duration_s: float | None = None  # None: until stopped
    state_dir: Path | None = None  # one sub-directory per device (token, policy, telemetry)
    seed: int = 1
    device_prefix: str = "sim"
    connect_per_s: float = 50.0  # staggered start: devices started per second
    buggy_version: int | None = None  # buggy-candidate: exactly this version is buggy
    stable_version: int | None = None  # buggy-candidate: versions newer than this are buggy
    cloud_capacity_rps: float | None = None  # default: rate * CLOUD_CAPACITY_PER_TASK
    progress_s: float = 5.0
    telemetry_flush_s: float = 2.0
    http_connections: int = 200
    offline_spells: bool = True  # False: links never drop (tests that time stage changes)
    # The simulated app rates this share of answers, late (Device.feedback), after a delay
    # drawn uniformly from feedback_delay_s.
    feedback_share: float = 0.3
    feedback_delay_s: tuple[float, float] = (1.0, 30.0)
    # How the devices' push channel is carried: "websocket", "mqtt" (an MQTT 5 broker at
    # mqtt_url: edge_sdk.transport.mqtt), or "mixed": a `mqtt_share` of them on MQTT, drawn
    # per device from the seed, the rest on the socket.
    transport: str = "websocket"
    mqtt_url: str = ""
    mqtt_share: float = 0.5
    # How the devices encode (docs/PROTOCOL.md, "Binary frames and compression"): "json" (forced,
    # as before binary frames existed), "protobuf" (negotiated: protobuf wherever the control
    # plane offers it; an MQTT device also sends its telemetry in protobuf), or "mixed": a
    # `protobuf_share` of them on protobuf, drawn per device from the seed.
    encoding: str = "json"
    protobuf_share: float = 0.5

    def __post_init__(self) -> None:
        if self.devices < 1:
            raise ValueError("devices must be at least 1")
        if not (self.rate > 0 and math.isfinite(self.rate)):
            raise ValueError("rate must be a positive number of tasks per second")
        if self.connect_per_s <= 0:
            raise ValueError("connect_per_s must be positive")
        if self.duration_s is not None and self.duration_s <= 0:
            raise ValueError("duration_s must be positive")
        scenario_named(self.scenario)  # ValueError naming the choices
        if not 0.0 <= self.feedback_share <= 1.0:
            raise ValueError("feedback_share must be in [0, 1]")
        low, high = self.feedback_delay_s
        if not 0.0 <= low <= high:
            raise ValueError("feedback_delay_s must be (low, high) with 0 <= low <= high")
        if self.transport not in SIM_TRANSPORTS:
            raise ValueError(f"transport must be one of {', '.join(SIM_TRANSPORTS)}")
        if self.transport != "websocket" and not self.mqtt_url:
            raise ValueError(f"transport {self.transport} needs an MQTT broker URL (--mqtt-url)")
        if not 0.0 <= self.mqtt_share <= 1.0:
            raise ValueError("mqtt_share must be in [0, 1]")
        if self.encoding not in SIM_ENCODINGS:
            raise ValueError(f"encoding must be one of {', '.join(SIM_ENCODINGS)}")
        if not 0.0 <= self.protobuf_share <= 1.0:
            raise ValueError("protobuf_share must be in [0, 1]")


@dataclass
class FleetStats:
    """What the simulator saw, fleet-wide (totals since start)."""

    tasks: int = 0  # outcomes returned by Device.run, queued ones included
    queued: int = 0  # cloud-bound background tasks held while offline
    queued_done: int = 0  # of those, run after the device came back online
    routes: Counter[str] = field(default_factory=Counter)  # route taken (after fallback)
    decided: Counter[str] = field(default_factory=Counter)  # the decision's route
    fallbacks: Counter[str] = field(default_factory=Counter)
    failed: int = 0  # outcomes with ok False (both sides failed, or no fallback)
    cache_hits: int = 0
    no_policy: int = 0  # run before the device had any policy (answered on the device)
    buggy_tasks: int = 0  # run with the buggy candidate's model
    buggy_cloud: int = 0
    degraded_tasks: int = 0  # run with the degraded candidate's device model
    refines: int = 0  # cloud refines of a draft (draft_refine and shadow), outcome known
    refines_changed: int = 0  # of those, the cloud changed the draft
    shadow_refines: int = 0  # device answers also refined in the background
    feedback: int = 0  # late quality ratings handed to Device.feedback
    latencies_ms: list[float] = field(default_factory=list)  # since the last progress line

    def record(self, outcome: Outcome, *, buggy: bool) -> None:
        """Count one finished (not queued) outcome."""
        self.routes[outcome.route] += 1
        self.decided[outcome.decision.route] += 1
        if outcome.fallback != "none":
            self.fallbacks[outcome.fallback] += 1
        if not outcome.ok:
            self.failed += 1
        if outcome.cache_hit:
            self.cache_hits += 1
        if outcome.policy_version is None:
            self.no_policy += 1
        if buggy:
            self.buggy_tasks += 1
            self.buggy_cloud += outcome.decision.route == "cloud"
        self.shadow_refines += outcome.shadow_refine
        self.latencies_ms.append(outcome.latency_ms)

    @property
    def finished(self) -> int:
        """Outcomes that ran (queued ones once they ran)."""
        return sum(self.routes.values())


class SimDevice:
    """One simulated device: its hardware, link and load, and the SDK `Device` it drives."""

    def __init__(self, fleet: SimulatedFleet, index: int, rng: random.Random) -> None:
        self.fleet = fleet
        self.rng = rng
        self.device_id = f"{fleet.config.device_prefix}-{index:06d}"
        self.profile: DeviceProfile = pick_weighted(
            rng, tuple((p, p.weight) for p in DEVICE_PROFILES)
        )
        now = fleet.elapsed()
        self.link = Link(pick_weighted(rng, tuple((p, p.weight) for p in LINK_PROFILES)), rng, now)
        self.load = Load(rng, now)
        self.last_link = LinkReading(
            rtt_ms=self.link.rtt_ms, bandwidth_kbps=self.link.bandwidth_kbps, online=True
        )
        self.last_load = self.load.usual
        # What this device reported: the policy version it ran when a task started -> tasks
        # whose outcome produced a telemetry event (what the server must hold, per version).
        self.reported: Counter[int] = Counter()
        self.applied: list[int | None] = []  # versions in the order the SDK applied them
        config = fleet.config
        state_dir = config.state_dir
        # Drawn after the profiles, so a seed gives the same devices on either transport.
        mqtt = config.transport == "mqtt" or (
            config.transport == "mixed" and rng.random() < config.mqtt_share
        )
        self.transport = "mqtt" if mqtt else "websocket"
        # Drawn last (and only for a mixed fleet), so other encodings keep the same devices.
        protobuf = config.encoding == "protobuf" or (
            config.encoding == "mixed" and rng.random() < config.protobuf_share
        )
        self.encoding = "protobuf" if protobuf else "json"
        wire_format: WireFormat = "json"
        if protobuf:
            wire_format = "protobuf" if mqtt else "auto"
        self.device = Device(
            DeviceConfig(
                base_url=config.base_url,
                fleet_key=config.fleet_key,
                device_id=self.device_id,
                platform=self.profile.platform,
                model=self.profile.model,
                attributes=profile_attributes(self.profile, self.device_id),
                state_dir=state_dir / self.device_id if state_dir is not None else None,
                telemetry_flush_s=config.telemetry_flush_s,
                mqtt_url=config.mqtt_url if mqtt else "",
                wire_format=wire_format,
            ),
            transport=self.transport,
            readings=self.readings,
            device_infer=self.device_infer,
            cloud_infer=self.cloud_infer,
            refine_infer=self.refine_infer,
            http=fleet.http,
            rng=random.Random(rng.random()),
            clock=fleet.clock,
            wall_clock=fleet.wall_clock,
        )
        self.device.add_listener(self._on_event)
        self._loop_task: asyncio.Task[None] | None = None

    # --- what an app supplies --------------------------------------------------------------

    def readings(self) -> Readings:
        """Live readings: the link and load models now, and the cloud's current estimate."""
        fleet = self.fleet
        now = fleet.elapsed()
        link = self.link.reading(now, fleet.scenario.network(now))
        self.last_link = link
        self.last_load = self.load.reading(now)
        return Readings(
            rtt_ms=link.rtt_ms,
            bandwidth_kbps=link.bandwidth_kbps,
            device_load=self.last_load,
            online=link.online or not fleet.config.offline_spells,
            cloud_infer_ms=fleet.cloud.estimate_ms(now, fleet.scenario.cloud_capacity(now)),
        )

    async def device_infer(self, task: Task) -> dict[str, Any]:
        """The small model: tens of ms, slower under load; fails now and then."""
        delay_ms = device_infer_ms(
            self.profile, task.task_type, task.tokens, self.last_load, self.rng
        )
        await asyncio.sleep(delay_ms / 1000)
        if self.rng.random() < self.profile.failure_rate:
            raise DeviceFailure(f"{self.profile.model}: on-device inference failed")
        return {"side": "device", "ms": delay_ms}

    async def cloud_infer(self, task: Task, decision: Decision) -> dict[str, Any]:
        """The large model: upload + RTT + T_infer from the shared queue; refuses work when
        the cloud is past capacity. The SDK enforces the cell's cloud timeout."""
        fleet = self.fleet
        now = fleet.elapsed()
        capacity = fleet.scenario.cloud_capacity(now)
        fleet.cloud.arrival(now)
        link = self.last_link
        if self.rng.random() < fleet.cloud.failure_rate(now, capacity):
            await asyncio.sleep(link.rtt_ms / 1000)
            raise CloudOverloaded("503 from the cloud model")
        delay_ms = (
            upload_ms(task.upload_bytes, link.bandwidth_kbps)
            + link.rtt_ms
            + fleet.cloud.infer_ms(task.task_type, task.tokens, now, self.rng, capacity)
        )
        await asyncio.sleep(min(delay_ms / 1000, _LONGEST_SLEEP_S))
        return {"side": "cloud", "ms": delay_ms, "route": decision.route}

    async def refine_infer(self, request: RefineRequest) -> RefineOutcome:
        """The large model refining the device's draft (draft_refine, and shadow refines):
        timed like a cloud call; whether it changes the draft is drawn from the device
        model's keep curve at the task's score (`quality.QualityModel`)."""
        refined = await self.cloud_infer(request.task, request.decision)
        quality = self.fleet.quality_for(self.device.policy.version)
        cell = self.device.policy.cell(request.task)
        score = _score(request.task, request.decision, cell)
        changed, edit_ratio = quality.draw_refine(self.rng, request.task, score)
        stats = self.fleet.stats
        stats.refines += 1
        stats.refines_changed += changed
        return RefineOutcome(result=refined, changed=changed, edit_ratio=edit_ratio)

    def rate_later(self, outcome: Outcome, task: Task, quality: QualityModel) -> None:
        """The simulated app rates some answers (`feedback_share`), late: around the device
        model's keep rate for a device answer, around the cloud's quality otherwise."""
        config = self.fleet.config
        if outcome.event_id is None or not outcome.ok or self.rng.random() >= config.feedback_share:
            return
        cell = self.device.policy.cell(task)
        score = _score(task, outcome.decision, cell)
        on_device = outcome.route == "device" and not outcome.cache_hit
        rating = quality.draw_quality(self.rng, task, score, on_device=on_device)
        delay = self.rng.uniform(*config.feedback_delay_s)
        asyncio.get_running_loop().call_later(delay, self._feedback, outcome.event_id, rating)

    def _feedback(self, event_id: str, quality: float) -> None:
        self.device.feedback(event_id, quality)
        self.fleet.stats.feedback += 1

    # --- the device's life -------------------------------------------------------------------

    def _on_event(self, event: str, details: dict[str, Any]) -> None:
        if event == "policy":
            self.applied.append(details.get("version"))
        elif event == "queued_result":
            # A task held while offline, run now: it reports the version it runs under now.
            outcome = details["outcome"]
            self.fleet.stats.queued_done += 1
            self._count(outcome, outcome.policy_version, buggy=False)

    def _count(self, outcome: Outcome, version: int | None, *, buggy: bool) -> None:
        self.fleet.stats.record(outcome, buggy=buggy)
        if version is not None:
            self.reported[version] += 1

    async def start(self) -> None:
        """Start the SDK device and this device's stream of tasks."""
        await self.device.start()
        self.start_tasks()

    def start_tasks(self) -> None:
        """Start this device's stream of tasks (the SDK device's connection is not touched)."""
        self._loop_task = asyncio.create_task(self._task_loop(), name=f"tasks {self.device_id}")

    async def stop_tasks(self) -> None:
        """Stop producing tasks (a task in flight is abandoned, unreported)."""
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
            self._loop_task = None

    async def flush_telemetry(self, timeout_s: float) -> None:
        """One attempt to deliver what is pending (a failure keeps it pending)."""
        try:
            async with asyncio.timeout(timeout_s):
                await self.device.telemetry.flush()
        except Exception:  # the SDK keeps the batch; the caller decides whether to retry
            logger.debug("sim.flush_failed device=%s", self.device_id, exc_info=True)

    async def stop(self) -> None:
        """Stop producing tasks, then stop the SDK device (last telemetry flush)."""
        await self.stop_tasks()
        await self.device.stop()

    def next_task(self) -> tuple[TaskDraw, ModelConfidence]:
        """The next task this device's user asks for, and the model that scores it."""
        document = self.device.policy.document
        workload = self.fleet.workload_for(document)
        model = self.fleet.model_for(self.device.policy.version)
        return workload.draw(self.rng, model), model

    async def _task_loop(self) -> None:
        # The app's user starts asking once the device knows its fleet's policy (at once for
        # a device with one stored under its state_dir): tasks answered with no policy at all
        # are not reported, so they would only blur the fleet's figures.
        while self.device.policy.version is None:
            await asyncio.sleep(_POLICY_WAIT_S)
        loop = asyncio.get_running_loop()
        rate = self.fleet.per_device_rate
        next_at = loop.time() + self.rng.expovariate(rate)
        while True:
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            draw, model = self.next_task()
            cell = draw.cell
            task = Task(
                task_type=cell[0],
                latency_budget=cell[1],
                privacy_tier=cell[2],
                tokens=draw.tokens,
                intent_conf=draw.intent_conf,
                lm_conf=draw.lm_conf,
                upload_bytes=draw.upload_bytes,
                cache_key=draw.cache_key,
            )
            version = self.device.policy.version
            quality = self.fleet.quality_for(version)
            outcome = await self.device.run(task)
            self.fleet.stats.tasks += 1
            if outcome.queued:
                self.fleet.stats.queued += 1
            else:
                self._count(outcome, version, buggy=model is BUGGY_MODEL)
                self.fleet.stats.degraded_tasks += quality is DEGRADED_QUALITY
                self.rate_later(outcome, task, quality)
            next_at = max(next_at + self.rng.expovariate(rate), loop.time())


class SimulatedFleet:
    """Many `SimDevice`s, one HTTP client, one cloud queue, one scenario clock."""

    def __init__(
        self,
        config: FleetConfig,
        *,
        http: httpx.AsyncClient | None = None,
        output: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        # The scenarios' and the devices' clocks (seconds): the real ones, or a virtual clock
        # (simulate.virtual) under which the whole fleet runs without sleeping.
        self.clock = clock
        self.wall_clock = wall_clock
        self.config = config
        self.scenario: Scenario = scenario_named(config.scenario)
        self.buggy_rule = BuggyRule(version=config.buggy_version, stable=config.stable_version)
        self.cloud = CloudQueue(
            capacity_rps=config.cloud_capacity_rps or config.rate * CLOUD_CAPACITY_PER_TASK
        )
        self.per_device_rate = config.rate / config.devices
        self.stats = FleetStats()
        self.devices: dict[str, SimDevice] = {}
        self.output = output
        self._http = http
        self._owns_http = http is None
        self._started_at: float | None = None
        self._workloads: dict[tuple[tuple[str, ...], ...], Workload] = {}
        self._stopped = asyncio.Event()
        self._runner: asyncio.Task[None] | None = None
        self._last_progress: tuple[float, int, Counter[str], int] | None = None

    @property
    def http(self) -> httpx.AsyncClient:
        """The HTTP client every device shares."""
        if self._http is None:
            limits = httpx.Limits(
                max_connections=self.config.http_connections,
                max_keepalive_connections=self.config.http_connections,
            )
            self._http = httpx.AsyncClient(limits=limits, timeout=30.0, trust_env=False)
        return self._http

    def elapsed(self) -> float:
        """Seconds since the fleet started (the scenarios' clock)."""
        if self._started_at is None:
            return 0.0
        return self.clock() - self._started_at

    def workload_for(self, document: Mapping[str, Any] | None) -> Workload:
        """The task mix of the policy a device runs (one Workload per set of dimensions)."""
        dimensions: Mapping[str, Any] = _SEED_DIMENSIONS
        if document is not None and isinstance(document.get("dimensions"), Mapping):
            dimensions = document["dimensions"]
        key = tuple(tuple(dimensions.get(name) or ()) for name in _SEED_DIMENSIONS)
        workload = self._workloads.get(key)
        if workload is None:
            workload = self._workloads[key] = Workload(
                {name: list(values) for name, values in zip(_SEED_DIMENSIONS, key, strict=True)}
            )
        return workload

    def is_candidate(self, policy_version: int | None) -> bool:
        """Whether `policy_version` is the candidate whose devices run another device model
        (buggy-candidate, degraded-model; never in the other scenarios)."""
        if not self.scenario.has_candidate or policy_version is None:
            return False
        rule = self.buggy_rule
        if rule.version is None and rule.stable is None:
            # The fleet's stable version: the lowest any device runs once the first has one.
            versions = [d.device.policy.version for d in self.devices.values()]
            stable = min((v for v in versions if v is not None), default=policy_version)
            self.buggy_rule = rule = BuggyRule(stable=stable)
            self._say(
                f"{self.scenario.name}: versions newer than v{stable} run the candidate's model"
            )
        return rule.is_buggy(policy_version)

    def model_for(self, policy_version: int | None) -> ModelConfidence:
        """The on-device model's confidence on a device running `policy_version`."""
        if self.scenario.buggy_candidate and self.is_candidate(policy_version):
            return BUGGY_MODEL
        return STABLE_MODEL

    def quality_for(self, policy_version: int | None) -> QualityModel:
        """The on-device model's quality on a device running `policy_version`."""
        if self.scenario.degraded_candidate and self.is_candidate(policy_version):
            return DEGRADED_QUALITY
        return STABLE_QUALITY

    # --- running ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Create the devices and start them, staggered, in the background."""
        self.create_devices()
        self._runner = asyncio.create_task(self._start_staggered(), name="fleet start")

    def create_devices(self) -> None:
        """Start the scenario clock and create the devices (not started)."""
        self._started_at = self.clock()
        rng = random.Random(self.config.seed)
        for index in range(self.config.devices):
            sim = SimDevice(self, index, random.Random(rng.random()))
            self.devices[sim.device_id] = sim

    async def _start_staggered(self) -> None:
        gap = 1.0 / self.config.connect_per_s
        loop = asyncio.get_running_loop()
        began = loop.time()
        for number, sim in enumerate(self.devices.values()):
            await asyncio.sleep(max(0.0, began + number * gap - loop.time()))
            await sim.start()

    async def stop(self, drain_s: float = DRAIN_S) -> None:
        """Stop every device's tasks, deliver what telemetry is pending (for up to `drain_s`,
        a few devices at a time, so the server is not hit by the whole fleet at once), then
        stop the devices and the HTTP client. What is still pending after that is kept under
        `state_dir` (when there is one) and sent by the next run."""
        self._stopped.set()
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
        sims = list(self.devices.values())
        await asyncio.gather(*(sim.stop_tasks() for sim in sims))
        await self._drain_telemetry(sims, drain_s)
        limit = asyncio.Semaphore(_STOP_CONCURRENCY)

        async def stop_one(sim: SimDevice) -> None:
            async with limit:
                try:
                    await sim.device.stop()
                except Exception:
                    logger.warning("sim.device_stop_failed device=%s", sim.device_id, exc_info=True)

        await asyncio.gather(*(stop_one(sim) for sim in sims))
        if self._owns_http and self._http is not None:
            await self._http.aclose()
            self._http = None

    async def _drain_telemetry(self, sims: list[SimDevice], drain_s: float) -> None:
        """Rounds of flushes (a few devices at a time) while a round delivers something and
        `drain_s` has not passed: a server that went away ends it after one round."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + drain_s
        limit = asyncio.Semaphore(_STOP_CONCURRENCY)

        async def flush(sim: SimDevice) -> None:
            async with limit:
                await sim.flush_telemetry(max(0.1, deadline - loop.time()))

        pending = sum(sim.device.telemetry.pending for sim in sims)
        while pending and loop.time() < deadline:
            await asyncio.gather(*(flush(sim) for sim in sims if sim.device.telemetry.pending))
            left = sum(sim.device.telemetry.pending for sim in sims)
            if left >= pending:
                return
            pending = left

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Start, print a progress line every `progress_s`, stop after `duration_s` or when
        `stop` is set; always stops the devices cleanly."""
        stop = stop or asyncio.Event()
        await self.start()
        loop = asyncio.get_running_loop()
        deadline = None if self.config.duration_s is None else loop.time() + self.config.duration_s
        try:
            while not stop.is_set():
                timeout = self.config.progress_s
                if deadline is not None:
                    timeout = min(timeout, deadline - loop.time())
                    if timeout <= 0:
                        break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout)
                self._say(self.progress_line())
        finally:
            self._say("stopping: flushing telemetry of every device")
            await self.stop()
            self._say(self.summary_line())

    # --- reporting -------------------------------------------------------------------------

    def telemetry_totals(self) -> dict[str, int]:
        """Telemetry counters summed over the fleet."""
        totals: Counter[str] = Counter()
        for sim in self.devices.values():
            totals.update(sim.device.telemetry.counters())
        return dict(totals)

    def connection_states(self) -> Counter[str]:
        """How many devices are in each connection state."""
        return Counter(sim.device.connection_state for sim in self.devices.values())

    def progress_line(self) -> str:
        """One line: devices online, tasks/s, α and cloud share (over the last interval),
        fallbacks, latency, the cloud's state and telemetry delivery."""
        now = self.elapsed()
        stats = self.stats
        decided = Counter(stats.decided)
        fallbacks = sum(stats.fallbacks.values())
        previous = self._last_progress or (0.0, 0, Counter(), 0)
        self._last_progress = (now, stats.finished, decided, fallbacks)
        interval = max(1e-9, now - previous[0])
        done = stats.finished - previous[1]
        recent = decided - previous[2]
        states = self.connection_states()
        online = sum(states[s] for s in ONLINE_STATES)
        # Connected devices by how their push channel is carried (a mixed fleet says both).
        pushed = Counter(
            sim.transport
            for sim in self.devices.values()
            if sim.device.connection_state == "connected"
        )
        channels = (
            f"socket {pushed['websocket']}, mqtt {pushed['mqtt']}"
            if self.config.transport != "websocket"
            else f"socket {states['connected']}"
        )
        latencies, stats.latencies_ms = stats.latencies_ms, []
        capacity = self.scenario.cloud_capacity(now)
        events = self.telemetry_totals()
        parts = [
            f"[{now:6.0f}s] online {online}/{len(self.devices)}"
            f" ({channels}, polling {states['polling']},"
            f" offline {states['offline']})",
            f"{done / interval:6.1f} tasks/s",
            f"α {_share(recent['device'], done)} cloud {_share(recent['cloud'], done)}"
            f" d+r {_share(recent['draft_refine'], done)}",
            f"fallbacks {fallbacks - previous[3]} ({_share(fallbacks - previous[3], done)})",
            f"p50 {_quantile(latencies, 0.5)} p95 {_quantile(latencies, 0.95)} ms",
            f"cloud x{self.cloud.slowdown(now, capacity):.1f}",
            f"events delivered {events.get('delivered', 0)} pending {events.get('pending', 0)}"
            f" dropped {events.get('dropped', 0)}",
        ]
        if self.scenario.buggy_candidate and stats.buggy_tasks:
            parts.append(
                f"buggy cohort cloud {_share(stats.buggy_cloud, stats.buggy_tasks)}"
                f" of {stats.buggy_tasks}"
            )
        if stats.refines:
            parts.append(
                f"drafts kept {_share(stats.refines - stats.refines_changed, stats.refines)}"
                f" of {stats.refines} (shadow {stats.shadow_refines})"
            )
        if self.scenario.degraded_candidate and stats.degraded_tasks:
            parts.append(f"degraded cohort tasks {stats.degraded_tasks}")
        return " | ".join(parts)

    def summary_line(self) -> str:
        """The run's totals."""
        stats = self.stats
        events = self.telemetry_totals()
        done = stats.finished
        return (
            f"done: {stats.tasks} tasks ({stats.queued} queued offline, {stats.queued_done} run"
            f" later), α {_share(stats.decided['device'], done)}"
            f" cloud {_share(stats.decided['cloud'], done)},"
            f" fallbacks {dict(stats.fallbacks)}, failed {stats.failed},"
            f" cache hits {stats.cache_hits}; events delivered {events.get('delivered', 0)}"
            f" duplicates {events.get('duplicates', 0)} pending {events.get('pending', 0)}"
            f" dropped {events.get('dropped', 0)}"
        )

    def _say(self, line: str) -> None:
        if self.output is not None:
            print(line, file=self.output, flush=True)


def _score(task: Task, decision: Decision, cell: Any) -> float:
    """The task's score: the decision's, or step 4's sum where the decision did not score
    (a device_only cell, an offline interactive task)."""
    if decision.score is not None:
        return decision.score
    if cell is None:
        return 0.0
    length, intent, lm = score_terms(cell, task)
    return length + intent + lm


def _share(part: float, whole: float) -> str:
    return f"{part / whole:.2f}" if whole else "-"


def _quantile(values: list[float], q: float) -> str:
    if len(values) < 2:
        return "-"
    return f"{statistics.quantiles(values, n=100)[round(q * 100) - 1]:.0f}"


def reported_by_device(fleet: SimulatedFleet) -> dict[str, dict[int, int]]:
    """device id -> policy version -> tasks that produced a telemetry event (for checks)."""
    return {d: dict(sim.reported) for d, sim in fleet.devices.items()}
