"""bench/lab: the policy lab over a day of stored events, each figure against its baseline.

    .venv/bin/python -m bench.lab                       # --what backtest, 1,000,000 events
    .venv/bin/python -m bench.lab --events 200000 --what backtest

Its own database (`bench_lab`, dropped and re-created, migrated); one fleet with the demo's 12
cells published as v1 (stable) and a draft with other θs. `--events` raw events spread over the
last 24 hours are generated here with decisions made by `edge_sdk.decision.decide` under v1
(random but realistic signals, so the self-check has something to reproduce) and written with
binary COPY straight into `telemetry_event`, then VACUUM ANALYZEd.

Baseline, same run, same rows: reading them alone with `COPY (SELECT <the replay's columns>
…) TO STDOUT (FORMAT BINARY)`, every row parsed into a Python tuple (psycopg), nothing done
with it: what any Python consumer of those rows pays at least. Best of `--repeat`.

- `--what backtest`: `backtest_compute` of the draft over the 24 hours (the engine the Celery
  task runs; subject, stable version and self-check decided per event), best of `--repeat`;
  the ratio to the read; its peak memory: tracemalloc's peak and VmHWM growth of the process
  during a run over an eighth of the window and over the whole window (bounded: the two do not
  grow with the events).
- `--what calibration`: bench/lab/calibration.py (all 12 cells against one backtest), which
  registers itself in WHAT. Further parts do the same: a function (args, context) -> dict.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import time
import tracemalloc
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench import database_name, database_recreate, migrate, url_of

REPO_ROOT = Path(__file__).resolve().parents[2]
# Its own database, dropped and re-created: BENCH_LAB_DB names another (when two runs share a
# server), else `bench_lab` with BENCH_DB_SUFFIX (bench/__init__.py).
BENCH_DB = os.environ.get("BENCH_LAB_DB") or database_name("bench_lab")
BENCH_URL = url_of(BENCH_DB)
SLUG = "bench-lab"
CHUNK = 100_000


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "DATABASE_URL": BENCH_URL,
            "REDIS_URL": "",
            "SECRET_KEY": "bench-only",
            "DEBUG": "0",
            "HTTPS": "0",
            "DJANGO_SETTINGS_MODULE": "controlplane.settings",
            "LOG_LEVEL": "WARNING",
        }
    )
    return env


def _use_existing() -> None:
    os.environ.update(_env())
    import django

    django.setup()


def _setup() -> None:
    if not database_recreate(BENCH_DB):
        migrate(_env())
    os.environ.update(_env())
    import django

    django.setup()


@dataclass
class Context:
    """What every part of the bench shares: the fleet, its window and the read baseline."""

    fleet: Any
    start: datetime
    end: datetime
    events: int
    read_rows: int
    reads: list[Cost]

    def read(self) -> Cost:
        """The window's rows read alone once more (the baseline, taken again beside each run
        of a part, so that both see the same machine)."""
        cost, _ = read_alone(self.fleet.pk, self.start, self.end)
        self.reads.append(cost)
        return cost

    @property
    def best_read(self) -> Cost:
        return Cost(
            wall_s=min(c.wall_s for c in self.reads), cpu_s=min(c.cpu_s for c in self.reads)
        )


# --- the history ---------------------------------------------------------------------------------


def _fleet() -> Any:
    from django.db import transaction

    from routing_policies.demo import demo_table
    from routing_policies.services import (
        fleet_create,
        policy_draft_create,
        policy_draft_update_cells,
        policy_version_publish,
    )

    fleet = fleet_create(actor=None, slug=SLUG, name=SLUG, table=demo_table())
    policy_version_publish(actor=None, fleet=fleet, revision=1, note="v1")
    with transaction.atomic():
        draft = policy_draft_create(actor=None, fleet=fleet)
    edits = [
        {
            "task_type": "text",
            "latency_budget": budget,
            "privacy_tier": tier,
            "values": {"threshold": 0.45},
        }
        for budget in ("interactive", "background")
        for tier in ("normal", "sensitive")
    ]
    policy_draft_update_cells(actor=None, fleet=fleet, revision=draft.revision, edits=edits)
    return fleet


def _event_row(values: dict[str, Any], columns: tuple[str, ...]) -> tuple[Any, ...]:
    """A row in the raw table's COPY order (`columns`); a column the bench does not generate
    (a signal devices may leave out, e.g. the quality fields) is NULL, as the ingest stores it."""
    if len(values) > len(columns) or not values.keys() <= set(columns):
        raise ValueError(f"not columns of telemetry_event: {sorted(set(values) - set(columns))}")
    return tuple(values.get(name) for name in columns)


def store_events(fleet: Any, *, total: int, start: datetime, end: datetime) -> float:
    """`total` events decided by v1, spread over [start, end), COPYed in; seconds taken."""
    import psycopg

    from edge_sdk.decision import DeviceState, TaskSignals, decide
    from routing_policies.policies.sdk_cells import table_cells
    from routing_policies.selectors import version_table
    from telemetry.ingest.services.processing import EVENT_COLUMN_TYPES, EVENT_COLUMNS

    cells = table_cells(version_table(version=fleet.versions.get(number=1)))
    keys = sorted(cells)
    rng = random.Random(7)
    step = (end - start) / total
    began = time.perf_counter()
    names = ", ".join(name for name, _ in EVENT_COLUMN_TYPES)
    with psycopg.connect(BENCH_URL) as conn, conn.cursor() as cursor:
        with cursor.copy(f"COPY telemetry_event ({names}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types([kind for _, kind in EVENT_COLUMN_TYPES])
            for index in range(total):
                key = keys[rng.randrange(len(keys))]
                task = TaskSignals(
                    tokens=rng.randrange(0, 1200),
                    intent_conf=round(rng.random(), 3),
                    lm_conf=round(rng.random(), 3),
                    upload_bytes=rng.choice((0, 2_000, 40_000, 400_000)),
                )
                device = DeviceState(
                    rtt_ms=round(rng.lognormvariate(math.log(90), 0.6), 1),
                    bandwidth_kbps=rng.choice((300.0, 2_000.0, 8_000.0, 40_000.0)),
                    device_load=round(rng.random(), 2),
                    online=rng.random() > 0.03,
                    cloud_infer_ms=round(rng.uniform(150, 600), 1),
                    cloud_pressure=0.0,
                )
                decision = decide(cells[key], task, device)
                roll = rng.random()
                cache_hit = roll < 0.05
                fallback = (
                    "cloud_to_device" if decision.route == "cloud" and roll > 0.97 else "none"
                )
                if cache_hit:
                    latency = rng.uniform(1, 3)
                elif decision.route == "device":
                    latency = rng.lognormvariate(math.log(40), 0.4)
                else:
                    network = task.upload_bytes * 8 / device.bandwidth_kbps + device.rtt_ms
                    latency = network + rng.lognormvariate(math.log(300), 0.3)
                ts = start + step * index
                row = {
                    "event_id": uuid.UUID(int=rng.getrandbits(128), version=4),
                    "fleet_id": fleet.pk,
                    "device_id": f"phone-{index % 5000:04d}",
                    "ts": ts,
                    "received_at": ts,
                    "policy_version": 1,
                    "cohort": "stable",
                    "task_type": key[0],
                    "latency_budget": key[1],
                    "privacy_tier": key[2],
                    "route": decision.route,
                    "decided_by": decision.decided_by,
                    "fallback": fallback,
                    "latency_ms": round(latency, 3),
                    "cache_hit": cache_hit,
                    "ok": roll > 0.002,
                    "deidentified": False,
                    "score": decision.score,
                    "threshold": decision.threshold,
                    "tokens": task.tokens,
                    "intent_conf": task.intent_conf,
                    "lm_conf": task.lm_conf,
                    "upload_bytes": task.upload_bytes,
                    "rtt_ms": device.rtt_ms,
                    "bandwidth_kbps": device.bandwidth_kbps,
                    "device_load": device.device_load,
                    "uploaded": decision.route != "device" and not cache_hit,
                    "online": device.online,
                    "cloud_infer_ms": device.cloud_infer_ms,
                    "cloud_pressure": device.cloud_pressure,
                }
                copy.write_row(_event_row(row, EVENT_COLUMNS))
        conn.commit()
    with psycopg.connect(BENCH_URL, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE telemetry_event")
    return time.perf_counter() - began


# --- CPU seconds (this process and its PostgreSQL backend): contention-proof costs ---------------

_TICK = os.sysconf("SC_CLK_TCK")


def _backend_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime + stime


@dataclass
class Cost:
    """Wall seconds, and CPU seconds of this process plus its database backend."""

    wall_s: float
    cpu_s: float


class Meter:
    """Measures one phase: wall clock, this process's CPU and a backend's CPU."""

    def __init__(self, backend_pid: int) -> None:
        self.backend_pid = backend_pid

    def __enter__(self) -> Meter:
        self.wall = time.perf_counter()
        self.cpu = time.process_time()
        self.backend = _backend_cpu_s(self.backend_pid)
        return self

    def __exit__(self, *exc: object) -> None:
        self.cost = Cost(
            wall_s=time.perf_counter() - self.wall,
            cpu_s=time.process_time() - self.cpu + _backend_cpu_s(self.backend_pid) - self.backend,
        )


# --- the baseline --------------------------------------------------------------------------------


def read_alone(fleet_id: int, start: datetime, end: datetime) -> tuple[Cost, int]:
    """The cost of COPYing the window's rows out (the replay's columns), each parsed into a
    tuple, and how many there were."""
    import psycopg

    from lab.replay import COLUMNS

    types = dict(_column_types())
    rows = 0
    with psycopg.connect(BENCH_URL) as conn, conn.cursor() as cursor:
        sql = (
            f"COPY (SELECT {', '.join(COLUMNS)} FROM telemetry_event "
            "WHERE fleet_id = %s AND ts >= %s AND ts < %s) TO STDOUT (FORMAT BINARY)"
        )  # (the column names are ours)
        with (
            Meter(conn.info.backend_pid) as meter,
            cursor.copy(sql, (fleet_id, start, end)) as copy,
        ):
            copy.set_types([types[name] for name in COLUMNS])
            for _ in copy.rows():
                rows += 1
    return meter.cost, rows


def _column_types() -> list[tuple[str, str]]:
    from telemetry.ingest.services.processing import EVENT_COLUMN_TYPES

    return list(EVENT_COLUMN_TYPES)


# --- the backtest --------------------------------------------------------------------------------


def rss_kib(field: str) -> int:
    """A field of /proc/self/status in KiB (VmRSS, VmHWM)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def reset_peak_rss() -> None:
    """VmHWM back to the current RSS, to measure the peak of what follows."""
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS


def backtest_spec(context: Context, start: datetime) -> Any:
    """The bench's backtest: the draft against the stable v1 over [start, end)."""
    from lab.backtests.engine import BacktestInput
    from routing_policies.policies.sdk_cells import table_cells
    from routing_policies.pricing import CloudPrice
    from routing_policies.selectors import draft_get, version_table

    fleet = context.fleet
    v1 = table_cells(version_table(version=fleet.versions.get(number=1)))
    draft = draft_get(fleet=fleet)
    return BacktestInput(
        fleet_id=fleet.pk,
        start=start,
        end=context.end,
        subject=table_cells(version_table(version=draft)),
        stable=v1,
        versions={1: v1},
        price=CloudPrice.of_fleet(fleet),
    )


def bench_backtest(args: argparse.Namespace, context: Context) -> dict[str, Any]:
    from django.db import connection

    from lab.backtests.engine import backtest_compute

    spec = backtest_spec(context, context.start)
    connection.ensure_connection()
    backend = connection.connection.info.backend_pid
    runs: list[Cost] = []
    result: dict[str, Any] = {}
    for _ in range(args.repeat):  # interleaved with reads: both see the same load
        context.read()
        with Meter(backend) as meter:
            result = backtest_compute(spec)
        runs.append(meter.cost)
    best = Cost(wall_s=min(c.wall_s for c in runs), cpu_s=min(c.cpu_s for c in runs))
    read = context.best_read
    wall_ratio, cpu_ratio = best.wall_s / read.wall_s, best.cpu_s / read.cpu_s
    print(
        f"backtest: {result['events']:,} events; wall {best.wall_s:.2f} s vs read "
        f"{read.wall_s:.2f} s = {wall_ratio:.2f}x; CPU (process + backend) {best.cpu_s:.2f} s "
        f"vs {read.cpu_s:.2f} s = {cpu_ratio:.2f}x (best of {args.repeat} each; target <= 3x)",
        flush=True,
    )
    check = result["self_check"]
    print(
        f"    self-check: agreement {check['agreement']:.4f} on {check['eligible']:,} events; "
        f"latency error max {check['latency_error_max']:.3f}",
        flush=True,
    )
    memory = {}
    window = context.end - context.start
    for name, start in (("eighth", context.end - window / 8), ("whole", context.start)):
        part = backtest_spec(context, start)
        reset_peak_rss()
        rss_before = rss_kib("VmRSS")
        run = backtest_compute(part)
        hwm_growth = rss_kib("VmHWM") - rss_before
        entry: dict[str, Any] = {
            "events": run["events"],
            "rss_peak_growth_mib": round(hwm_growth / 1024, 1),
        }
        if not args.no_tracemalloc:
            tracemalloc.start()
            backtest_compute(part)
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            entry["tracemalloc_peak_mib"] = round(peak / 2**20, 2)
        memory[name] = entry
        print(f"    memory over the {name} of the window: {entry}", flush=True)
    return {
        "events": result["events"],
        "runs": [vars(c) for c in runs],
        "reads": [vars(c) for c in context.reads],
        "best": vars(best),
        "read_best": vars(read),
        "wall_ratio_to_read": round(wall_ratio, 3),
        "cpu_ratio_to_read": round(cpu_ratio, 3),
        "target_ratio": 3.0,
        "agreement": check["agreement"],
        "latency_self_check": check["latency"],
        "latency_error_max": check["latency_error_max"],
        "headline": result.get("headline"),
        "memory": memory,
    }


WHAT: dict[str, Callable[[argparse.Namespace, Context], dict[str, Any]]] = {
    "backtest": bench_backtest,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.lab")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--what", nargs="+", choices=sorted(WHAT), default=["backtest"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--reuse", action="store_true", help="keep the database of a last run")
    parser.add_argument("--no-tracemalloc", action="store_true", help="RSS only (faster)")
    parser.add_argument("--out", default=str(REPO_ROOT / "var" / "bench-lab.json"))
    args = parser.parse_args(argv)
    results: dict[str, Any] = {
        "started_at": datetime.now(UTC).isoformat(),
        "cpus": os.cpu_count(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "events": args.events,
    }
    if args.reuse:
        _use_existing()
        from routing_policies.models import Fleet
        from telemetry.models import Event

        fleet = Fleet.objects.get(slug=SLUG)
        last = Event.objects.filter(fleet_id=fleet.pk).order_by("-ts").values_list("ts", flat=True)
        end = last[0] + timedelta(seconds=1)
        start = end - timedelta(hours=24, seconds=1)
        print(f"reusing {BENCH_DB}", flush=True)
    else:
        print(f"setting up {BENCH_DB} …", flush=True)
        _setup()
        fleet = _fleet()
        end = datetime.now(UTC).replace(microsecond=0)
        start = end - timedelta(hours=24)
        stored_s = store_events(fleet, total=args.events, start=start, end=end)
        print(f"stored {args.events:,} events by COPY in {stored_s:.1f} s", flush=True)
    context = Context(fleet=fleet, start=start, end=end, events=args.events, read_rows=0, reads=[])
    first = context.read()
    context.read_rows = read_alone(fleet.pk, start, end)[1]
    print(
        f"read alone (COPY, rows parsed): {context.read_rows:,} rows, wall {first.wall_s:.2f} s, "
        f"CPU {first.cpu_s:.2f} s",
        flush=True,
    )
    for name in args.what:
        results[name] = WHAT[name](args, context)
    results["reads"] = [vars(c) for c in context.reads]
    results["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2, default=str))
    print(f"results: {args.out}")
    return 0
