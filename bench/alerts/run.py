"""bench/alerts: what judging a fleet's alert rules and rollout guards costs, against a baseline
run in the same process on the same data, and how many evaluations a burst of rollups causes.

    .venv/bin/python -m bench.alerts                     # 100,000 events, ~1-2 minutes
    .venv/bin/python -m bench.alerts --events 20000      # a quick check

1. Its own database (`bench_alerts`, recreated) and Redis db 13 (flushed). A fleet with the demo
   table, v1 stable and v2 rolling out at 25% with the default guards, the seven seeded rules;
   N events over the last 20 minutes (12 cells, both versions, three routes, latencies drawn
   per route) ingested and rolled up by the real services (`telemetry_batch_ingest`,
   `landed_batches_process`), so the minute rollups are what the worker writes.
2. Ours: `alerts_evaluate` of the fleet (7 rules, 4 guards: one rollup query for the longest
   window, everything judged in memory, states written), median of `--reps`.
3. Baseline: `fleet_metrics` over 10 minutes grouped by cohort, the dashboard's one read of
   the same rows (one query, histograms merged) — the floor of any design that reads rollups.
4. Coalescing: the alert receiver of `rollups_stored` called 1,000 times back to back for the
   fleet (as 1,000 processed batches would); counted: evaluation tasks queued in Redis.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench import database_name, database_recreate, database_url, migrate, redis_url
from routing_policies.cell_schema import SEED_DIMENSIONS
from routing_policies.documents import ordered_keys

REPO_ROOT = Path(__file__).resolve().parents[2]
BENCH_DB = database_name("bench_alerts")
REDIS_URL = redis_url("redis://127.0.0.1:6379/13")
SLUG = "bench-alerts"
CELLS = ordered_keys(SEED_DIMENSIONS)  # the demo table's 12 cells, in table order


def _env() -> dict[str, str]:
    return {
        "DATABASE_URL": database_url("bench_alerts"),
        "REDIS_URL": REDIS_URL,
        "SECRET_KEY": "bench-only",
        "DEBUG": "0",
        "HTTPS": "0",  # plain http to 127.0.0.1 (docs/operations.md)
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
        "LOG_LEVEL": "WARNING",
        "TELEMETRY_RATE_LIMIT_BATCHES": "0",
    }


def _setup() -> None:
    if not database_recreate(BENCH_DB):
        migrate(_env())
    os.environ.update(_env())
    import django

    django.setup()
    import redis

    redis.Redis.from_url(REDIS_URL).flushdb()


def _event(rng: random.Random, device_id: str, ts: datetime, version: int) -> dict[str, Any]:
    task, budget, tier = rng.choice(CELLS)
    cloud_share = 0.3  # a healthy candidate: the guards stay quiet and are judged every time
    route = "device" if tier == "sensitive" or rng.random() > cloud_share else "cloud"
    median = 35.0 if route == "device" else 120.0
    return {
        "event_id": str(uuid.uuid4()),
        "device_id": device_id,
        "ts": ts.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
        "policy_version": version,
        "task_type": task,
        "latency_budget": budget,
        "privacy_tier": tier,
        "route": route,
        "decided_by": "privacy" if tier == "sensitive" else "threshold",
        "latency_ms": round(rng.lognormvariate(0, 0.4) * median, 2),
        "fallback": "cloud_to_device" if route == "cloud" and rng.random() < 0.03 else "none",
        "cache_hit": False,
        "ok": rng.random() > 0.005,
    }


def _populate(events: int) -> Any:
    from routing_policies.demo import demo_table
    from routing_policies.services import (
        device_enroll,
        fleet_create,
        fleet_enrollment_key_rotate,
        policy_draft_create,
        policy_draft_update_cells,
        policy_version_publish,
        rollout_advance,
    )
    from telemetry.alerts.services import alert_rules_seed, rollout_start_guarded
    from telemetry.ingest.services import landed_batches_process, telemetry_batch_ingest
    from telemetry.rollups.maintenance import rollups_compact

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
    alert_rules_seed(actor=None, fleet=fleet)
    key = fleet_enrollment_key_rotate(actor=None, fleet=fleet)
    devices = [device_enroll(fleet_key=key, device_id=f"dev-{i}")[0] for i in range(20)]
    # Events of the last 20 minutes: v1 before the rollout, both after (the rollout started
    # 20 minutes ago, backdated so the candidate cohort spans the whole window).
    rollout = rollout_start_guarded(
        actor=None, fleet=fleet, version=2, guard_options={"guards": "default"}
    )
    rollout_advance(actor=None, fleet=fleet, to_stage=25)
    from routing_policies.models import Rollout

    now = datetime.now(UTC)
    Rollout.objects.filter(pk=rollout.pk).update(
        started_at=now - timedelta(minutes=21), stage_changed_at=now - timedelta(minutes=21)
    )
    rng = random.Random(7)
    batch = 1000
    for start in range(0, events, batch):
        device = devices[(start // batch) % len(devices)]
        body = []
        for _ in range(min(batch, events - start)):
            ts = now - timedelta(seconds=rng.uniform(1, 20 * 60))
            version = 2 if rng.random() < 0.25 else 1
            body.append(_event(rng, device.device_id, ts, version))
        telemetry_batch_ingest(device=device, body=json.dumps({"events": body}).encode())
        landed_batches_process()
    rollups_compact()  # as the beat does every 30 s: one row per key
    return fleet


def _median_ms(action: Any, reps: int) -> float:
    times = []
    for _ in range(reps):
        began = time.perf_counter()
        action()
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.alerts")
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args(argv)
    _setup()
    from telemetry.alerts.models import AlertRule, RolloutGuardSet
    from telemetry.alerts.services import alerts_evaluate
    from telemetry.dashboards.metrics import fleet_metrics
    from telemetry.models import MinuteRollup

    began = time.perf_counter()
    fleet = _populate(args.events)
    print(f"populated {args.events:,} events in {time.perf_counter() - began:.1f} s")
    rows = MinuteRollup.objects.filter(fleet_id=fleet.pk).count()

    ours = _median_ms(lambda: alerts_evaluate(fleet_id=fleet.pk), args.reps)
    baseline = _median_ms(
        lambda: fleet_metrics(
            fleet_id=fleet.pk, window=timedelta(minutes=10), group_by=["version", "cohort"]
        ),
        args.reps,
    )
    states = dict(AlertRule.objects.filter(fleet=fleet).values_list("name", "state"))
    guard_set = RolloutGuardSet.objects.get(rollout__fleet=fleet)

    # Coalescing: 1,000 signals back to back through the receiver.
    import redis

    from telemetry.alerts.tasks import request_alert_evaluation

    queue = redis.Redis.from_url(REDIS_URL)

    def evaluation_tasks() -> int:
        queued = [json.loads(raw)["headers"]["task"] for raw in queue.lrange("celery", 0, -1)]
        return sum(1 for task in queued if task == "telemetry.evaluate_alerts")

    # (Not FLUSHDB: that would drop kombu's queue binding, which this process declared once.)
    queue.delete(f"alerts:evaluate:{fleet.pk}")
    before = evaluation_tasks()
    burst_began = time.perf_counter()
    for _ in range(1000):
        request_alert_evaluation(frozenset({fleet.pk}))
    burst_ms = (time.perf_counter() - burst_began) * 1000
    evaluations = evaluation_tasks() - before

    print(f"minute rollup rows of the fleet: {rows:,}")
    print(f"alerts_evaluate (7 rules, 4 guards), median of {args.reps}: {ours:.1f} ms")
    print(f"baseline fleet_metrics 10m by version+cohort, median of {args.reps}: {baseline:.1f} ms")
    print(f"ratio ours / baseline: {ours / baseline:.2f}")
    print(f"rule states: {states}")
    print(f"guards: {guard_set.verdict} ({guard_set.verdict_reason[:120]})")
    print(
        f"1,000 rollups_stored (alert receiver) in {burst_ms:.0f} ms -> "
        f"{evaluations} evaluation task(s) queued"
    )


if __name__ == "__main__":
    main()
