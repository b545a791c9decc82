"""bench/ingest: the telemetry pipeline, each figure against its baseline in the same run.

    .venv/bin/python -m bench.ingest                      # everything, ~5-8 minutes
    .venv/bin/python -m bench.ingest --events 300000 --query-events 10000000

(a) end to end: this process posts batches of 500 events over HTTP (several connections at
    once) to a uvicorn process serving the real app, Celery worker(s) process them, PostgreSQL
    stores them; timed from the first post until every event is stored raw and rolled up.
    Baseline: psycopg COPY of the same rows into the same raw table (`telemetry_event`,
    partitioned, same index), in the same database, in the same run.
(b) the 24-hour P50/P95/P99 of a fleet over 10 million stored events: `fleet_metrics` (merged
    fleet-hour sketches) against `percentile_cont` on the raw table, same window; speed-up and
    the relative error per group. The 10 M events are generated here and written with COPY
    straight into the raw and rollup tables (rollups folded by telemetry.rollups, as the worker
    folds them), not through HTTP.
(c) peak resident memory (VmHWM) of the web process and every worker process during (a).

Its own database (`bench_ingest`, recreated) and its own redis-server on a free port; every
process started here is stopped at the end, also on failure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench import database_name, database_recreate, database_url, migrate
from routing_policies.cell_schema import SEED_DIMENSIONS
from routing_policies.documents import ordered_keys

REPO_ROOT = Path(__file__).resolve().parents[2]
BENCH_DB = database_name("bench_ingest")
BENCH_URL = database_url("bench_ingest")
BATCH = 500
CELLS = ordered_keys(SEED_DIMENSIONS)  # the demo table's 12 cells, in table order


# --- processes ---------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env(redis_url: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "DATABASE_URL": BENCH_URL,
            "REDIS_URL": redis_url,
            "SECRET_KEY": "bench-only",
            "DEBUG": "0",
            "HTTPS": "0",  # plain http to 127.0.0.1 (docs/operations.md)
            "DJANGO_SETTINGS_MODULE": "controlplane.settings",
            "LOG_LEVEL": "WARNING",
            "TELEMETRY_RATE_LIMIT_BATCHES": "0",
            "DATABASE_POOL_MAX_SIZE": "8",
            "PYTHONUNBUFFERED": "1",
            **extra,
        }
    )
    return env


@dataclass
class Started:
    """A process this bench started (stopped in `main`'s finally)."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path


class Processes:
    """Everything started here, stopped in reverse order."""

    def __init__(self) -> None:
        self.started: list[Started] = []
        self.tmp = Path(tempfile.mkdtemp(prefix="bench-ingest-"))

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> Started:
        log = self.tmp / f"{name}.log"
        process = subprocess.Popen(
            argv,
            cwd=REPO_ROOT,
            env=env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        started = Started(name, process, log)
        self.started.append(started)
        return started

    def stop(self, started: Started) -> None:
        if started.process.poll() is None:
            os.killpg(started.process.pid, signal.SIGTERM)
            try:
                started.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(started.process.pid, signal.SIGKILL)
                started.process.wait(timeout=5)

    def stop_all(self) -> None:
        for started in reversed(self.started):
            self.stop(started)


def _wait(condition: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _family(pid: int) -> list[int]:
    pids = [pid]
    children = Path(f"/proc/{pid}/task/{pid}/children")
    if children.exists():
        pids += [int(p) for p in children.read_text().split()]
    return pids


def _cpu_seconds(pids: list[int]) -> dict[int, float]:
    """User + system CPU seconds of each process so far."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[int, float] = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[pid] = (int(fields[11]) + int(fields[12])) / tick
    return out


def _backend_pids() -> list[int]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            [BENCH_DB],
        )
        return [row[0] for row in cursor.fetchall()]


def _peak_rss_mb(pid: int) -> dict[int, float]:
    """VmHWM (peak resident set) of a process and its children, in MiB."""
    out: dict[int, float] = {}
    for each in _family(pid):
        try:
            for line in Path(f"/proc/{each}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    out[each] = int(line.split()[1]) / 1024
        except OSError:
            continue
    return out


# --- events ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Profile:
    """A kind of decision: the cell, route, deciding step, version and cohort."""

    task_type: str
    latency_budget: str
    privacy_tier: str
    route: str
    decided_by: str
    version: int
    cohort: str


def _profiles() -> tuple[list[Profile], list[float]]:
    profiles: list[Profile] = []
    weights: list[float] = []
    for task, budget, tier in CELLS:
        for version, cohort, share in ((1, "stable", 0.8), (2, "candidate", 0.2)):
            if tier == "sensitive":
                options = [("device", "privacy", 0.9), ("cloud", "threshold", 0.1)]
            else:
                options = [
                    ("device", "threshold", 0.6),
                    ("device", "latency", 0.05),
                    ("cloud", "threshold", 0.3),
                    ("draft_refine", "threshold", 0.05),
                ]
            for route, decided_by, weight in options:
                profiles.append(Profile(task, budget, tier, route, decided_by, version, cohort))
                weights.append(share * weight)
    return profiles, weights


def _latency(rng: random.Random, route: str) -> float:
    if route == "device":
        return rng.lognormvariate(math.log(35), 0.5)
    if route == "cloud":
        base = rng.lognormvariate(math.log(320), 0.45)
        return base * rng.paretovariate(3.0) if rng.random() < 0.05 else base
    return rng.lognormvariate(math.log(520), 0.4)


class BenchEvent:
    """An event as telemetry.rollups folds it."""

    __slots__ = (
        "cache_hit",
        "decided_by",
        "deidentified",
        "fallback",
        "latency_budget",
        "latency_ms",
        "ok",
        "policy_version",
        "privacy_tier",
        "route",
        "score",
        "task_type",
        "tokens",
        "ts",
    )
    # Signals the benchmark does not model (telemetry.rollups.EventLike reads them).
    uploaded: bool | None = None
    refine_changed: bool | None = None
    refine_edit_ratio: float | None = None
    quality: float | None = None
    shadow_refine: bool | None = None

    def __init__(self, profile: Profile, ts: datetime, rng: random.Random) -> None:
        self.ts = ts
        self.policy_version = profile.version
        self.task_type = profile.task_type
        self.latency_budget = profile.latency_budget
        self.privacy_tier = profile.privacy_tier
        self.route = profile.route
        self.decided_by = profile.decided_by
        roll = rng.random()
        self.fallback = "cloud_to_device" if profile.route == "cloud" and roll < 0.02 else "none"
        self.latency_ms = round(_latency(rng, profile.route), 3)
        self.cache_hit = roll > 0.9
        self.ok = roll > 0.005
        self.deidentified = profile.privacy_tier == "sensitive"
        self.score = None if profile.decided_by == "privacy" else round(rng.random(), 4)
        self.tokens = int(rng.random() * 600)


def _raw_row(event: BenchEvent, fleet_id: int, device_id: str, cohort: str) -> tuple[Any, ...]:
    return (
        uuid.uuid4(),
        fleet_id,
        device_id,
        event.ts,
        event.ts,
        event.policy_version,
        cohort,
        event.task_type,
        event.latency_budget,
        event.privacy_tier,
        event.route,
        event.decided_by,
        event.fallback,
        event.latency_ms,
        event.cache_hit,
        event.ok,
        event.deidentified,
        event.score,
        0.6,
        event.tokens,
        0.8,
        0.7,
        0,
        80.0,
        5000.0,
        0.3,
        event.route != "device" and not event.cache_hit,  # uploaded: the data left the device
        True,  # online
        250.0,  # cloud_infer_ms
        0.0,  # cloud_pressure
        None,  # refine_changed
        None,  # refine_edit_ratio
        None,  # quality
        None,  # shadow_refine
        None,  # segments (not known: counted in the all-devices rollups only)
    )


def _wire_event(
    event: BenchEvent, device_id: str, event_id: uuid.UUID, decision_inputs: bool = True
) -> dict[str, Any]:
    wire = {
        "event_id": str(event_id),
        "device_id": device_id,
        "ts": event.ts.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
        "policy_version": event.policy_version,
        "task_type": event.task_type,
        "latency_budget": event.latency_budget,
        "privacy_tier": event.privacy_tier,
        "route": event.route,
        "decided_by": event.decided_by,
        "score": event.score,
        "threshold": 0.6,
        "tokens": event.tokens,
        "intent_conf": 0.8,
        "lm_conf": 0.7,
        "latency_ms": event.latency_ms,
        "fallback": event.fallback,
        "cache_hit": event.cache_hit,
        "upload_bytes": 0,
        "rtt_ms": 80.0,
        "bandwidth_kbps": 5000.0,
        "device_load": 0.3,
        "ok": event.ok,
        "deidentified": event.deidentified,
    }
    if decision_inputs:  # PROTOCOL.md extensions: the decision's remaining inputs
        wire.update(online=True, cloud_infer_ms=250.0, cloud_pressure=0.0)
    return wire


# --- setup -------------------------------------------------------------------------------------


def _setup_database() -> None:
    if not database_recreate(BENCH_DB):
        migrate(_env("redis://127.0.0.1:1/0"))


def _django(redis_url: str) -> None:
    os.environ.update(_env(redis_url))
    import logging

    import django

    django.setup()
    logging.getLogger("httpx").setLevel(logging.WARNING)


def _make_fleet(slug: str, devices: int) -> tuple[int, list[tuple[str, str]]]:
    """A fleet with v1 and v2 published and `devices` enrolled devices: (fleet id, tokens)."""
    from routing_policies.demo import demo_table
    from routing_policies.services import (
        device_enroll,
        fleet_create,
        fleet_enrollment_key_rotate,
        policy_draft_create,
        policy_draft_update_cells,
        policy_version_publish,
    )

    fleet = fleet_create(actor=None, slug=slug, name=slug, table=demo_table())
    policy_version_publish(actor=None, fleet=fleet, revision=1, note="v1")
    # A version identical to the last is refused (no_changes): v2 nudges one θ.
    draft = policy_draft_update_cells(
        actor=None,
        fleet=fleet,
        revision=policy_draft_create(actor=None, fleet=fleet).revision,
        edits=[
            {
                "task_type": "voice",
                "latency_budget": "interactive",
                "privacy_tier": "normal",
                "values": {"threshold": 0.66},
            }
        ],
    )
    policy_version_publish(actor=None, fleet=fleet, revision=draft.revision, note="v2")
    key = fleet_enrollment_key_rotate(actor=None, fleet=fleet)
    tokens = []
    for index in range(devices):
        device_id = f"{slug}-{index:04d}"
        _, token = device_enroll(fleet_key=key, device_id=device_id)
        tokens.append((device_id, token))
    return fleet.pk, tokens


# --- (a) end to end ----------------------------------------------------------------------------


def _copy_baseline(rows: list[tuple[Any, ...]], binary: bool) -> float:
    """Seconds to COPY `rows` into the raw table (then emptied again)."""
    import psycopg

    from telemetry.ingest.services.processing import EVENT_COLUMN_TYPES

    columns = ", ".join(name for name, _ in EVENT_COLUMN_TYPES)
    with psycopg.connect(BENCH_URL, autocommit=False) as conn:
        start = time.perf_counter()
        with conn.cursor() as cursor:
            statement = f"COPY telemetry_event ({columns}) FROM STDIN"
            with cursor.copy(statement + (" (FORMAT BINARY)" if binary else "")) as copy:
                if binary:
                    copy.set_types([kind for _, kind in EVENT_COLUMN_TYPES])
                for row in rows:
                    copy.write_row(row)
        conn.commit()
        elapsed = time.perf_counter() - start
        conn.execute("TRUNCATE telemetry_event")
        conn.commit()
    return elapsed


async def _post_all(
    base_url: str,
    bodies: list[tuple[str, bytes]],
    connections: int,
    content_type: str = "application/json",
) -> None:
    """POST every body over `connections` keep-alive HTTP/1.1 connections; each must be 202.

    A bare asyncio client with the requests built up front: the load generator shares the two
    cores with what it measures, so it should cost as little as a device fleet's network does.
    """
    host, port = base_url.removeprefix("http://").split(":")
    requests = [
        (
            f"POST /api/v1/telemetry HTTP/1.1\r\nHost: {host}\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        + body
        for token, body in bodies
    ]
    queue = list(reversed(requests))

    async def poster() -> None:
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            while queue:
                writer.write(queue.pop())
                await writer.drain()
                status_line = await reader.readline()
                length = 0
                while (line := await reader.readline()) not in (b"\r\n", b""):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                answer = await reader.readexactly(length)
                if b" 202 " not in status_line:
                    raise RuntimeError(f"{status_line!r}: {answer[:300]!r}")
        finally:
            writer.close()

    await asyncio.gather(*(poster() for _ in range(connections)))


def _stored_and_rolled_up(fleet_id: int) -> tuple[int, int, int]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM telemetry_landedbatch")
        landed = cursor.fetchone()[0]
        if landed:
            return landed, -1, -1
        cursor.execute("SELECT count(*) FROM telemetry_event WHERE fleet_id = %s", [fleet_id])
        stored = cursor.fetchone()[0]
        cursor.execute(
            "SELECT coalesce(sum(events), 0) FROM telemetry_minuterollup WHERE fleet_id = %s",
            [fleet_id],
        )
        rolled = cursor.fetchone()[0]
    return landed, stored, rolled


def bench_end_to_end(
    args: argparse.Namespace, processes: Processes, redis_url: str, decision_inputs: bool = True
) -> dict[str, Any]:
    """(a); `decision_inputs`: the events carry `online`, `cloud_infer_ms`, `cloud_pressure`."""
    rng = random.Random(1)
    slug = "bench-ingest" if decision_inputs else "bench-ingest-plain"
    fleet_id, tokens = _make_fleet(slug, args.devices)
    print(f"(a) events {'with' if decision_inputs else 'without'} the decision inputs")
    profiles, weights = _profiles()
    now = datetime.now(UTC)
    total = args.events - args.events % BATCH
    bodies: list[tuple[str, bytes]] = []
    rows: list[tuple[Any, ...]] = []
    chosen = rng.choices(profiles, weights, k=total)
    for start in range(0, total, BATCH):
        device_id, token = tokens[(start // BATCH) % len(tokens)]
        batch = []
        for profile in chosen[start : start + BATCH]:
            event = BenchEvent(profile, now - timedelta(seconds=rng.uniform(0, 120)), rng)
            row = _raw_row(event, fleet_id, device_id, profile.cohort)
            rows.append(row)
            batch.append(_wire_event(event, device_id, row[0], decision_inputs))
        bodies.append((token, json.dumps({"events": batch}).encode()))
    print(
        f"(a) {total} events in {len(bodies)} batches of {BATCH}; "
        f"body ≈ {statistics.mean(len(b) for _, b in bodies) / 1024:.0f} KiB",
        flush=True,
    )

    text_s = min(_copy_baseline(rows, binary=False) for _ in range(3))
    binary_s = min(_copy_baseline(rows, binary=True) for _ in range(3))
    baseline_s = min(text_s, binary_s)
    baseline_rate = total / baseline_s
    print(
        f"    baseline COPY: text {total / text_s:,.0f} rows/s, binary {total / binary_s:,.0f} "
        f"rows/s (best of 3 each; the faster is the baseline)",
        flush=True,
    )

    port = _free_port()
    web = processes.start(
        "web",
        [
            sys.executable,
            "-m",
            "uvicorn",
            "controlplane.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--lifespan",
            "off",
            "--no-access-log",
            "--log-level",
            "warning",
            "--workers",
            str(args.web_workers),
        ],
        _env(redis_url),
    )
    workers = processes.start(
        "worker",
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "controlplane",
            "worker",
            "-B",
            "--schedule",
            str(processes.tmp / "beat-schedule"),
            "--loglevel",
            "WARNING",
            "--concurrency",
            str(args.worker_concurrency),
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-n",
            "bench-ingest@%h",
        ],
        _env(redis_url, TELEMETRY_PROCESS_MAX_BATCHES=str(args.max_batches)),
    )
    base_url = f"http://127.0.0.1:{port}"
    _wait(lambda: _answers(f"{base_url}/healthz"), 30, "the web process")
    time.sleep(3)  # the worker's startup
    # Warm up (imports, connections, caches) with the first few batches: the run posts them
    # again as duplicates, so every event is still stored once. (An empty batch is a 400.)
    warm = bodies[:8]
    asyncio.run(_post_all(base_url, warm, 4))

    load_before = os.getloadavg()
    tracked = {
        "web": _family(web.process.pid),
        "worker": _family(workers.process.pid),
        "postgres": _backend_pids(),
        "load generator": [os.getpid()],
    }
    cpu_before = {name: _cpu_seconds(pids) for name, pids in tracked.items()}
    started = time.perf_counter()
    asyncio.run(_post_all(base_url, bodies, args.connections))
    posted = time.perf_counter() - started
    _wait(
        lambda: _stored_and_rolled_up(fleet_id) == (0, total, total),
        600,
        "every event stored and rolled up",
    )
    done = time.perf_counter() - started
    load_after = os.getloadavg()
    cpu_per_1k: dict[str, float] = {}
    for name, pids in tracked.items():
        if name == "postgres":
            pids = sorted(set(pids) | set(_backend_pids()))
        after = _cpu_seconds(pids)
        spent = sum(after[p] - cpu_before[name].get(p, 0.0) for p in after)
        cpu_per_1k[name] = round(spent / total * 1000, 4)
    print(f"    CPU seconds per 1,000 events: {cpu_per_1k}", flush=True)
    rate = total / done
    memory = {
        "web_peak_rss_mib": _peak_rss_mb(web.process.pid),
        "worker_peak_rss_mib": _peak_rss_mb(workers.process.pid),
    }
    print(
        f"    end to end: {rate:,.0f} events/s ({done:.2f} s; all 202s after {posted:.2f} s) "
        f"= {rate / baseline_rate:.2f}x the COPY baseline",
        flush=True,
    )
    print(f"    memory: {memory}", flush=True)
    processes.stop(workers)
    processes.stop(web)
    return {
        "events": total,
        "batch": BATCH,
        "connections": args.connections,
        "web_workers": args.web_workers,
        "worker_concurrency": args.worker_concurrency,
        "max_batches_per_transaction": args.max_batches,
        "baseline_copy_rows_per_s": round(baseline_rate),
        "baseline_copy_text_rows_per_s": round(total / text_s),
        "baseline_copy_binary_rows_per_s": round(total / binary_s),
        "end_to_end_events_per_s": round(rate),
        "ratio": round(rate / baseline_rate, 3),
        "seconds_until_all_202": round(posted, 2),
        "seconds_until_stored_and_rolled_up": round(done, 2),
        "memory": {
            name: {str(pid): round(mib, 1) for pid, mib in values.items()}
            for name, values in memory.items()
        },
        "cpu_seconds_per_1000_events": cpu_per_1k,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in load_after],
    }


# --- (b) the 24-hour query ---------------------------------------------------------------------


def bench_day_query(args: argparse.Namespace) -> dict[str, Any]:
    from django.db import connection

    from telemetry.dashboards.metrics import fleet_metrics
    from telemetry.rollups import plan_window

    from .history import store_history

    fleet_id, _ = _make_fleet("bench-day", 0)
    total = args.query_events
    now = datetime.now(UTC)
    stored = store_history(
        BENCH_URL,
        fleet_id=fleet_id,
        total=total,
        start=now - timedelta(hours=24),
        end=now,
        device_id="dev",
    )
    rollup_rows = stored["minute_rollup_rows"] + stored["hour_rollup_rows"]
    fleet_rows = stored["fleet_hour_rollup_rows"]
    print(
        f"(b) {total:,} events generated and stored in {stored['seconds']:.0f} s "
        f"({rollup_rows + fleet_rows:,} rollup rows, {fleet_rows} fleet-hour rows)",
        flush=True,
    )

    window = timedelta(hours=24)
    query_now = datetime.now(UTC)
    plan = plan_window(window, now=query_now)
    results: dict[str, Any] = {"events": total, "window_from": plan.start.isoformat()}
    for label, group_by, column in (
        ("by route", ["route"], "route"),
        ("by version and route", ["version", "route"], "policy_version, route"),
    ):
        ours_times = []
        ours: dict[str, Any] = {}
        for _ in range(5):
            begun = time.perf_counter()
            ours = fleet_metrics(fleet_id=fleet_id, window=window, group_by=group_by, now=query_now)
            ours_times.append(time.perf_counter() - begun)
        baseline_times = []
        exact: dict[tuple[Any, ...], tuple[float, float, float, int]] = {}
        for _ in range(2):
            begun = time.perf_counter()
            with connection.cursor() as cursor:
                cursor.execute(
                    f"SELECT {column}, percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP "
                    f"(ORDER BY latency_ms), count(*) FROM telemetry_event "
                    f"WHERE fleet_id = %s AND ts >= %s GROUP BY {column}",
                    [fleet_id, plan.start],
                )
                for row in cursor.fetchall():
                    *key, quantiles, count = row
                    exact[tuple(key)] = (*quantiles, count)
            baseline_times.append(time.perf_counter() - begun)
        worst = 0.0
        groups = []
        for group in ours["groups"]:
            key = tuple(group[name] for name in group_by)
            p50, p95, p99, count = exact[key]
            errors = [
                abs(group["latency_ms"][name] - value) / value
                for name, value in (("p50", p50), ("p95", p95), ("p99", p99))
            ]
            worst = max(worst, *errors)
            groups.append(
                {
                    "group": list(key),
                    "events": count,
                    "max_relative_error_pct": round(100 * max(errors), 3),
                }
            )
            assert group["events"] == count, (group, count)
        ours_s = statistics.median(ours_times)
        baseline_s = min(baseline_times)
        print(
            f"    {label}: rollups {ours_s * 1000:.1f} ms, percentile_cont {baseline_s:.2f} s "
            f"→ {baseline_s / ours_s:.0f}x faster; worst relative error "
            f"{100 * worst:.3f}% over {len(groups)} groups",
            flush=True,
        )
        results[label] = {
            "rollups_median_ms": round(ours_s * 1000, 2),
            "percentile_cont_s": round(baseline_s, 3),
            "speedup": round(baseline_s / ours_s),
            "worst_relative_error_pct": round(100 * worst, 3),
            "groups": groups,
        }
    results["load_average"] = [round(x, 2) for x in os.getloadavg()]
    return results


# --- main --------------------------------------------------------------------------------------


@contextmanager
def _own_redis(processes: Processes) -> Iterator[str]:
    port = _free_port()
    processes.start(
        "redis",
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        dict(os.environ),
    )
    url = f"redis://127.0.0.1:{port}/0"
    import redis

    _wait(lambda: _redis_ok(redis, port), 10, "redis-server")
    yield url


def _redis_ok(redis: Any, port: int) -> bool:
    try:
        return bool(redis.Redis(port=port).ping())
    except redis.RedisError:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ingest")
    parser.add_argument("--events", type=int, default=300_000, help="(a) events posted")
    parser.add_argument("--devices", type=int, default=64)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--web-workers", type=int, default=2)
    parser.add_argument("--worker-concurrency", type=int, default=2)
    parser.add_argument("--max-batches", type=int, default=20)
    parser.add_argument("--query-events", type=int, default=10_000_000, help="(b) events")
    parser.add_argument("--skip-a", action="store_true")
    parser.add_argument("--skip-b", action="store_true")
    parser.add_argument(
        "--decision-inputs",
        choices=("with", "without", "both"),
        default="with",
        help="(a) events with the optional decision inputs, without them, or both in turn",
    )
    parser.add_argument("--out", default=str(REPO_ROOT / "var" / "bench-ingest.json"))
    args = parser.parse_args(argv)
    processes = Processes()
    results: dict[str, Any] = {
        "started_at": datetime.now(UTC).isoformat(),
        "cpus": os.cpu_count(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }
    try:
        print(f"setting up {BENCH_DB} …", flush=True)
        _setup_database()
        with _own_redis(processes) as redis_url:
            _django(redis_url)
            if not args.skip_a and args.decision_inputs in ("without", "both"):
                results["end_to_end_without_decision_inputs"] = bench_end_to_end(
                    args, processes, redis_url, decision_inputs=False
                )
            if not args.skip_a and args.decision_inputs in ("with", "both"):
                results["end_to_end"] = bench_end_to_end(args, processes, redis_url)
            if not args.skip_b:
                results["day_query"] = bench_day_query(args)
    finally:
        processes.stop_all()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2, default=str))
    print(f"results: {args.out}")
    return 0
