"""bench/mqtt: a rollout stage change reaching N MQTT devices, against a bare broker publish.

    .venv/bin/python -m bench.mqtt                                  # 1,000 / 5,000 / 15,000 on
                                                                    # one broker, 45,000 on three
    .venv/bin/python -m bench.mqtt --devices 20 --reps 1            # a quick check, seconds

For each size: fresh Mosquitto brokers on free loopback ports (bench/mqtt/brokers.py; three are
bridged from the one the control plane publishes to, as a cluster forwards a publish), the
fleet's retained topics published by the control plane's own code (`version_document_publish`
for every version, `fleets_reconcile(force=True)`), then N devices (bench/mqtt/devices.py: raw
MQTT 5 connections doing what the SDK's MQTT transport does, the version computed with
`edge_sdk.assignment`) in a few client processes, each bound to its own 127.0.0.x. Then, per
repetition, a new version is published (outside the timing: each repetition is a new rollout
of a new candidate; the bench waits until the devices' prefetches after the publish have
ended) and three changes are made through the real services in this process —
`rollout_start` (→ 5%), `rollout_advance` (5% → 25%), `rollout_rollback` — each followed, in the
same run, by the baseline: a bare retained QoS 1 publish of a message the size of the state to
the same devices (a topic they all subscribe to, on the same broker, through the same bridges).

The devices prefetch as the SDK does (edge_sdk/transport/mqtt.py): a state that names a
stable, candidate or newest published version (`published`, since session 11) whose document a
device does not hold makes it take that document in the background after a random wait in
[0, `--prefetch-jitter-s`] (the SDK's `mqtt_prefetch_jitter_s`, 2 s here by default), and it
holds its last few versions' documents. Publishing the version (outside the timing) therefore
sends every device its document, and the bench waits until every device's prefetch after the
publish has ended before it starts the rollout, as a rollout follows a publish by minutes or
hours: the start, 5% → 25% and the rollback then carry only the state. Before the next change
(and before the baseline) it waits likewise, as a real rollout's stages are minutes apart.
`--no-prefetch-published` is session 10's SDK (the candidate taken only once a rollout names
it: the start costs the 5% cohort a document while the rest take it in the background);
`--no-prefetch` the SDK before session 10 (every device whose version changes takes the
document then).

Since session 14 the devices also spread their acks as the SDK does (a random wait in
[0, `--ack-jitter-s`], the SDK's `mqtt_ack_jitter_s`; the bench waits until every ack is out
before the next measurement), and each client process handles its messages once its socket
reads are over (since session 17: it has read nothing for 2 ms; `--work-turn-over`, sessions 15
and 16: a turn of its loop read nothing), a device settling at its own receipt plus its own
handling time, as devices with their own processors would (`--shared-cpu`: handled as read, the
bench before session 14).

Measured:
- ours: from just before the service call to the LAST device running its version for the new
  state (those whose version changes after taking the retained document), checked device by
  device against the server's `fleet_assignment(...).version_for`;
- baseline: from just before the publish to the last device's receipt;
- control plane: CPU time of this process over the service call (its transaction and the
  publish on commit, which waits for the broker's PUBACK) and the publishes it made;
- memory per connection: the brokers' VmRSS with N connected minus before, over N, and the
  client processes' likewise.

Every phase has a deadline and every process started here is stopped at the end.
"""

import argparse
import contextlib
import json
import math
import multiprocessing
import os
import signal
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from bench import database_url, redis_url
from bench.fanout.run import BenchError, Processes, publish_version, recreate_database, rss_kib
from edge_sdk.config import DeviceConfig

from .brokers import Broker, start_brokers

BENCH_FLEET = "bench-mqtt"
DEFAULT_DATABASE_URL = database_url("bench_mqtt")
DEFAULT_REDIS_URL = redis_url("redis://127.0.0.1:6379/14")
DEFAULT_SIZES = ["1000", "5000", "15000", "45000:3"]
# The figures of record (bench/RESULTS.md, sessions 10 and 11) spread the prefetch over 2 s: the
# herd's worst case on one machine, and a run that ends in minutes. The SDK's own default is longer
# (DeviceConfig.mqtt_prefetch_jitter_s), so a real rollout start is not a herd.
PREFETCH_JITTER_S = 2.0
CONNECTS_IN_FLIGHT = 90  # per broker, over all client processes
SCENARIOS = {"start": "rollout start → 5%", "advance": "5% → 25%", "rollback": "rollback"}


@dataclass
class Timing:
    """One change: receipt times relative to the trigger, ms."""

    last_ms: float
    median_ms: float
    reached: int = 0  # devices whose version changed (ours) or got the message (baseline)
    call_ms: float = 0.0
    cpu_ms: float = 0.0
    publishes: int = 0
    committed_ms: float = 0.0  # when the change's transaction had committed (its hooks began)
    publish_ms: float = 0.0  # when the control plane handed the state to its MQTT client
    state_last_ms: float = 0.0  # when the last device received the state itself
    round_trips: int = 0  # devices that took their version's document after the state


@dataclass
class Row:
    """One (N, scenario) over the repetitions."""

    devices: int
    brokers: int
    scenario: str
    ours: list[Timing] = field(default_factory=list)
    baseline: list[Timing] = field(default_factory=list)


class ClientPool:
    """K client processes, each holding a share of the devices from its own source address."""

    def __init__(self, procs: Processes, count: int) -> None:
        from . import devices

        context = multiprocessing.get_context("spawn")
        self.pipes: list[Connection] = []
        self.pids: list[int] = []
        for index in range(count):
            mine, theirs = context.Pipe()
            worker = context.Process(
                target=devices.main, args=(theirs,), name=f"mqtt-devices-{index}", daemon=True
            )
            worker.start()
            procs.workers.append(worker)
            self.pipes.append(mine)
            assert worker.pid is not None
            self.pids.append(worker.pid)

    def call(
        self, cmd: str, timeout: float = 60.0, per_worker: list[dict[str, Any]] | None = None
    ) -> list[dict[str, Any]]:
        for index, pipe in enumerate(self.pipes):
            pipe.send({"cmd": cmd, "args": per_worker[index] if per_worker else {}})
        deadline = time.monotonic() + timeout
        replies = []
        for pipe in self.pipes:
            if not pipe.poll(max(0.0, deadline - time.monotonic())):
                raise BenchError(f"client processes did not answer {cmd!r} within {timeout:.0f}s")
            reply: dict[str, Any] = pipe.recv()
            if "error" in reply:
                raise BenchError(f"client process failed on {cmd!r}: {reply['error']}")
            replies.append(reply)
        return replies

    def wait(self, seq: int, marker: int, key: str, expected: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            args = {"seq": seq, "marker": marker}
            got = sum(r[key] for r in self.call("count", per_worker=[args] * len(self.pipes)))
            if got >= expected:
                return
            if time.monotonic() > deadline:
                raise BenchError(f"{key}: {got} of {expected} devices within {timeout:.0f}s")
            time.sleep(0.02)

    def collect(
        self, seq: int, marker: int
    ) -> tuple[dict[str, list[Any]], dict[str, float], float, int]:
        """Each device's settling on state `seq` (time, version), receipt of the baseline's
        `marker`, when the last device received state `seq` itself, and how many devices took
        their version's document after the state (a round trip)."""
        settled: dict[str, list[Any]] = {}
        markers: dict[str, float] = {}
        state_last = 0.0
        round_trips = 0
        args = {"seq": seq, "marker": marker}
        for reply in self.call("collect", per_worker=[args] * len(self.pipes)):
            settled.update(reply["settled"])
            markers.update(reply["markers"])
            state_last = max(state_last, reply["state_last"])
            round_trips += reply["round_trips"]
        return settled, markers, state_last, round_trips

    def stop(self) -> None:
        with contextlib.suppress(BenchError, OSError, EOFError):
            self.call("stop", timeout=20)


# --- the fleet and the control plane -----------------------------------------------------------


def prepare_fleet() -> Any:
    """The fleet `bench-mqtt` with published versions 1, 2, 3 (no device rows: the brokers
    here are anonymous, and enrolment is not what is measured)."""
    from routing_policies import services
    from routing_policies.cell_schema import SEED_DIMENSIONS
    from routing_policies.demo import demo_table

    fleet = services.fleet_create(
        actor=None,
        slug=BENCH_FLEET,
        name="Bench MQTT",
        dimensions={k: list(v) for k, v in SEED_DIMENSIONS.items()},
        table=demo_table(),
    )
    for number in (1, 2, 3):
        publish_version(fleet, number)
    return fleet


def published_versions(fleet: Any) -> list[int]:
    from routing_policies.models import PolicyVersion

    return sorted(
        PolicyVersion.objects.filter(fleet=fleet, published_at__isnull=False).values_list(
            "number", flat=True
        )
    )


def point_control_plane_at(broker: Broker, fleet: Any) -> int:
    """MQTT_URL → this broker; retain every version's document and the fleet's state with the
    control plane's own functions (a fresh broker). The publishes made."""
    from django.conf import settings

    from routing_policies.mqtt.publish import fleets_reconcile, version_document_publish

    settings.MQTT_URL = broker.url
    published = sum(
        version_document_publish(fleet_id=fleet.pk, number=n) for n in published_versions(fleet)
    )
    return published + fleets_reconcile(force=True)


def fleet_seq(fleet: Any) -> int:
    from routing_policies.mqtt.models import MqttFleetState

    return int(MqttFleetState.objects.get(fleet_id=fleet.pk).seq)


def state_bytes(fleet: Any) -> int:
    from routing_policies.mqtt.models import MqttFleetState

    row = MqttFleetState.objects.get(fleet_id=fleet.pk)
    return len(json.dumps({"seq": row.seq, **(row.state or {})}, separators=(",", ":")))


def document_size(fleet: Any, number: int) -> int:
    """The bytes of version `number`'s retained document (what a device of its cohort takes)."""
    from routing_policies.models import PolicyVersion
    from routing_policies.mqtt.publish import document_bytes

    return len(document_bytes(PolicyVersion.objects.get(fleet=fleet, number=number)))


def change(fleet: Any, scenario: str, candidate: int) -> None:
    """One stage change through the real services (their publish runs on commit)."""
    from routing_policies import services

    if scenario == "start":
        services.rollout_start(actor=None, fleet=fleet, version=candidate)
    elif scenario == "advance":
        services.rollout_advance(actor=None, fleet=fleet, to_stage=25)
    else:
        services.rollout_rollback(actor=None, fleet=fleet, reason="bench", automatic=False)


class BarePublisher:
    """The baseline: a plain paho MQTT 5 client publishing retained at QoS 1."""

    def __init__(self, broker: Broker, properties: bool = True) -> None:
        import paho.mqtt.client as paho
        from paho.mqtt.enums import CallbackAPIVersion

        self.client = paho.Client(
            CallbackAPIVersion.VERSION2, client_id=f"bench-bare-{os.getpid()}", protocol=5
        )
        self.properties = properties
        self.client.connect("127.0.0.1", broker.port)
        self.client.loop_start()

    def publish(self, topic: str, payload: bytes) -> None:
        """Retained, QoS 1, with the control plane's MQTT 5 properties (UTF-8 JSON); returns
        on the broker's PUBACK, as the control plane's publish does."""
        from routing_policies.mqtt.client import publish_properties

        properties = publish_properties() if self.properties else None
        info = self.client.publish(topic, payload, qos=1, retain=True, properties=properties)
        info.wait_for_publish(10)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


# --- one size ------------------------------------------------------------------------------------


@dataclass
class Context:
    """What one size's measurements share."""

    fleet: Any
    pool: ClientPool
    bare: BarePublisher
    device_ids: list[str]
    stable: int
    candidate: int
    prefix: str
    log: Any
    marker: int = 0
    running: dict[str, int] = field(default_factory=dict)  # each device's version


def _times(values: list[float], t0: float) -> tuple[float, float]:
    relative = sorted((v - t0) * 1000 for v in values)
    return relative[-1], relative[len(relative) // 2]


def measure_change(ctx: Context, scenario: str) -> Timing:
    """Ours: the service call until every device runs its version for the new state."""
    from routing_policies.mqtt import receivers
    from routing_policies.mqtt.client import publisher
    from routing_policies.selectors import fleet_assignment

    n = len(ctx.device_ids)
    ctx.pool.call("mark")
    control_plane = publisher()
    published_before = control_plane.published
    handed: list[float] = []
    committed: list[float] = []
    real_publish = control_plane.publish
    real_hook = receivers.fleet_state_publish

    def timed_publish(topic: str, payload: bytes, **options: Any) -> bool:
        handed.append(time.time())  # the real publish follows: only its start is noted
        return real_publish(topic, payload, **options)

    def timed_hook(**options: Any) -> bool:
        committed.append(time.time())  # the link's on-commit hook: the change has committed
        return real_hook(**options)

    setattr(control_plane, "publish", timed_publish)  # noqa: B010
    setattr(receivers, "fleet_state_publish", timed_hook)  # noqa: B010
    t0 = time.time()
    cpu0 = time.process_time()
    try:
        change(ctx.fleet, scenario, ctx.candidate)
    finally:
        cpu_ms = (time.process_time() - cpu0) * 1000
        delattr(control_plane, "publish")
        setattr(receivers, "fleet_state_publish", real_hook)  # noqa: B010
    call_ms = (time.time() - t0) * 1000
    publishes = publisher().published - published_before
    seq = fleet_seq(ctx.fleet)
    ctx.pool.wait(seq, -1, "settled", n, timeout=max(30, n / 200))
    settled, _, state_last, round_trips = ctx.pool.collect(seq, -1)
    # The background prefetches (after their jitter) end before the next measurement.
    ctx.pool.wait(seq, -1, "idle", n, timeout=max(60, n / 100))
    assignment = fleet_assignment(ctx.fleet.pk)
    wrong = [d for d in ctx.device_ids if settled[d][1] != assignment.version_for(d)]
    if wrong:
        raise BenchError(f"{len(wrong)} devices run a wrong version after {scenario}: {wrong[:3]}")
    took = sum(1 for d in ctx.device_ids if settled[d][1] != ctx.running[d])
    ctx.running.update({d: settled[d][1] for d in ctx.device_ids})
    last, median = _times([settled[d][0] for d in ctx.device_ids], t0)
    publish_ms = (handed[0] - t0) * 1000 if handed else float("nan")
    committed_ms = (committed[0] - t0) * 1000 if committed else float("nan")
    timing = Timing(last, median, took, call_ms, cpu_ms, publishes, committed_ms, publish_ms)
    timing.state_last_ms = (state_last - t0) * 1000
    timing.round_trips = round_trips
    return timing


def measure_bare(ctx: Context, size: int) -> Timing:
    """The baseline: a bare retained publish of `size` bytes reaching the same devices."""
    n = len(ctx.device_ids)
    ctx.marker += 1
    payload = (b"%012d" % ctx.marker).ljust(size, b" ")
    topic = f"{ctx.prefix}/fleets/{BENCH_FLEET}/bench/baseline"
    ctx.pool.call("mark")
    t0 = time.time()
    cpu0 = time.process_time()
    ctx.bare.publish(topic, payload)
    cpu_ms = (time.process_time() - cpu0) * 1000
    call_ms = (time.time() - t0) * 1000
    ctx.pool.wait(0, ctx.marker, "marked", n, timeout=max(30, n / 200))
    _, markers, _, _ = ctx.pool.collect(0, ctx.marker)
    last, median = _times(list(markers.values()), t0)
    return Timing(last, median, len(markers), call_ms, cpu_ms, 1)


def publish_and_wait(ctx: Context, rep: int) -> int:
    """Publish the version this repetition rolls out (outside the timing), then wait until
    every device has the publish's state (naming it as `published`) and has ended the
    prefetches it started, over the jitter: a rollout follows a publish by minutes or hours,
    not milliseconds. The version's number."""
    n = len(ctx.device_ids)
    published_at = time.monotonic()
    number = publish_version(ctx.fleet, max(published_versions(ctx.fleet)) + 1)
    seq = fleet_seq(ctx.fleet)
    ctx.pool.wait(seq, -1, "settled", n, timeout=max(30, n / 200))
    ctx.pool.wait(seq, -1, "idle", n, timeout=max(60, n / 100))
    ctx.log(
        f"  n={n} rep {rep + 1}: v{number} published; every device had the state naming it and "
        f"had ended its prefetches {time.monotonic() - published_at:.1f} s later (the rollout "
        "starts 1 s after that)"
    )
    return number


def _settle(seconds: float) -> None:
    time.sleep(seconds)  # let the acks and unsubscribes of the last change drain


def measure_size(
    procs: Processes, args: argparse.Namespace, fleet: Any, n: int, broker_count: int, log: Any
) -> tuple[list[Row], dict[str, float]]:
    """Brokers, devices, the repetitions; the rows and the memory figures of this size."""
    from django.conf import settings

    from routing_policies.selectors import fleet_assignment

    prefix = settings.MQTT_TOPIC_PREFIX
    directory = Path(tempfile.mkdtemp(prefix=f"bench-mqtt-{n}-"))
    brokers = start_brokers(broker_count, directory, prefix, procs.popens)
    point_control_plane_at(brokers[0], fleet)
    assignment = fleet_assignment(fleet.pk)
    stable = assignment.stable
    assert stable is not None
    candidate = max(set(published_versions(fleet)) - {stable})
    processes = max(args.client_processes, math.ceil(n / args.per_process))
    if processes > 250:
        raise BenchError("more client processes than loopback source addresses used here")
    pool = ClientPool(procs, processes)
    broker_rss_before = sum(rss_kib(b.pid) for b in brokers)
    device_ids = [f"bench-{index:05d}" for index in range(n)]
    shares: list[list[list[Any]]] = [[] for _ in range(processes)]
    for index, device_id in enumerate(device_ids):
        shares[index % processes].append([device_id, index % broker_count])
    connect_args = [
        {
            "devices": share,
            "brokers": [["127.0.0.1", b.port] for b in brokers],
            "source": f"127.0.0.{2 + k}",
            "fleet": BENCH_FLEET,
            "prefix": prefix,
            "stable": stable,
            # Mosquitto listens with a backlog of 100: more connects in flight per broker
            # overflow it, and the dropped ones wait for SYN retransmits (1 s, 3 s, 7 s …).
            "concurrency": max(10, CONNECTS_IN_FLIGHT * broker_count // processes),
            "prefetch": not args.no_prefetch,
            "prefetch_jitter_s": args.prefetch_jitter_s,
            "prefetch_published": not args.no_prefetch_published,
            "work": _work_mode(args),
            "ack_jitter_s": args.ack_jitter_s,
        }
        for k, share in enumerate(shares)
    ]
    began = time.monotonic()
    replies = pool.call("connect", timeout=max(60, n / 100), per_worker=connect_args)
    pool.wait(fleet_seq(fleet), -1, "settled", n, timeout=60)
    pool.wait(fleet_seq(fleet), -1, "idle", n, timeout=60)
    log(f"n={n} on {broker_count} broker(s): connected in {time.monotonic() - began:.1f} s")
    _settle(1.0)
    memory = {
        "broker_before": broker_rss_before,
        "broker_after": sum(rss_kib(b.pid) for b in brokers),
        "client_before": sum(r["rss_before"] for r in replies),
        "client_after": sum(r["rss"] for r in replies),
        "processes": processes,
    }
    bare = BarePublisher(brokers[0])
    ctx = Context(fleet, pool, bare, device_ids, stable, candidate, prefix, log)
    ctx.running = dict.fromkeys(device_ids, stable)
    rows = {s: Row(n, broker_count, s) for s in SCENARIOS}
    size = state_bytes(fleet)
    log(f"  the state: {size} B; a version's document: {document_size(fleet, candidate)} B")
    try:
        for rep in range(args.reps):
            ctx.candidate = publish_and_wait(ctx, rep)
            _settle(1.0)
            for scenario in SCENARIOS:
                ours = measure_change(ctx, scenario)
                _settle(0.3)
                base = measure_bare(ctx, size)
                _settle(0.3)
                rows[scenario].ours.append(ours)
                rows[scenario].baseline.append(base)
                log(
                    f"  n={n} rep {rep + 1} {scenario}: ours last {ours.last_ms:.0f} ms "
                    f"(median {ours.median_ms:.0f}, {ours.reached} changed version, "
                    f"{ours.round_trips} of them after a round trip, call "
                    f"{ours.call_ms:.0f} ms, state at the last device after "
                    f"{ours.state_last_ms:.0f} ms, publish after {ours.publish_ms:.0f} ms, CPU "
                    f"{ours.cpu_ms:.1f} ms, {ours.publishes} publish); bare last "
                    f"{base.last_ms:.0f} ms (median {base.median_ms:.0f})"
                )
    finally:
        bare.close()
        pool.call("close", timeout=120)
        pool.stop()
        for broker in brokers:
            broker.stop()
    return list(rows.values()), memory


# --- the report ----------------------------------------------------------------------------------


def _med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


CPU_MODES = {
    "reads_quiet": "each device's handling of a message is done once its client process has read "
    "nothing for 2 ms (the fan-out to it is over) and it settles at its receipt plus its own "
    "handling time, as devices with their own processors would (since session 17)",
    "reads_over": "each device's handling of a message is done once a turn of its client "
    "process's loop reads nothing (which may fall within a fan-out) and it settles at its "
    "receipt plus its own handling time (--work-turn-over: sessions 15 and 16)",
    "each_turn": "each device's handling of a message is done after the socket reads of that "
    "turn of the loop, so a turn's handling still delays the next turn's reads "
    "(--work-each-turn: session 14)",
    "as_read": "each message handled as it is read (--shared-cpu: a device's receipt waits for the "
    "work of the devices read before it in the same process, the bench before session 14)",
}


def _work_mode(args: argparse.Namespace) -> str:
    if args.shared_cpu:
        return "as_read"
    if args.work_each_turn:
        return "each_turn"
    return "reads_over" if args.work_turn_over else "reads_quiet"


def render_table(rows: list[Row], memory: dict[str, dict[str, float]], work: str) -> str:
    header = (
        "| N | brokers | change | devices whose version changed "
        "| of which took the document then (a round trip) | ours last / median ms "
        "| bare publish last / median ms | ratio last (ours/bare) | target | met "
        "| ours: the state itself at the last device ms "
        "| service call ms | committed after ms | of which before the publish ms "
        "| ratio last from the commit (ours − committed)/bare "
        "| ratio last from the publish (ours − before the publish)/bare "
        "| control-plane CPU ms per change | publishes per change |"
    )
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for row in rows:
        ours_last = _med([t.last_ms for t in row.ours])
        bare_last = _med([t.last_ms for t in row.baseline])
        ratio = ours_last / bare_last if bare_last else float("nan")
        publishes = sorted({t.publishes for t in row.ours})
        lines.append(
            f"| {row.devices:,} | {row.brokers} | {SCENARIOS[row.scenario]} "
            f"| {_med([t.reached for t in row.ours]):,.0f} "
            f"| {_med([t.round_trips for t in row.ours]):,.0f} "
            f"| {ours_last:.0f} / {_med([t.median_ms for t in row.ours]):.0f} "
            f"| {bare_last:.0f} / {_med([t.median_ms for t in row.baseline]):.0f} "
            f"| {ratio:.2f}× | ≤ 1.5× | {'yes' if ratio <= 1.5 else 'NO'} "
            f"| {_med([t.state_last_ms for t in row.ours]):.0f} "
            f"| {_med([t.call_ms for t in row.ours]):.0f} "
            f"| {_med([t.committed_ms for t in row.ours]):.0f} "
            f"| {_med([t.publish_ms for t in row.ours]):.0f} "
            f"| {_med([t.last_ms - t.committed_ms for t in row.ours]) / bare_last:.2f}× "
            f"| {_med([t.last_ms - t.publish_ms for t in row.ours]) / bare_last:.2f}× "
            f"| {_med([t.cpu_ms for t in row.ours]):.1f} "
            f"| {', '.join(str(p) for p in publishes)} |"
        )
    lines.append("")
    lines.append(
        "| N | brokers | broker RSS 0 → N MiB | broker KiB per connection "
        "| client processes | client RSS 0 → N MiB | client KiB per connection |"
    )
    lines.append("|---|---|---|---|---|---|---|")
    for key, figures in memory.items():
        n = int(figures["devices"])
        lines.append(
            f"| {n:,} | {key.split(':')[1]} "
            f"| {figures['broker_before'] / 1024:.1f} → {figures['broker_after'] / 1024:.1f} "
            f"| {(figures['broker_after'] - figures['broker_before']) / n:.2f} "
            f"| {figures['processes']:.0f} "
            f"| {figures['client_before'] / 1024:.0f} → {figures['client_after'] / 1024:.0f} "
            f"| {(figures['client_after'] - figures['client_before']) / n:.2f} |"
        )
    lines.append("")
    lines.append(
        "A device here: one raw MQTT 5 connection (bench/mqtt/devices.py) subscribed at QoS 1 "
        "to its fleet's retained state and cloud pressure as the SDK's MQTT transport is; on a "
        "new state it computes its version with edge_sdk.assignment and, when that changes, "
        "runs it from the documents it holds or else subscribes to the version's retained "
        "document, takes it, unsubscribes and acks; the versions a state names that it does "
        "not hold (stable, candidate, the newest published) it takes in the background after a "
        "jitter, as the SDK does (since session 10; the newest published since session 11, and "
        "the rollout starts once the prefetches after the version's publish have ended; with "
        "--no-prefetch-published only stable and candidate; with --no-prefetch, none). "
        "'ours': from just before the service call (rollout_start / rollout_advance / "
        "rollout_rollback, which publishes the fleet's retained state on commit) to the last "
        "device running its version for that state; 'bare': a plain paho client's retained "
        "QoS 1 publish of a message of the state's size to the same devices (same brokers, "
        "same bridges). Medians over the repetitions. CPU: this process (the control plane) "
        "over the service call, transaction and publish included; 'the state itself': when the "
        "last device received the new state (before any document); 'before the publish': from "
        "the call to the moment the control plane hands the state to its MQTT client (the "
        "transaction, its commit and the state's read under the fleet's lock), taken out of "
        "ours in the ratio beside it; 'committed after': from the call to the end of the "
        "change's commit (the stage change exists), likewise (for information: the target is "
        "on the ratio of the whole). Devices: " + CPU_MODES[work] + "."
    )
    return "\n".join(lines)


# --- main ----------------------------------------------------------------------------------------


def parse_sizes(values: list[str]) -> list[tuple[int, int]]:
    """`N` or `N:brokers`."""
    sizes = []
    for value in values:
        n, _, brokers = value.partition(":")
        sizes.append((int(n), int(brokers or 1)))
    return sizes


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.mqtt", description=__doc__)
    parser.add_argument(
        "--devices",
        nargs="+",
        default=DEFAULT_SIZES,
        help="sizes, N or N:brokers (default: %(default)s)",
    )
    parser.add_argument("--reps", type=int, default=3, help="repetitions of each change")
    parser.add_argument("--client-processes", type=int, default=1, help="at least this many")
    parser.add_argument(
        "--per-process", type=int, default=7500, help="devices per client process at most"
    )
    parser.add_argument(
        "--no-prefetch",
        action="store_true",
        help="devices as the SDK was before session 10: no background prefetch, no documents "
        "held, so every device whose version changes takes the document's round trip then",
    )
    parser.add_argument(
        "--no-prefetch-published",
        action="store_true",
        help="devices as the SDK was in session 10: they prefetch the stable and candidate a "
        "state names but not its newest published version, so a rollout's 5%% cohort takes the "
        "candidate's document at the start, while the rest prefetch it",
    )
    parser.add_argument(
        "--prefetch-jitter-s",
        type=float,
        default=PREFETCH_JITTER_S,
        help="each device's background prefetch waits a random time in [0, this] "
        "(%(default)s s: the figures of record; the SDK's mqtt_prefetch_jitter_s is longer)",
    )
    parser.add_argument(
        "--ack-jitter-s",
        type=float,
        default=DeviceConfig.mqtt_ack_jitter_s,
        help="each device publishes its ack after a random wait in [0, this] (the SDK's "
        "mqtt_ack_jitter_s, %(default)s s; 0: at once, the SDK before session 14)",
    )
    parser.add_argument(
        "--shared-cpu",
        action="store_true",
        help="each client process handles a message as it reads it, so a device's receipt "
        "waits for the work of the devices read before it in the same turn of the loop (the "
        "bench before session 14); by default a device's work is done once the process's "
        "socket reads are over and it settles at its receipt plus its own handling time, as "
        "devices that each have their own processor would",
    )
    parser.add_argument(
        "--work-turn-over",
        action="store_true",
        help="each client process handles its messages once a turn of its loop reads nothing, "
        "which can fall within a fan-out, so that work may delay the rest's receipt (sessions "
        "15 and 16); by default once it has read nothing for 2 ms",
    )
    parser.add_argument(
        "--work-each-turn",
        action="store_true",
        help="each client process handles the messages of a turn of its loop after that turn's "
        "reads, so that work delays the next turn's reads (session 14)",
    )
    parser.add_argument("--database-url", default=DEFAULT_DATABASE_URL)
    parser.add_argument("--redis-url", default=DEFAULT_REDIS_URL)
    parser.add_argument("--timeout", type=int, default=1500, help="whole run, seconds")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    return parser.parse_args(argv)


def _prefetch_mode(args: argparse.Namespace) -> str:
    if args.no_prefetch:
        return "devices do NOT prefetch (--no-prefetch: the SDK before session 10)"
    if args.no_prefetch_published:
        return (
            "devices prefetch the stable and candidate but not the newest published version "
            "(--no-prefetch-published: session 10's SDK; jitter up to "
            f"{args.prefetch_jitter_s:g} s)"
        )
    return (
        "devices prefetch and hold documents as the SDK does, the newest published version "
        f"included, and the rollout starts once the prefetches after the publish have ended "
        f"(jitter up to {args.prefetch_jitter_s:g} s); acks after a wait up to "
        f"{args.ack_jitter_s:g} s"
    )


def _alarm(signum: int, frame: Any) -> None:
    raise BenchError("the whole run exceeded --timeout")


def _setup(args: argparse.Namespace) -> Any:
    os.environ.update(
        {
            "DATABASE_URL": args.database_url,
            "REDIS_URL": args.redis_url,
            "SECRET_KEY": os.environ.get("SECRET_KEY") or "bench-only-secret",
            "DEBUG": "0",
            "DJANGO_SETTINGS_MODULE": "controlplane.settings",
            "LOG_LEVEL": "WARNING",
            # Set, so that the link's receivers connect; each size points it at its broker.
            "MQTT_URL": "mqtt://127.0.0.1:1",
        }
    )
    migrated = recreate_database(args.database_url)
    import django

    django.setup()
    from django.core.management import call_command

    if not migrated:
        call_command("migrate", verbosity=0)
    return prepare_fleet()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    load_at_start = os.getloadavg()

    def log(text: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {text}", flush=True)

    signal.signal(signal.SIGALRM, _alarm)
    signal.signal(signal.SIGTERM, _alarm)
    signal.alarm(args.timeout)
    procs = Processes()
    rows: list[Row] = []
    memory: dict[str, dict[str, float]] = {}
    try:
        fleet = _setup(args)
        log(f"fleet {BENCH_FLEET} ready: v1 v2 v3")
        for n, broker_count in parse_sizes(args.devices):
            size_rows, figures = measure_size(procs, args, fleet, n, broker_count, log)
            rows.extend(size_rows)
            memory[f"{n}:{broker_count}"] = {**figures, "devices": n}
    finally:
        signal.alarm(0)
        procs.stop_all()
    print()
    print(
        f"bench/mqtt — {time.strftime('%Y-%m-%d %H:%M %Z')} — {os.cpu_count()} CPUs — "
        f"Mosquitto (Debian) on loopback, {args.reps} repetitions, "
        f"{_prefetch_mode(args)}, "
        f"{time.monotonic() - started:.0f} s — load average "
        f"{' / '.join(f'{x:.2f}' for x in load_at_start)} at the start, "
        f"{' / '.join(f'{x:.2f}' for x in os.getloadavg())} at the end"
    )
    print(render_table(rows, memory, work=_work_mode(args)))
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "rows": [
                        {
                            "devices": r.devices,
                            "brokers": r.brokers,
                            "scenario": r.scenario,
                            "ours": [t.__dict__ for t in r.ours],
                            "baseline": [t.__dict__ for t in r.baseline],
                        }
                        for r in rows
                    ],
                    "memory_kib": memory,
                },
                indent=2,
            )
        )
    log("done")
    return 0
