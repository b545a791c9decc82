"""bench/fanout: live-push fan-out of the real ASGI app against a bare `websockets` broadcast.

    .venv/bin/python -m bench.fanout --devices 1000 5000

For each N: a fresh uvicorn process serving `controlplane.asgi:application` (PostgreSQL, Redis,
DEBUG off), N real WebSocket clients spread over a few client processes (bench/fanout/
clients.py), then
  (1) an immediate switch of the fleet to another version (`fleet_switch_version`): every
      connected device gets a `policy` frame;
  (2) a rollout stage 5% → 25% (`rollout_advance`): exactly the devices in buckets 500–2499
      get a frame, checked device by device;
each timed from just before the service call in this process to the LAST device's receipt
(and the median device), on the clients' `time.time()`. Then the baseline: a bare websockets
server (bench/fanout/baseline_server.py) holding the same N connections from the same client
processes broadcasts the same text (same size as our frame) to all N, timed from the broadcast
command to the last receipt (the issue's baseline); for 5% → 25% it also sends it to exactly
the devices ours reached, a stricter comparison reported beside it. Memory per connection
from VmRSS. Finally, with the largest N connected, the server is SIGKILLed and restarted and we
time until every device has reconnected (full-jitter back-off) and been told its assignment again.

Every phase has a deadline and every process started here is stopped at the end, also on
failure or Ctrl-C.
"""

import argparse
import contextlib
import functools
import json
import multiprocessing
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from bench import database_url, redis_url

REPO_ROOT = Path(__file__).resolve().parents[2]
BENCH_FLEET = "bench-fanout"
DEFAULT_DATABASE_URL = database_url("bench_fanout")
DEFAULT_REDIS_URL = redis_url("redis://127.0.0.1:6379/11")
# Quieter logs than `make run`: one line per socket would be measured too.
BENCH_LOG_ARGS = "--no-access-log --log-level warning"


def make_run_flags() -> str:
    """The uvicorn flags of `make run` (UVICORN_FLAGS in the Makefile): what is measured."""
    for line in (REPO_ROOT / "Makefile").read_text().splitlines():
        if line.startswith("UVICORN_FLAGS"):
            return line.split("=", 1)[1].strip()
    return "--lifespan off"


DEFAULT_SERVER_ARGS = f"{make_run_flags()} {BENCH_LOG_ARGS}"
WARMUP_DEVICES = 20


class BenchError(RuntimeError):
    """A phase failed or ran out of time."""


# --- processes ---------------------------------------------------------------------------------


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def process_tree(pid: int) -> list[int]:
    """The process and its descendants (uvicorn --workers: the supervisor and its workers)."""
    pids, queue = [], [pid]
    while queue:
        current = queue.pop()
        pids.append(current)
        for task in Path(f"/proc/{current}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                queue.extend(int(child) for child in task.read_text().split())
    return pids


def _tree_sum(pid: int, one: Callable[[int], float]) -> float:
    total = 0.0
    for member in process_tree(pid):
        with contextlib.suppress(OSError, IndexError, ValueError):
            total += one(member)
    return total


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise ValueError(f"no VmRSS for pid {pid}")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _runqueue_wait_seconds(pid: int) -> float:
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[1]) / 1e9


def rss_kib(pid: int) -> int:
    """Resident set size (VmRSS) of the process and its descendants, KiB."""
    return int(_tree_sum(pid, _rss_kib))


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of the process and its descendants so far."""
    return _tree_sum(pid, _cpu_seconds)


def runqueue_wait_seconds(pid: int) -> float:
    """Time spent ready to run but waiting for a CPU (schedstat of each main thread)."""
    return _tree_sum(pid, _runqueue_wait_seconds)


class Processes:
    """Every child started by the bench, stopped on exit whatever happens."""

    def __init__(self) -> None:
        self.popens: list[subprocess.Popen[Any]] = []
        self.workers: list[multiprocessing.process.BaseProcess] = []

    def stop_all(self) -> None:
        for process in self.popens:
            if process.poll() is None:
                # Servers run in their own session: stop the workers of `--workers` too.
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    if os.getpgid(process.pid) == process.pid:
                        os.killpg(process.pid, signal.SIGTERM)
                        continue
                process.terminate()
        for process in self.popens:
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.kill()
                process.wait(timeout=5)
        for worker in self.workers:
            worker.join(timeout=3)
            if worker.is_alive():
                worker.kill()
                worker.join(timeout=3)


class AsgiServer:
    """uvicorn serving the real app, one process (or --workers K)."""

    def __init__(self, procs: Processes, env: dict[str, str], args: list[str], log_dir: Path):
        self.procs = procs
        self.env = env
        self.args = args
        self.port = _free_port()
        self.log_path = log_dir / f"uvicorn-{self.port}.log"
        self.process: subprocess.Popen[Any] | None = None
        self._log_offset = 0

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws/device/"

    def push_logs(self) -> list[dict[str, float]]:
        """The server's `push.assignment` lines written since the last call, parsed."""
        if not self.log_path.exists():
            return []
        with self.log_path.open("rb") as log:
            log.seek(self._log_offset)
            text = log.read().decode(errors="replace")
            self._log_offset = log.tell()
        found = []
        for line in text.splitlines():
            if "push.assignment " in line:
                fields = dict(
                    part.split("=", 1) for part in line.split("push.assignment ", 1)[1].split()
                )
                found.append({key: float(value) for key, value in fields.items()})
        return found

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self) -> None:
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "controlplane.asgi:application",
                *("--host", "127.0.0.1", "--port", str(self.port)),
                *self.args,
            ],
            cwd=REPO_ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # one process group: the kill reaches --workers too
        )
        log.close()
        self.procs.popens.append(self.process)

    def wait_ready(self, timeout: float = 30.0) -> float:
        """Poll /healthz; return the time.time() it first answered."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise BenchError(f"uvicorn exited early:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.port}/healthz", timeout=1
                ) as response:
                    if response.status == 200:
                        return time.time()
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)
        raise BenchError(f"uvicorn did not answer /healthz in {timeout:.0f}s:\n{self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL the server (all its processes): a crash, no graceful close of sockets."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def log_tail(self, lines: int = 30) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


class BaselineServer:
    """bench/fanout/baseline_server.py, driven over stdin/stdout."""

    def __init__(self, procs: Processes, deflate: bool) -> None:
        self.port = _free_port()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.fanout.baseline_server", "--port", str(self.port)]
            + ([] if deflate else ["--no-deflate"]),
            cwd=REPO_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        procs.popens.append(self.process)
        hello = self._read(timeout=20)
        if hello.get("listening") != self.port:
            raise BenchError(f"baseline server did not start: {hello}")

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws/device/"

    @property
    def pid(self) -> int:
        return self.process.pid

    def _read(self, timeout: float) -> dict[str, Any]:
        import select

        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        if not ready:
            raise BenchError("baseline server did not answer in time")
        line = self.process.stdout.readline()
        if not line:
            raise BenchError("baseline server exited")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def send(self, command: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()

    def call(self, command: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
        self.send(command)
        return self._read(timeout)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)


class ClientPool:
    """K client processes, each holding a share of the devices."""

    def __init__(self, procs: Processes, count: int) -> None:
        from . import clients

        context = multiprocessing.get_context("spawn")
        self.pipes: list[Connection] = []
        for index in range(count):
            mine, theirs = context.Pipe()
            worker = context.Process(
                target=clients.main, args=(theirs,), name=f"fanout-clients-{index}", daemon=True
            )
            worker.start()
            procs.workers.append(worker)
            self.pipes.append(mine)

    def call(
        self, cmd: str, timeout: float = 60.0, per_worker: list[dict[str, Any]] | None = None
    ) -> list[dict[str, Any]]:
        for index, pipe in enumerate(self.pipes):
            args = per_worker[index] if per_worker is not None else {}
            pipe.send({"cmd": cmd, "args": args})
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

    def connect(self, group: str, url: str, devices: list[tuple[str, str]], timeout: float) -> None:
        shares: list[list[list[str]]] = [[] for _ in self.pipes]
        for index, (device_id, token) in enumerate(devices):
            shares[index % len(shares)].append([device_id, token])
        replies = self.call(
            "connect",
            timeout=timeout,
            per_worker=[
                {"group": group, "url": url, "devices": share, "concurrency": 100}
                for share in shares
            ],
        )
        greeted = sum(r["greeted"] for r in replies)
        if greeted != len(devices):
            raise BenchError(f"only {greeted} of {len(devices)} devices connected and greeted")

    def mark(self) -> None:
        self.call("mark")

    def count(self, group: str, kind: str, version: int | None) -> tuple[int, int]:
        args = {"group": group, "kind": kind, "version": version}
        replies = self.call("count", per_worker=[args] * len(self))
        return sum(r["matched"] for r in replies), sum(r["reconnected"] for r in replies)

    def collect(self, group: str) -> tuple[dict[str, list[list[Any]]], dict[str, float]]:
        log: dict[str, list[list[Any]]] = {}
        greeted_at: dict[str, float] = {}
        for reply in self.call("collect", per_worker=[{"group": group}] * len(self)):
            log.update(reply["log"])
            greeted_at.update(reply["greeted_at"])
        return log, greeted_at

    def close(self, group: str) -> None:
        self.call("close", timeout=60, per_worker=[{"group": group}] * len(self))

    def stop(self) -> None:
        with contextlib.suppress(BenchError, OSError, EOFError):
            self.call("stop", timeout=20)

    def __len__(self) -> int:
        return len(self.pipes)

    def wait_matched(
        self, group: str, kind: str, version: int | None, expected: int, timeout: float
    ) -> None:
        deadline = time.monotonic() + timeout
        while True:
            matched, _ = self.count(group, kind, version)
            if matched >= expected:
                return
            if time.monotonic() > deadline:
                raise BenchError(f"{matched} of {expected} devices got {kind} v{version} in time")
            time.sleep(0.05)


# --- the fleet ---------------------------------------------------------------------------------


def recreate_database(database_url: str) -> bool:
    """Drop and create the bench database (its own, never the project's); True when it is a
    copy of BENCH_TEMPLATE_DB (bench/__init__.py), already migrated, else the caller migrates.

    A fresh database per run: no leftovers of an earlier run, and the schema of this tree.
    """
    import psycopg
    from psycopg import sql

    name = database_url.rsplit("/", 1)[1].split("?")[0]
    if not name.startswith("bench"):
        raise BenchError(f"refusing to drop {name!r}: the bench database's name starts with bench")
    server = database_url.rsplit("/", 1)[0]
    template = os.environ.get("BENCH_TEMPLATE_DB", "")
    for admin_url in (f"{server}/postgres", f"{server}/root"):
        try:
            with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as conn:
                conn.execute(
                    sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name))
                )
                create = sql.SQL("create database {}").format(sql.Identifier(name))
                if template:
                    create += sql.SQL(" template {}").format(sql.Identifier(template))
                conn.execute(create)
                return bool(template)
        except psycopg.OperationalError:
            continue
    raise BenchError(f"cannot reach PostgreSQL to create {name!r}")


@dataclass
class World:
    """The bench fleet: three published versions and enrolled devices with their tokens."""

    fleet: Any
    devices: list[tuple[str, str]]
    versions: list[int] = field(default_factory=lambda: [1, 2, 3])


def publish_version(fleet: Any, number: int) -> int:
    """Publish version `number` (its document goes to the broker on commit, once one is
    set); each differs from the last by one θ, as a version identical to another is refused."""
    from routing_policies import services
    from routing_policies.models import PolicyVersion

    if number > 1:
        started = services.policy_draft_create(actor=None, fleet=fleet)
        services.policy_draft_update_cells(
            actor=None,
            fleet=fleet,
            revision=started.revision,
            edits=[
                {
                    "task_type": "voice",
                    "latency_budget": "interactive",
                    "privacy_tier": "normal",
                    "values": {"threshold": 0.6 + number / 100},
                }
            ],
        )
    draft = PolicyVersion.objects.get(fleet=fleet, published_at__isnull=True)
    published = services.policy_version_publish(
        actor=None, fleet=fleet, revision=draft.revision, note=f"bench v{number}"
    )
    return int(published.number)


def prepare_world(device_count: int) -> World:
    """The fleet `bench-fanout` with v1 (stable), v2, v3 and `device_count` devices.

    Devices are written in bulk with the same token scheme as `device_enroll` (enrolment speed
    is not what this bench measures); their tokens go to the client processes.
    """
    from django.db import transaction

    from routing_policies import services
    from routing_policies.cell_schema import SEED_DIMENSIONS
    from routing_policies.demo import demo_table
    from routing_policies.models import Device

    fleet = services.fleet_create(
        actor=None,
        slug=BENCH_FLEET,
        name="Bench fan-out",
        dimensions={k: list(v) for k, v in SEED_DIMENSIONS.items()},
        table=demo_table(),
    )
    for number in (1, 2, 3):
        publish_version(fleet, number)
    with transaction.atomic():
        services.fleet_enrollment_key_rotate(actor=None, fleet=fleet)
    tokens = [services.DEVICE_TOKEN_PREFIX + secrets.token_urlsafe(32) for _ in range(device_count)]
    devices = [(f"bench-{index:05d}", token) for index, token in enumerate(tokens)]
    Device.objects.bulk_create(
        [
            Device(fleet=fleet, device_id=device_id, token_hash=services.hash_secret(token))
            for device_id, token in devices
        ],
        batch_size=2000,
    )
    return World(fleet=fleet, devices=devices)


def frame_text(world: World, version: int, rollout: dict[str, Any] | None) -> str:
    """The exact `policy` frame our server sends for this version (for the baseline)."""
    from routing_policies import selectors
    from routing_policies.models import PolicyVersion
    from routing_policies.push.frames import policy_frame

    document = selectors.version_document(
        version=PolicyVersion.objects.select_related("fleet").get(fleet=world.fleet, number=version)
    )
    return policy_frame(json.dumps(document, separators=(",", ":"))[1:-1], rollout)


def current_assignment(world: World) -> Any:
    from routing_policies.selectors import fleet_assignment

    return fleet_assignment(world.fleet.pk)


# --- measurements ------------------------------------------------------------------------------


@dataclass
class Timing:
    """One push: receipt times relative to the trigger."""

    reached: int
    last_ms: float
    median_ms: float
    frame_bytes: int
    server_cpu_ms: float | None = None
    server_cpu_wait_ms: float | None = None  # ready to run, but the CPUs were busy
    server_log: list[dict[str, float]] | None = None  # the server's push.assignment lines
    acks_recorded_ms: float | None = None  # until every reached device's ack is in the table
    call_ms: float | None = None  # the service call itself (transaction, commit, PUBLISH)


@dataclass
class Row:
    """One table row (N, scenario), over the repetitions."""

    devices: int
    scenario: str
    ours: list[Timing] = field(default_factory=list)
    # The bare server sending the same text to the devices ours reached (for a switch: all N).
    baseline: list[Timing] = field(default_factory=list)
    # The bare server broadcasting the same text to all N connected devices: the issue's
    # baseline ("a bare websockets server broadcasting the same message to the same N"). For a
    # switch it is `baseline`; for 5% → 25% ours reaches ~20% of N and this reaches all of them.
    broadcast: list[Timing] = field(default_factory=list)

    def broadcast_timings(self) -> list[Timing]:
        return self.broadcast or self.baseline


def _timing(
    log: dict[str, list[list[Any]]],
    expected: set[str],
    t0: float,
    version: int,
    stage: int | None,
    cpu_ms: float | None = None,
    call_ms: float | None = None,
) -> Timing:
    """Check that exactly `expected` got exactly one policy frame of `version`; time them."""
    got = set(log)
    if got != expected:
        missing, extra = expected - got, got - expected
        raise BenchError(
            f"wrong devices reached: {len(missing)} missing (e.g. {sorted(missing)[:3]}), "
            f"{len(extra)} unexpected (e.g. {sorted(extra)[:3]})"
        )
    times, sizes = [], set()
    for device_id in expected:
        frames = log[device_id]
        if len(frames) != 1:
            raise BenchError(f"{device_id} got {len(frames)} frames: {frames}")
        received_at, kind, seen_version, size, seen_stage = frames[0]
        if kind != "policy" or seen_version != version or seen_stage != stage:
            raise BenchError(
                f"{device_id} got {kind} v{seen_version} stage {seen_stage}, "
                f"expected policy v{version} stage {stage}"
            )
        times.append((received_at - t0) * 1000)
        sizes.add(size)
    return Timing(
        reached=len(times),
        last_ms=max(times),
        median_ms=statistics.median(times),
        frame_bytes=max(sizes),
        server_cpu_ms=cpu_ms,
        call_ms=call_ms,
    )


def wait_acks_recorded(world: World, devices: set[str], version: int, t0: float) -> float:
    """Milliseconds from t0 until the Device rows of `devices` all show `version` acked."""
    from routing_policies.models import Device

    deadline = time.monotonic() + 30
    while True:
        acked = Device.objects.filter(
            fleet=world.fleet, device_id__in=devices, acked_version=version
        ).count()
        if acked == len(devices):
            return (time.time() - t0) * 1000
        if time.monotonic() > deadline:
            raise BenchError(f"only {acked} of {len(devices)} acks of v{version} recorded")
        time.sleep(0.02)


def _settle(pool: ClientPool, seconds: float) -> None:
    time.sleep(seconds)
    pool.mark()
    time.sleep(0.2)


class Pushes:
    """One push to our server and the same push from the baseline, timed the same way."""

    def __init__(
        self,
        server: AsgiServer,
        baseline: "BaselineServer | None",
        pool: ClientPool,
        world: World,
        log: Callable[[str], None],
        connected: set[str],
    ) -> None:
        self.server = server
        self.baseline = baseline
        self.pool = pool
        self.world = world
        self.log = log
        self.connected = connected  # the devices with a socket to each server

    def ours(
        self,
        label: str,
        call: Callable[[], Any],
        expected: set[str],
        version: int,
        stage: int | None,
    ) -> tuple[Timing, Any]:
        """Time `call` (a service call) until every device of `expected` has its frame.

        The frame is a `policy` of `version` (at rollout `stage`); exactly those devices must
        get exactly one frame each, and the fleet's assignment must then be what was expected.

        What to expect is worked out before the clock starts, as the baseline's is: the
        driver's own bookkeeping (1,000 bucket hashes, a read of the assignment) would
        otherwise share the two CPUs with the server and the clients inside the window.
        """
        server, pool = self.server, self.pool
        _settle(pool, 1.0)
        server.push_logs()  # from here on: this push's lines only
        cpu0, wait0 = cpu_seconds(server.pid), runqueue_wait_seconds(server.pid)
        t0 = time.time()
        result = call()
        call_ms = (time.time() - t0) * 1000
        pool.wait_matched("ours", "policy", version, len(expected), timeout=60)
        cpu_ms = (cpu_seconds(server.pid) - cpu0) * 1000
        wait_ms = (runqueue_wait_seconds(server.pid) - wait0) * 1000
        assignment = current_assignment(self.world)
        now = assignment.candidate if assignment.candidate else assignment.stable
        now_stage = assignment.percent if assignment.rollout_id is not None else None
        if (now, now_stage) != (version, stage):
            raise BenchError(
                f"after {label} the fleet runs v{now} at stage {now_stage}, "
                f"expected v{version} at stage {stage}"
            )
        acks_ms = wait_acks_recorded(self.world, expected, version, t0)
        time.sleep(0.5)  # anything extra would show up now
        frames, _ = pool.collect("ours")
        timing = _timing(frames, expected, t0, version, stage, cpu_ms, call_ms)
        timing.server_log = server.push_logs()
        timing.server_cpu_wait_ms = wait_ms
        timing.acks_recorded_ms = acks_ms
        self.log(f"  ours     {label}: {_fmt(timing)}")
        return timing, result

    def same_from_baseline(
        self, label: str, version: int, rollout: dict[str, Any] | None, expected: set[str]
    ) -> Timing | None:
        """Broadcast our frame's text from the bare server to the same devices."""
        baseline, pool = self.baseline, self.pool
        if baseline is None:
            return None
        devices = None if expected == self.connected else sorted(expected)
        baseline.call(
            {"cmd": "prepare", "text": frame_text(self.world, version, rollout), "devices": devices}
        )
        _settle(pool, 1.0)
        cpu0, wait0 = cpu_seconds(baseline.pid), runqueue_wait_seconds(baseline.pid)
        t0 = time.time()
        answer = baseline.call({"cmd": "fire"})
        call_ms = (answer["done_at"] - t0) * 1000
        pool.wait_matched("baseline", "policy", version, len(expected), timeout=60)
        cpu_ms = (cpu_seconds(baseline.pid) - cpu0) * 1000
        wait_ms = (runqueue_wait_seconds(baseline.pid) - wait0) * 1000
        time.sleep(0.5)
        frames, _ = pool.collect("baseline")
        stage = rollout["stage"] if rollout else None
        timing = _timing(frames, expected, t0, version, stage, cpu_ms, call_ms)
        timing.server_cpu_wait_ms = wait_ms
        self.log(f"  baseline {label}: {_fmt(timing)}")
        return timing


def measure_pushes(pushes: Pushes, n: int, reps: int, rows: dict[str, Row]) -> None:
    """Scenarios (1) and (2), each push of ours followed by the same push from the baseline."""
    from routing_policies import services
    from routing_policies.assignment import bucket

    world = pushes.world
    connected = pushes.connected
    for rep in range(1, reps + 1):
        # (1) immediate switch of the whole fleet to another version.
        target = 2 if current_assignment(world).stable != 2 else 1
        timing, _ = pushes.ours(
            f"n={n} switch→v{target} rep {rep}",
            functools.partial(
                services.fleet_switch_version, actor=None, fleet=world.fleet, version=target
            ),
            connected,
            target,
            None,
        )
        rows["switch"].ours.append(timing)
        base = pushes.same_from_baseline(f"n={n} switch rep {rep}", target, None, connected)
        if base is not None:
            rows["switch"].baseline.append(base)

        # (2) rollout of v3, 5% → 25%: only buckets 500–2499 get a frame.
        rollout = services.rollout_start(actor=None, fleet=world.fleet, version=3)
        first = {d for d in connected if bucket(rollout.salt, d) < 500}
        second = {d for d in connected if 500 <= bucket(rollout.salt, d) < 2500}
        pushes.pool.wait_matched("ours", "policy", 3, len(first), timeout=60)
        timing, _ = pushes.ours(
            f"n={n} 5%→25% rep {rep}",
            lambda: services.rollout_advance(actor=None, fleet=world.fleet, to_stage=25),
            second,
            3,
            25,
        )
        rows["advance"].ours.append(timing)
        base = pushes.same_from_baseline(
            f"n={n} 5%→25% rep {rep}", 3, {"id": rollout.pk, "stage": 25}, second
        )
        if base is not None:
            rows["advance"].baseline.append(base)
        wide = pushes.same_from_baseline(
            f"n={n} 5%→25% frame to all {n} rep {rep}",
            3,
            {"id": rollout.pk, "stage": 25},
            connected,
        )
        if wide is not None:
            rows["advance"].broadcast.append(wide)

        # Back to the stable version for the next repetition.
        _settle(pushes.pool, 0.2)
        services.rollout_rollback(actor=None, fleet=world.fleet, reason="bench", automatic=False)
        pushes.pool.wait_matched("ours", "policy", target, len(first | second), timeout=60)


def measure_memory(
    pid: int,
    pool: ClientPool,
    group: str,
    url: str,
    devices: list[tuple[str, str]],
    timeout: float,
) -> tuple[float, int, int]:
    """KiB per connection: RSS with n connected minus RSS after a warm-up with none, over n."""
    pool.connect(group, url, devices[:WARMUP_DEVICES], timeout=timeout)
    pool.close(group)
    time.sleep(1.0)
    before = rss_kib(pid)
    pool.connect(group, url, devices, timeout=timeout)
    time.sleep(2.0)  # the acks of the first policy frames land
    after = rss_kib(pid)
    return (after - before) / len(devices), before, after


def measure_reconnect(
    server: AsgiServer, pool: ClientPool, world: World, n: int, log: Callable[[str], None]
) -> dict[str, Any]:
    """SIGKILL the server with n connected, restart it, time until all hold their assignment."""
    from routing_policies import services

    # Reconnect in the middle of a rollout, so holding the assignment means the right bucket.
    connected = [device_id for device_id, _ in world.devices[:n]]
    rollout = services.rollout_start(actor=None, fleet=world.fleet, version=3)
    services.rollout_advance(actor=None, fleet=world.fleet, to_stage=25)
    assignment = current_assignment(world)
    expected = {d: assignment.version_for(d) for d in connected}
    cohort = sum(1 for v in expected.values() if v == 3)
    pool.wait_matched("ours", "policy", 3, cohort, timeout=60)
    _settle(pool, 1.0)
    t_kill = time.time()
    server.kill()
    server.start()
    t_ready = server.wait_ready(timeout=30)
    deadline = time.monotonic() + 120
    while True:
        _, reconnected = pool.count("ours", "up_to_date", None)
        if reconnected >= n:
            break
        if time.monotonic() > deadline:
            raise BenchError(f"only {reconnected} of {n} devices reconnected within 120 s")
        time.sleep(0.2)
    frames, greeted_at = pool.collect("ours")
    wrong = []
    for device_id in connected:
        answers = [f for f in frames.get(device_id, []) if f[1] in ("policy", "up_to_date")]
        if not answers or answers[0][2] != expected[device_id]:
            wrong.append((device_id, answers[:1], expected[device_id]))
    if wrong:
        raise BenchError(f"{len(wrong)} devices hold a wrong assignment, e.g. {wrong[:3]}")
    back = sorted(greeted_at[d] - t_kill for d in connected)
    last = t_kill + back[-1]
    services.rollout_rollback(actor=None, fleet=world.fleet, reason="bench", automatic=False)
    result = {
        "devices": n,
        "rollout": rollout.pk,
        "all_back_s": last - t_kill,
        "server_ready_s": t_ready - t_kill,
        "after_ready_s": last - t_ready,
        "p50_s": back[len(back) // 2],
        "p90_s": back[int(len(back) * 0.9)],
    }
    log(
        f"  reconnect n={n}: all {n} hold their assignment {result['all_back_s']:.1f} s after "
        f"SIGKILL (server answered after {result['server_ready_s']:.1f} s; half of them back "
        f"after {result['p50_s']:.1f} s, 90% after {result['p90_s']:.1f} s)"
    )
    return result


def _fmt(timing: Timing) -> str:
    text = (
        f"{timing.reached} reached, last {timing.last_ms:.0f} ms, median "
        f"{timing.median_ms:.0f} ms, {timing.frame_bytes} B, server CPU "
        f"{timing.server_cpu_ms or 0:.0f} ms (+{timing.server_cpu_wait_ms or 0:.0f} ms waiting "
        f"for a CPU), trigger returned after {timing.call_ms or 0:.0f} ms"
    )
    if timing.acks_recorded_ms is not None:
        text += f"; all acks in the database after {timing.acks_recorded_ms:.0f} ms"
    for line in timing.server_log or []:
        text += (
            f"; server: dispatch began {line['since_sent_ms']:.1f} ms after the message was "
            f"made, wrote {line['written']:.0f} frames in {line['took_ms']:.1f} ms"
        )
    return text


# --- the report ----------------------------------------------------------------------------------


def _med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def render_table(
    rows: list[Row], memory: dict[int, dict[str, float]], reconnect: dict[str, Any] | None
) -> str:
    header = (
        "| N | scenario | devices reached | frame B | ours last ms | ours median ms "
        "| baseline: broadcast to all N, last / median ms | ratio last (ours/baseline) "
        "| target | met | baseline: to the same devices only, last / median ms "
        "| ratio last, same devices | ours: service call ms "
        "| ratio without the service call (same devices) | ours: all acks in DB ms "
        "| server CPU ms ours / baseline (same devices) |"
    )
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    names = {"switch": "(1) switch fleet to another version", "advance": "(2) rollout 5% → 25%"}
    for row in rows:
        ours_last = _med([t.last_ms for t in row.ours])
        wide = row.broadcast_timings()
        wide_last = _med([t.last_ms for t in wide])
        ratio = ours_last / wide_last if wide_last else float("nan")
        base_last = _med([t.last_ms for t in row.baseline])
        strict = ours_last / base_last if base_last else float("nan")
        target = 1.5 if row.devices <= 1000 else 2.0
        same = " (the same push)" if not row.broadcast else ""
        lines.append(
            f"| {row.devices:,} | {names[row.scenario]} | {row.ours[0].reached:,} "
            f"| {row.ours[0].frame_bytes:,} "
            f"| {ours_last:.0f} | {_med([t.median_ms for t in row.ours]):.0f} "
            f"| {wide_last:.0f} / {_med([t.median_ms for t in wide]):.0f} "
            f"| {ratio:.2f}× | ≤ {target}× | {'yes' if ratio <= target else 'NO'} "
            f"| {base_last:.0f} / {_med([t.median_ms for t in row.baseline]):.0f}{same} "
            f"| {strict:.2f}× "
            f"| {_med([t.call_ms or 0 for t in row.ours]):.0f} "
            f"| {_med([t.last_ms - (t.call_ms or 0) for t in row.ours]) / base_last:.2f}× "
            f"| {_med([t.acks_recorded_ms or 0 for t in row.ours]):.0f} "
            f"| {_med([t.server_cpu_ms or 0 for t in row.ours]):.0f} / "
            f"{_med([t.server_cpu_ms or 0 for t in row.baseline]):.0f} |"
        )
    lines.append("")
    lines.append(
        "| N | memory/conn ours KiB | memory/conn baseline KiB | target | met "
        "| ours RSS 0 → N MiB | baseline RSS 0 → N MiB |"
    )
    lines.append("|---|---|---|---|---|---|---|")
    for n, figures in memory.items():
        lines.append(
            f"| {n:,} | {figures['ours']:.1f} | {figures['baseline']:.1f} | ≤ 40 KB "
            f"| {'yes' if figures['ours'] * 1024 <= 40_000 else 'NO'} "
            f"| {figures['ours_before'] / 1024:.0f} → {figures['ours_after'] / 1024:.0f} "
            f"| {figures['baseline_before'] / 1024:.0f} → {figures['baseline_after'] / 1024:.0f} |"
        )
    if reconnect:
        lines.append("")
        lines.append(
            f"Reconnect: {reconnect['devices']:,} devices connected at 25% of a rollout, server "
            f"SIGKILLed and restarted: all hold their assignment again "
            f"{reconnect['all_back_s']:.1f} s after the kill (server answering after "
            f"{reconnect['server_ready_s']:.1f} s; 50% back after {reconnect['p50_s']:.1f} s, "
            f"90% after {reconnect['p90_s']:.1f} s); target ≤ 30 s: "
            f"{'met' if reconnect['all_back_s'] <= 30 else 'NOT met'}."
        )
    lines.append("")
    lines.append(
        "Times are medians over the repetitions, from just before the service call (ours) or "
        "the broadcast command (baseline) to the device's receipt (time.time() in the client "
        "processes). The ratio is ours/baseline of the LAST device's time, against the "
        "issue's baseline: the bare server broadcasting the same message to all N connected "
        "devices. For 5% → 25% ours reaches only the ~20% whose assignment changed, so the "
        "bare server sending to exactly those devices is shown too ('same devices'), a "
        "stricter comparison: there ours still pays for its transaction and Redis hop on a "
        "baseline of a few milliseconds. 'service call' is "
        "the part of ours spent in the service itself (its transaction, commit and PUBLISH), "
        "before any socket is written, and 'ratio without the service call' takes it out of "
        "ours (for information: the target is on the ratio); 'all acks in DB' is from the call "
        "until every reached device's ack is recorded in its Device row."
    )
    return "\n".join(lines)


# --- main ----------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.fanout", description=__doc__)
    parser.add_argument("--devices", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--client-processes", type=int, default=2)
    parser.add_argument("--reps", type=int, default=5, help="repetitions of each push")
    parser.add_argument(
        "--server-args",
        default=DEFAULT_SERVER_ARGS,
        help=f"uvicorn flags of the server under test (default: {DEFAULT_SERVER_ARGS!r})",
    )
    parser.add_argument("--no-reconnect", action="store_true", help="skip the restart test")
    parser.add_argument("--no-baseline", action="store_true", help="skip the bare server")
    parser.add_argument("--database-url", default=DEFAULT_DATABASE_URL)
    parser.add_argument("--redis-url", default=DEFAULT_REDIS_URL)
    parser.add_argument("--timeout", type=int, default=600, help="whole run, seconds")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    return parser.parse_args(argv)


def server_deflates(server_args: list[str]) -> bool:
    """Whether uvicorn with these flags accepts permessage-deflate (its default: yes)."""
    for index, arg in enumerate(server_args):
        if arg == "--ws-per-message-deflate" and index + 1 < len(server_args):
            return server_args[index + 1].lower() not in ("false", "0", "no")
        if arg.startswith("--ws-per-message-deflate="):
            return arg.split("=", 1)[1].lower() not in ("false", "0", "no")
    return True


def _alarm(signum: int, frame: Any) -> None:
    raise BenchError("the whole run exceeded --timeout")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    load_at_start = os.getloadavg()

    def log(text: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {text}", flush=True)

    env = dict(os.environ)
    env.update(
        {
            "DATABASE_URL": args.database_url,
            "REDIS_URL": args.redis_url,
            "SECRET_KEY": env.get("SECRET_KEY") or "bench-only-secret",
            "DEBUG": "0",
            "HTTPS": "0",  # plain http to 127.0.0.1 (docs/operations.md)
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "DJANGO_SETTINGS_MODULE": "controlplane.settings",
            "LOG_LEVEL": "INFO",  # one `push.assignment` line per push: the server's own timing
            "PYTHONUNBUFFERED": "1",
        }
    )
    os.environ.update(env)
    os.environ["LOG_LEVEL"] = "WARNING"  # this process: the table, not the services' logs
    signal.signal(signal.SIGALRM, _alarm)
    signal.signal(signal.SIGTERM, _alarm)
    signal.alarm(args.timeout)

    procs = Processes()
    log_dir = Path(tempfile.mkdtemp(prefix="bench-fanout-"))
    rows: list[Row] = []
    memory: dict[int, dict[str, float]] = {}
    reconnect: dict[str, Any] | None = None
    server: AsgiServer | None = None
    try:
        migrated = recreate_database(args.database_url)
        import django

        django.setup()
        from django.core.management import call_command

        if not migrated:
            call_command("migrate", verbosity=0)
        world = prepare_world(max(args.devices))
        log(f"fleet {BENCH_FLEET} ready: v1 v2 v3, {len(world.devices)} devices")
        pool = ClientPool(procs, args.client_processes)
        server_args = args.server_args.split()
        for n in args.devices:
            devices = world.devices[:n]
            by_scenario = {s: Row(n, s) for s in ("switch", "advance")}
            server = AsgiServer(procs, env, server_args, log_dir)
            server.start()
            server.wait_ready()
            connect_timeout = max(60, n / 20)
            per_conn, before, after = measure_memory(
                server.pid, pool, "ours", server.url, devices, connect_timeout
            )
            log(f"ours n={n}: connected, {per_conn:.1f} KiB per connection")
            memory[n] = {"ours": per_conn, "ours_before": before, "ours_after": after}
            baseline = None
            if not args.no_baseline:
                # Both servers hold the same devices at once, and each push of ours is followed
                # by the same push from the baseline: both see the same machine.
                baseline = BaselineServer(procs, deflate=server_deflates(server_args))
                baseline.call({"cmd": "set_version", "version": current_assignment(world).stable})
                per_conn, before, after = measure_memory(
                    baseline.pid, pool, "baseline", baseline.url, devices, connect_timeout
                )
                memory[n].update(
                    {"baseline": per_conn, "baseline_before": before, "baseline_after": after}
                )
                log(f"baseline n={n}: connected, {per_conn:.1f} KiB per connection")
            pushes = Pushes(server, baseline, pool, world, log, {d for d, _ in devices})
            measure_pushes(pushes, n, args.reps, by_scenario)
            if baseline is not None:
                pool.close("baseline")
                baseline.stop()
            if n == max(args.devices) and not args.no_reconnect:
                reconnect = measure_reconnect(server, pool, world, n, log)
            server.kill()
            pool.close("ours")
            rows.extend(by_scenario.values())
        pool.stop()
    except BaseException:
        if server is not None:
            print(f"--- server log tail ---\n{server.log_tail()}", file=sys.stderr)
        raise
    finally:
        signal.alarm(0)
        procs.stop_all()
    if args.no_baseline:
        for row in rows:
            row.baseline = row.ours
        for figures in memory.values():
            figures.update({"baseline": 0, "baseline_before": 0, "baseline_after": 0})
    table = render_table(rows, memory, reconnect)
    print()
    load_at_end = os.getloadavg()
    print(
        f"bench/fanout — {time.strftime('%Y-%m-%d %H:%M %Z')} — {os.cpu_count()} CPUs — "
        f"server: uvicorn {args.server_args}, {args.client_processes} client processes, "
        f"{args.reps} repetitions, {time.monotonic() - started:.0f} s — load average "
        f"{' / '.join(f'{x:.2f}' for x in load_at_start)} at the start, "
        f"{' / '.join(f'{x:.2f}' for x in load_at_end)} at the end"
    )
    print(table)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "rows": [
                        {
                            "devices": r.devices,
                            "scenario": r.scenario,
                            "ours": [t.__dict__ for t in r.ours],
                            "baseline": [t.__dict__ for t in r.baseline],
                            "broadcast_to_all": [t.__dict__ for t in r.broadcast_timings()],
                        }
                        for r in rows
                    ],
                    "memory_kib_per_connection": memory,
                    "reconnect": reconnect,
                    "server_args": args.server_args,
                },
                indent=2,
            )
        )
    log("done")
    return 0
