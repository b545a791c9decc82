"""bench/dashboard: the fleet dashboard's payload over 10 million events, against baselines run
in the same process on the same data.

    .venv/bin/python -m bench.dashboard                       # 10 M events, ~5-12 minutes
    .venv/bin/python -m bench.dashboard --events 1000000      # a quick check

1. Generation (as bench/ingest (b) does, with its event model): N events spread over the
   24-hour window (the current hour and the 23 before it) up to the start of the run, 12 cells
   × 2 versions (stable v1, candidate v2) × routes × deciding steps, written with COPY into the
   raw table `telemetry_event` and, folded by telemetry.rollups exactly as the worker folds
   them, into the minute, hour and fleet-hour rollups. The fleet has v1 stable, v2 rolling out
   at 25%, 10,000 devices (a share of them online) and its audit trail, so every part of the
   payload has something to compute.
2. Ours: `telemetry.dashboards.selectors.fleet_dashboard` for the 24-hour window
   (everything the page draws: summary, series, latency per route, cohorts, grid, budgets,
   markers, convergence), median of `--reps` runs; also the whole API request in process
   (DRF view, auth, JSON rendering) and the other windows (15m, 1h, 7d).
3. Baselines, same window, same data:
   (a) the same figures computed exactly from raw events in ONE PostgreSQL query:
       GROUPING SETS over (hour, route), (hour, cohort), (hour), (route), (cohort), (cell), ()
       with counts and `percentile_cont(ARRAY[0.5, 0.95, 0.99])`; best of 2;
   (b) the bare rollup scan: the rows `fleet_dashboard` reads, fetched and thrown away
       (the floor for any design that reads these rollups in Python).
   Accuracy: each route's and cohort's P50/P95/P99 from the merged sketches against (a).
4. With a segment filter (issue 26): the fleet has two named segments, `npu` (35% of the
   events) and `big-memory` (50%), each event in each at random, counted in the segment rows
   as the worker counts it. The 24-hour payload for `segment=npu` against today's unfiltered
   one, timed alternately in the same run (target: at most 1.2× the unfiltered); its event
   count and routes against the raw events whose `segments` hold the segment.

Its own database (`bench_dashboard`, recreated); no server, no Redis (the feed's cost is this
computation once per update, however many browsers watch).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import database_name, database_recreate, database_url, migrate
from bench.ingest.history import store_history

REPO_ROOT = Path(__file__).resolve().parents[2]
BENCH_DB = database_name("bench_dashboard")
BENCH_URL = database_url("bench_dashboard")
SLUG = "bench-dashboard"
DEVICES = 10_000
# The fleet's named segments and the share of events in each (issue 26).
SEGMENT_RULES = {
    "npu": {"attribute": "accelerator", "equals": "npu"},
    "big-memory": {"attribute": "memory_gb", "range": {"gte": 8}},
}
SEGMENT_SHARES = {"npu": 0.35, "big-memory": 0.5}
FILTERED = "npu"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "DATABASE_URL": BENCH_URL,
            "REDIS_URL": "",
            "SECRET_KEY": "bench-only",
            "DEBUG": "0",
            "HTTPS": "0",  # plain http to 127.0.0.1 (docs/operations.md)
            "ALLOWED_HOSTS": "testserver,127.0.0.1",
            "DJANGO_SETTINGS_MODULE": "controlplane.settings",
            "LOG_LEVEL": "WARNING",
        }
    )
    return env


def _setup() -> None:
    if not database_recreate(BENCH_DB):
        migrate(_env())
    os.environ.update(_env())
    import django

    django.setup()


def _make_fleet() -> Any:
    """v1 stable, v2 published and rolling out at 25%, DEVICES devices (a quarter online)."""
    from django.utils import timezone

    from routing_policies.demo import demo_table
    from routing_policies.models import Device
    from routing_policies.services import (
        fleet_create,
        policy_draft_create,
        policy_draft_update_cells,
        policy_version_publish,
        rollout_advance,
        rollout_start,
    )

    fleet = fleet_create(actor=None, slug=SLUG, name=SLUG, table=demo_table())
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
    from routing_policies.models import Segment

    for name, rule in SEGMENT_RULES.items():
        Segment.objects.create(fleet=fleet, name=name, rule=rule)
    rollout_start(actor=None, fleet=fleet, version=2)
    rollout_advance(actor=None, fleet=fleet, to_stage=25)
    now = timezone.now()
    rng = random.Random(3)
    Device.objects.bulk_create(
        [
            Device(
                fleet=fleet,
                device_id=f"dev-{index:05d}",
                token_hash=secrets.token_hex(32),
                platform="android",
                connected=rng.random() < 0.25,
                last_seen_at=now,
                acked_version=rng.choice([1, 1, 1, 2]),
                acked_at=now,
            )
            for index in range(DEVICES)
        ],
        batch_size=2000,
    )
    return fleet


def _segment_ids(fleet_id: int) -> dict[str, int]:
    from routing_policies.models import Segment

    return dict(Segment.objects.filter(fleet_id=fleet_id).values_list("name", "pk"))


def _generate(fleet_id: int, total: int, start: datetime) -> dict[str, Any]:
    """`total` events from `start` (the 24-hour window's first hour) until now: raw rows and
    the three rollup levels, with the segments' rows."""
    ids = _segment_ids(fleet_id)
    return store_history(
        BENCH_URL,
        fleet_id=fleet_id,
        total=total,
        start=start,
        end=datetime.now(UTC),
        device_id="dev-00000",
        segments=[(ids[name], share) for name, share in SEGMENT_SHARES.items()],
    )


def _segment_exact(fleet_id: int, segment_id: int, start: datetime) -> dict[str, int]:
    """Events per route of the segment, from the raw events."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT route, count(*) FROM telemetry_event WHERE fleet_id = %s AND ts >= %s "
            "AND segments @> %s::jsonb GROUP BY route",
            [fleet_id, start, json.dumps([segment_id])],
        )
        return dict(cursor.fetchall())


def _segment_ratio(fleet: Any, reps: int, start: datetime) -> dict[str, Any]:
    """The 24-hour payload filtered by a segment against the unfiltered one, timed
    alternately (each rep: one of each), and the filtered figures against the raw events."""
    from telemetry.dashboards.selectors import DashboardView, fleet_dashboard

    whole_view = DashboardView(window="24h")
    segment_view = DashboardView(window="24h", segment=FILTERED)
    fleet_dashboard(fleet=fleet, view=segment_view)  # warm
    whole_times: list[float] = []
    segment_times: list[float] = []
    payload: dict[str, Any] = {}
    for _ in range(reps):
        whole_times += _timed(lambda: fleet_dashboard(fleet=fleet, view=whole_view), 1)[0]
        times, payload = _timed(lambda: fleet_dashboard(fleet=fleet, view=segment_view), 1)
        segment_times += times
    exact = _segment_exact(fleet.pk, _segment_ids(fleet.pk)[FILTERED], start)
    assert payload["summary"]["events"] == sum(exact.values()), (payload["summary"], exact)
    for route, count in exact.items():
        assert payload["routes"][route]["events"] == count, (route, count)
    whole_s, segment_s = statistics.median(whole_times), statistics.median(segment_times)
    return {
        "segment": FILTERED,
        "events": sum(exact.values()),
        "whole_ms_median": round(1000 * whole_s, 1),
        "segment_ms_median": round(1000 * segment_s, 1),
        "ratio_segment_to_whole": round(segment_s / whole_s, 3),
        "payload_bytes": len(json.dumps(payload, default=str)),
    }


def _timed(function: Any, reps: int, cpu: list[float] | None = None) -> tuple[list[float], Any]:
    """Wall-clock seconds of each call (and this process's CPU seconds into `cpu`)."""
    times = []
    result = None
    for _ in range(reps):
        began, began_cpu = time.perf_counter(), time.process_time()
        result = function()
        times.append(time.perf_counter() - began)
        if cpu is not None:
            cpu.append(time.process_time() - began_cpu)
    return times, result


RAW_SQL = """
SELECT date_trunc('hour', ts) AS hour, route, cohort,
       task_type, latency_budget, privacy_tier,
       GROUPING(date_trunc('hour', ts), route, cohort, task_type, latency_budget, privacy_tier),
       count(*),
       count(*) FILTER (WHERE fallback = 'cloud_to_device'),
       count(*) FILTER (WHERE fallback = 'device_to_cloud'),
       count(*) FILTER (WHERE cache_hit),
       count(*) FILTER (WHERE NOT ok),
       count(*) FILTER (
           WHERE privacy_tier = 'sensitive' AND route <> 'device' AND NOT deidentified
       ),
       percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY latency_ms)
FROM telemetry_event
WHERE fleet_id = %s AND ts >= %s
GROUP BY GROUPING SETS (
    (date_trunc('hour', ts), route), (date_trunc('hour', ts), cohort), (date_trunc('hour', ts)),
    (route), (cohort), (task_type, latency_budget, privacy_tier), ()
)
"""


def _raw_figures(fleet_id: int, start: datetime) -> list[tuple[Any, ...]]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(RAW_SQL, [fleet_id, start])
        return list(cursor.fetchall())


def _bare_scan(fleet_id: int, table: str, column: str, start: datetime) -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {column}, policy_version, cohort, task_type, latency_budget, privacy_tier, "
            "route, events, fallback_cloud_to_device, fallback_device_to_cloud, cache_hits, "
            f"errors, privacy_violations, latency_hist FROM {table} "
            f"WHERE fleet_id = %s AND segment = 0 AND {column} >= %s",  # all-devices rows
            [fleet_id, start],
        )
        return len(cursor.fetchall())


def _relative_errors(ours: dict[str, Any], exact: tuple[float, float, float]) -> list[float]:
    return [
        abs(ours[name] - value) / value
        for name, value in zip(("p50", "p95", "p99"), exact, strict=True)
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.dashboard")
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--raw-reps", type=int, default=2, help="runs of the raw baseline (2)")
    parser.add_argument("--json", type=Path, default=REPO_ROOT / "var" / "bench-dashboard.json")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="measure again on the data of the last run (same hour: the window must not move)",
    )
    args = parser.parse_args(argv)

    load_before = os.getloadavg()
    print(f"load average before: {load_before}", flush=True)
    if args.reuse:
        os.environ.update(_env())
        import django

        django.setup()
    else:
        _setup()
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from rest_framework.test import APIClient

    from telemetry.dashboards.selectors import WINDOWS, DashboardView, fleet_dashboard
    from telemetry.rollups import plan_window

    view = DashboardView(window="24h")
    plan = plan_window(WINDOWS[view.window], now=datetime.now(UTC))
    if args.reuse:
        from routing_policies.models import Fleet

        fleet = Fleet.objects.get(slug=SLUG)
        last = json.loads(args.json.read_text())
        generated = last["generated"]
        if generated.get("window_from", last.get("window_from")) != plan.start.isoformat():
            print("the window moved since the data were generated: its first hours are outside")
    else:
        fleet = _make_fleet()
        print(f"generating {args.events:,} events from {plan.start:%H:%M} UTC …", flush=True)
        generated = _generate(fleet.pk, args.events, plan.start)
        generated["window_from"] = plan.start.isoformat()
        print(f"    {generated}", flush=True)
    load_generated = os.getloadavg()
    if plan_window(WINDOWS[view.window], now=datetime.now(UTC)).start != plan.start:
        print("the hour turned while generating: run again", flush=True)
        return 1
    total_events = int(generated["events"])
    results: dict[str, Any] = {"generated": generated, "reps": args.reps}

    # Ours: the selector, then the whole API request in process.
    fleet_dashboard(fleet=fleet, view=view)  # warm: imports, connection, plans
    with CaptureQueriesContext(connection) as queries:
        payload = fleet_dashboard(fleet=fleet, view=view)
    # Counted now: each API request below resets Django's query log.
    query_count = len(queries.captured_queries)
    query_ms = sum(float(q["time"]) for q in queries.captured_queries) * 1000
    ours_cpu: list[float] = []
    ours_times, payload = _timed(
        lambda: fleet_dashboard(fleet=fleet, view=view), args.reps, ours_cpu
    )
    body = json.dumps(payload, default=str)
    admin = get_user_model().objects.filter(username="bench").first()
    if admin is None:
        admin = get_user_model().objects.create_superuser("bench", "", "bench-pass")
    client = APIClient()
    client.force_authenticate(user=admin)
    url = f"/api/v1/fleets/{SLUG}/dashboard"
    api_times, response = _timed(lambda: client.get(url, {"window": "24h"}), args.reps)
    assert response.status_code == 200, response.content[:500]
    windows = {}
    for window in ("15m", "1h", "7d"):
        times, other = _timed(
            lambda w=window: fleet_dashboard(fleet=fleet, view=DashboardView(window=w)),
            max(3, args.reps // 2),
        )
        windows[window] = {
            "median_ms": round(1000 * statistics.median(times), 1),
            "events": other["summary"]["events"],
        }

    # Baselines.
    raw_times, raw_rows = _timed(lambda: _raw_figures(fleet.pk, plan.start), args.raw_reps)
    level = plan.level(cell_level=True)
    scan_times, scanned = _timed(
        lambda: _bare_scan(fleet.pk, level.table, level.time_column, plan.start), args.reps
    )

    # Accuracy against the exact figures, and the same event count.
    exact_route = {}
    exact_cohort = {}
    exact_total = None
    for row in raw_rows:
        _hour, route, cohort, *_cell, grouping, count = row[:8]
        quantiles = row[-1]
        # GROUPING bits (hour, route, cohort, task, budget, tier): 1 = aggregated away.
        if grouping == 0b101111:
            exact_route[route] = (quantiles, count)
        elif grouping == 0b110111:
            exact_cohort[cohort] = (quantiles, count)
        elif grouping == 0b111111:
            exact_total = count
    if not args.reuse:
        assert exact_total == total_events, (exact_total, total_events)
    total_events = int(exact_total or 0)
    assert payload["summary"]["events"] == exact_total, (
        payload["summary"]["events"],
        exact_total,
    )
    worst = 0.0
    accuracy = {}
    for route, (quantiles, count) in exact_route.items():
        figures = payload["routes"][route]
        assert figures["events"] == count
        errors = _relative_errors(figures["latency_ms"], quantiles)
        worst = max(worst, *errors)
        accuracy[f"route {route}"] = round(100 * max(errors), 3)
    for cohort, (quantiles, count) in exact_cohort.items():
        figures = payload["cohorts"][cohort]["summary"]
        assert figures["events"] == count
        errors = _relative_errors(figures["latency_ms"], quantiles)
        worst = max(worst, *errors)
        accuracy[f"cohort {cohort}"] = round(100 * max(errors), 3)

    segment = _segment_ratio(fleet, args.reps, plan.start)
    ours_s = statistics.median(ours_times)
    api_s = statistics.median(api_times)
    raw_s = min(raw_times)
    scan_s = statistics.median(scan_times)
    load_after = os.getloadavg()
    results.update(
        {
            "window_from": plan.start.isoformat(),
            "rollup_rows_read": scanned,
            "queries": query_count,
            "query_ms_in_postgres": round(query_ms, 1),
            "selector_cpu_ms_median": round(1000 * statistics.median(ours_cpu), 1),
            "payload_bytes": len(body),
            "selector_ms": {
                "median": round(1000 * ours_s, 1),
                "min": round(1000 * min(ours_times), 1),
                "max": round(1000 * max(ours_times), 1),
            },
            "api_ms": {"median": round(1000 * api_s, 1), "max": round(1000 * max(api_times), 1)},
            "other_windows": windows,
            "raw_grouping_sets_s": round(raw_s, 3),
            "bare_scan_ms": round(1000 * scan_s, 1),
            "speedup_vs_raw": round(raw_s / ours_s, 1),
            "api_speedup_vs_raw": round(raw_s / api_s, 1),
            "overhead_vs_bare_scan": round(ours_s / scan_s, 2),
            "segment_filter": segment,
            "worst_relative_error_pct": round(100 * worst, 3),
            "relative_error_pct": accuracy,
            "load_average": {
                "before": [round(x, 2) for x in load_before],
                "after_generation": [round(x, 2) for x in load_generated],
                "after": [round(x, 2) for x in load_after],
            },
        }
    )
    print(
        f"24 h dashboard over {total_events:,} events ({scanned:,} hour-rollup rows, "
        f"{query_count} queries, {len(body):,} bytes of JSON):\n"
        f"    selector CPU (this process) {1000 * statistics.median(ours_cpu):.1f} ms median, "
        f"its queries {query_ms:.1f} ms in PostgreSQL\n"
        f"    selector {1000 * ours_s:.1f} ms median (min {1000 * min(ours_times):.1f}, "
        f"max {1000 * max(ours_times):.1f}); whole API request {1000 * api_s:.1f} ms\n"
        f"    baseline (a) exact from raw events, one GROUPING SETS query: {raw_s:.2f} s "
        f"→ {raw_s / ours_s:.0f}× slower than the selector\n"
        f"    baseline (b) bare scan of the same rollup rows: {1000 * scan_s:.1f} ms "
        f"(the selector takes {ours_s / scan_s:.1f}× that)\n"
        f"    other windows (selector, median): {windows}\n"
        f"    worst relative error of P50/P95/P99 per route and cohort: {100 * worst:.3f}%\n"
        f"    segment filter ({segment['segment']}, {segment['events']:,} events, equal to the "
        f"raw events'): {segment['segment_ms_median']} ms median against "
        f"{segment['whole_ms_median']} ms unfiltered, alternately: ratio "
        f"{segment['ratio_segment_to_whole']} (target ≤ 1.2)\n"
        f"    load average after: {load_after}",
        flush=True,
    )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2, default=str))
    print(f"figures: {args.json}")
    return 0
