"""bench/guards: how often guarded rollouts roll back wrongly, and how fast they catch a bad
candidate, for the statistical guards against today's fixed-limit guards on the same data.

    .venv/bin/python -m bench.guards                  # the issue's runs, ~30 min on 2 busy cores
    .venv/bin/python -m bench.guards --aa 40 --ab 8   # a quick check

Method (docs/alerts.md, "Statistical guards: proof"):
1. Worlds. The simulator's own 200-device fleet (`edge_sdk.simulate.virtual.VirtualFleet`: its
   device profiles, links, loads, shared cloud queue and task mix, and the SDK's own routing,
   fallback, cache and telemetry) runs 30 virtual minutes at 20 tasks/s, once per world and
   seed: `stable` (the demo table), `one_cell` (the demo table with one cell's θ raised so that
   cell's cloud share goes from ~30% to ~70%), `fleet_wide` (the simulator's buggy candidate:
   its small model doubts itself, cloud share ~30% → ~70% everywhere). Every event is kept
   with its device and virtual time. No socket, no database: the events are the SDK's.
2. Rollouts. Each rollout draws a salt; PROTOCOL.md's bucket rule (routing_policies.assignment)
   puts each device in the candidate or stable cohort at 5%, then 25%, then 100%; a device's
   events come from the candidate world while it is on the candidate, else from the stable
   world (same seed: the same devices). A/A: the candidate world is the stable world itself.
   Subtle: the candidate's events are the stable world's with 3% of them made to fall back
   (cloud → device) and every latency × 1.2. SRM: the candidate loses half its events.
3. Guards. Every 30 virtual seconds (a rollup, then a look) the events so far are folded into
   minute rollup rows by the worker's own fold (`telemetry.rollups.Tally`) and judged by the
   production code: `telemetry.alerts.sequential` (`judge_sequential`, `stage_role`,
   `cohort_sample_ratios`, `stage_decide`) for the "statistical" preset, and
   `telemetry.alerts.judging` (`figures_of`, `judge_guard`) for the "default" fixed preset,
   both through the same stage decision: bake 10 min at 5% and 25%, auto-advance, no stage
   limit, stop at 100% or after 30 min. A/A rollouts of one world share its events but not
   their split (a new salt each).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
os.environ.setdefault("SECRET_KEY", "bench-only")
os.environ.setdefault("LOG_LEVEL", "WARNING")

import django  # the settings above first

django.setup()

import msgspec  # noqa: E402

from edge_sdk.simulate.fleet import FleetConfig  # noqa: E402
from edge_sdk.simulate.virtual import VirtualFleet  # noqa: E402
from routing_policies.assignment import FleetAssignment  # noqa: E402
from routing_policies.cell_schema import SEED_DIMENSIONS  # noqa: E402
from routing_policies.demo import demo_table  # noqa: E402
from routing_policies.documents import build_document  # noqa: E402
from telemetry.alerts.judging import ScopeFigures, figures_of, judge_guard  # noqa: E402
from telemetry.alerts.sequential import (  # noqa: E402
    CohortFigures,
    Exposure,
    SequentialGuard,
    StageFacts,
    cohort_sample_ratios,
    judge_sequential,
    stage_decide,
    stage_role,
)
from telemetry.alerts.services.guards import DEFAULT_GUARDS, STATISTICAL_GUARDS  # noqa: E402
from telemetry.rollups import RollupRow, Tally, figures_at  # noqa: E402
from telemetry.rollups.schema import METRIC_FIELDS  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
DEVICES = 200
RATE = 20.0  # tasks per second, fleet-wide (the demo fleet of `make run` has 5)
MINUTES = 30
STEP_S = 30  # a rollup and a look every 30 virtual seconds
BAKE_MIN = 10
STAGES = (5, 25, 100)
STABLE, CANDIDATE = 1, 2
ONE_CELL = ("text", "background", "normal")
START = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)  # virtual second 0
CELLS_PLANNED = len(demo_table())


@dataclass(slots=True)
class Event:
    """One simulated event, as much of it as the fold reads (telemetry.rollups.EventLike)."""

    second: float
    device: str
    policy_version: int
    task_type: str
    latency_budget: str
    privacy_tier: str
    route: str
    decided_by: str
    fallback: str
    latency_ms: float
    cache_hit: bool
    ok: bool
    score: float | None
    tokens: int | None
    deidentified: bool = False
    uploaded: bool | None = None
    refine_changed: bool | None = None
    refine_edit_ratio: float | None = None
    quality: float | None = None
    shadow_refine: bool | None = None

    @property
    def ts(self) -> datetime:
        return START + timedelta(seconds=self.second)


def _document(table: dict[Any, Any], number: int) -> dict[str, Any]:
    return build_document(
        fleet_slug="bench-guards",
        number=number,
        published_at=None,
        dimensions={name: list(values) for name, values in SEED_DIMENSIONS.items()},
        table=table,
    )


def one_cell_table(threshold: float) -> dict[Any, Any]:
    """The demo table with ONE_CELL's θ set (higher θ: more tasks to the cloud)."""
    table = demo_table()
    table[ONE_CELL] = {**table[ONE_CELL], "threshold": threshold}
    return table


def simulate(world: str, seed: int, threshold: float) -> list[Event]:
    """MINUTES of the simulated fleet in `world`, every event with its device and time."""
    buggy = world == "fleet_wide"
    table = one_cell_table(threshold) if world == "one_cell" else demo_table()
    config = FleetConfig(
        base_url="http://127.0.0.1:9",
        fleet_key="bench",
        devices=DEVICES,
        rate=RATE,
        scenario="buggy-candidate" if buggy else "steady",
        buggy_version=1 if buggy else None,
        seed=seed,
        connect_per_s=1e9,
        progress_s=1e9,
        offline_spells=False,
    )
    fleet = VirtualFleet(config, _document(table, 1), wall_start=START.timestamp())
    events: list[Event] = []
    try:
        for _ in range(MINUTES * 60 // STEP_S):
            for device_id, body in fleet.advance(STEP_S):
                for raw in msgspec.json.decode(body)["events"]:
                    ts = datetime.fromisoformat(raw["ts"].replace("Z", "+00:00"))
                    events.append(
                        Event(
                            second=(ts - START).total_seconds(),
                            device=device_id,
                            policy_version=1,
                            task_type=raw["task_type"],
                            latency_budget=raw["latency_budget"],
                            privacy_tier=raw["privacy_tier"],
                            route=raw["route"],
                            decided_by=raw["decided_by"],
                            fallback=raw["fallback"],
                            latency_ms=float(raw["latency_ms"]),
                            cache_hit=bool(raw["cache_hit"]),
                            ok=bool(raw["ok"]),
                            score=raw.get("score"),
                            tokens=raw.get("tokens"),
                        )
                    )
    finally:
        fleet.close()
    events.sort(key=lambda e: e.second)
    return events


# --- one rollout ----------------------------------------------------------------------------------


def _sequential_guards() -> list[SequentialGuard]:
    return [
        SequentialGuard(metric=g["metric"], tolerance=g["tolerance"])
        for g in STATISTICAL_GUARDS
        if g.get("kind") == "sequential"
    ]


def _fixed_critical() -> list[dict[str, Any]]:
    return [g for g in STATISTICAL_GUARDS if g.get("kind") != "sequential"]


BUDGETS = {
    (version, *cell): int(values["latency_budget_ms"])
    for cell, values in demo_table().items()
    for version in (STABLE, CANDIDATE)
}


@dataclass(slots=True)
class Outcome:
    """What became of one rollout under one guard preset."""

    action: str = "running"  # rolled_back · completed · running (at the horizon)
    at_s: float | None = None  # when (since the start)
    reason: str = ""
    held_srm_at_s: float | None = None
    stages: list[tuple[int, float]] = field(default_factory=list)


def _rows_of(slot: dict[tuple[Any, ...], Tally], minute: datetime) -> list[RollupRow]:
    return [
        RollupRow(
            bucket=minute,
            policy_version=key[0],
            cohort=key[1],
            route=key[5],
            task_type=key[2],
            latency_budget=key[3],
            privacy_tier=key[4],
            decided_by="",
            sums=tuple(getattr(tally, name) for name in METRIC_FIELDS),
            latency_hist={str(k): v for k, v in tally.latency_hist.items()},
        )
        for key, tally in slot.items()
    ]


def _subtle(event: Event, rng: random.Random) -> Event:
    fallback = event.fallback
    if fallback == "none" and rng.random() < 0.031:
        fallback = "cloud_to_device"
    return replace(event, latency_ms=event.latency_ms * 1.2, fallback=fallback)


def run_rollout(
    *,
    stable: Sequence[Event],
    candidate: Sequence[Event],
    kind: str,
    salt: str,
    preset: str,
    holdback: int = 0,
    first_stage: int = 0,
) -> Outcome:
    """One guarded rollout over the two worlds' events, judged every STEP_S seconds; with a
    `holdback`, that percent of the fleet stays on stable at 100% (docs/PROTOCOL.md);
    `first_stage`: the index in STAGES it starts at (2: straight at 100%)."""
    rng = random.Random(salt)
    outcome = Outcome()
    stage_index, stage_start = first_stage, 0.0
    quiet_since: datetime | None = None
    devices = sorted({e.device for e in stable})
    rows: list[RollupRow] = []
    cohorts = {"candidate": CohortFigures(), "stable": CohortFigures()}
    seen: dict[str, set[str]] = {"candidate": set(), "stable": set()}
    cursor = {"stable": 0, "candidate": 0}
    streams = {"stable": stable, "candidate": candidate}
    split: dict[int, set[str]] = {}
    outcome.stages.append((STAGES[first_stage], 0.0))
    for step in range(1, MINUTES * 60 // STEP_S + 1):
        now_s = step * STEP_S
        stage = STAGES[stage_index]
        if stage not in split:
            assignment = FleetAssignment(
                stable=STABLE, candidate=CANDIDATE, salt=salt, percent=stage, holdback=holdback
            )
            split[stage] = {d for d in devices if assignment.in_candidate_cohort(d)}
        on_candidate = split[stage]
        slot: dict[tuple[Any, ...], Tally] = {}
        for world, stream in streams.items():
            index = cursor[world]
            while index < len(stream) and stream[index].second < now_s:
                event = stream[index]
                index += 1
                mine = event.device in on_candidate
                if mine != (world == "candidate"):
                    continue
                cohort = "candidate" if mine else "stable"
                seen[cohort].add(event.device)
                if mine:
                    if kind == "srm" and rng.random() < 0.5:
                        continue  # the candidate's lost telemetry
                    if kind == "subtle":
                        event = _subtle(event, rng)
                version = CANDIDATE if mine else STABLE
                key = (version, cohort, event.task_type, event.latency_budget,
                       event.privacy_tier, event.route, int(event.second // 60))  # fmt: skip
                tally = slot.get(key)
                if tally is None:
                    tally = slot[key] = Tally()
                tally.add(event)  # type: ignore[arg-type]  # an EventLike
            cursor[world] = index
        by_minute: dict[int, dict[tuple[Any, ...], Tally]] = {}
        for key, tally in slot.items():
            by_minute.setdefault(key[6], {})[key[:6]] = tally
        new_rows = [
            row
            for minute, part in sorted(by_minute.items())
            for row in _rows_of(part, START + timedelta(minutes=minute))
        ]
        rows.extend(new_rows)
        rows.sort(key=lambda r: r.bucket)
        stage_floor = START + timedelta(minutes=int(stage_start // 60))
        for row in new_rows:
            if row.bucket < stage_floor:
                continue
            figures = cohorts[row.cohort]
            figures.total.add(row, scores=False)
            cell = (row.task_type, row.latency_budget, row.privacy_tier)
            figures_at(figures.cells, cell).add(row, scores=False)
        now = START + timedelta(seconds=now_s)
        if preset == "statistical":
            breaches, unsettled = _judge_statistical(cohorts, rows, stage, stage_floor, now)
            ratios = cohort_sample_ratios(
                stage=stage if stage < 100 else 100 - holdback,
                candidate_devices=len(seen["candidate"]),
                seen_devices=len(seen["candidate"]) + len(seen["stable"]),
                candidate_events=cohorts["candidate"].total.events,
                stable_events=cohorts["stable"].total.events,
                stage_age=timedelta(seconds=now_s - stage_start),
            )
        else:
            breaches, unsettled = _judge_fixed(DEFAULT_GUARDS, rows, stage_floor, now)
            ratios = {}
        decision = stage_decide(
            StageFacts(
                now=now,
                stage_started=START + timedelta(seconds=stage_start),
                quiet_since=quiet_since,
                bake_minutes=BAKE_MIN,
                auto_advance=True,
                active=True,
                extensions_used=0,
                breaches=breaches,
                unsettled=unsettled,
                candidate_devices=len(seen["candidate"]),
                candidate_events=cohorts["candidate"].total.events,
                sample_ratios=ratios,
            ),
            Exposure(),
        )
        quiet_since = decision.quiet_since
        if decision.verdict == "srm" and outcome.held_srm_at_s is None:
            outcome.held_srm_at_s = now_s
        if decision.action == "rollback":
            outcome.action, outcome.at_s, outcome.reason = "rolled_back", now_s, decision.reason
            return outcome
        if decision.action == "advance":
            if stage_index == len(STAGES) - 1:
                outcome.action, outcome.at_s = "completed", now_s
                return outcome
            stage_index += 1
            stage_start, quiet_since = now_s, None
            cohorts = {"candidate": CohortFigures(), "stable": CohortFigures()}
            seen = {"candidate": set(), "stable": set()}
            outcome.stages.append((STAGES[stage_index], now_s))
    return outcome


def _judge_statistical(
    cohorts: dict[str, CohortFigures],
    rows: list[RollupRow],
    stage: int,
    stage_floor: datetime,
    now: datetime,
) -> tuple[list[str], list[str]]:
    breaches: list[str] = []
    unsettled: list[str] = []
    stable_events = cohorts["stable"].total.events
    for guard in _sequential_guards():
        judgement = judge_sequential(
            guard,
            candidate=cohorts["candidate"],
            stable=cohorts["stable"],
            cells_planned=CELLS_PLANNED,
            label=guard.metric,
        )
        role = stage_role(judgement, stage=stage, stable_events=stable_events)
        if role == "breach":
            breaches.append(judgement.message)
        elif role == "unsettled":
            unsettled.append(judgement.message)
    more_breaches, more_unsettled = _judge_fixed(_fixed_critical(), rows, stage_floor, now)
    return breaches + more_breaches, unsettled + more_unsettled


def _judge_fixed(
    guards: Iterable[dict[str, Any]], rows: list[RollupRow], stage_floor: datetime, now: datetime
) -> tuple[list[str], list[str]]:
    start = max(now.replace(second=0) - timedelta(minutes=10 - 1), stage_floor)
    with_latency = any(g["metric"] in ("p95_budget", "p99_budget") for g in guards)
    figures: dict[str, ScopeFigures] = {
        cohort: figures_of(
            rows,
            start=start,
            end=now,
            where={"cohort": cohort},
            with_latency=with_latency,
        )
        for cohort in ("candidate", "stable")
    }
    breaches: list[str] = []
    unsettled: list[str] = []
    for guard in guards:
        judgement = judge_guard(
            metric=guard["metric"],
            comparison=guard["comparison"],
            threshold=guard["threshold"],
            min_samples=50,
            candidate=figures["candidate"],
            stable=figures["stable"],
            budgets=BUDGETS,
        )
        if judgement.outcome == "breach":
            breaches.append(judgement.message)
        elif judgement.outcome == "no_data":
            unsettled.append(judgement.message)
    return breaches, unsettled


# --- the runs ---------------------------------------------------------------------------------


_WORLDS: dict[tuple[str, int], list[Event]] = {}


def _world(name: str, seed: int, threshold: float) -> list[Event]:
    key = (name, seed)
    if key not in _WORLDS:
        _WORLDS[key] = simulate(name, seed, threshold)
    return _WORLDS[key]


def _job(args: tuple[str, int, int, float]) -> list[dict[str, Any]]:
    """All rollouts of one scenario over one seed's worlds (one process)."""
    scenario, seed, count, threshold = args
    # "late@10": the scenario, rolled out holding 10% back at 100%. The "…100" scenarios start
    # at 100% (a regression that shows only at the last stage, or an A/A judged there).
    kind, _, held = scenario.partition("@")
    holdback = int(held or 0)
    first_stage = len(STAGES) - 1 if kind in ("aa100", "late100") else 0
    kind = {"aa100": "aa", "late100": "fleet_wide"}.get(kind, kind)
    stable = _world("stable", seed, threshold)
    candidate = {
        "aa": stable,
        "subtle": stable,
        "srm": stable,
        "one_cell": None,
        "fleet_wide": None,
    }[kind] or _world(kind, seed, threshold)
    out = []
    for index in range(count):
        salt = f"{kind}-{seed}-{index}"  # the same splits below 100% with and without holdback
        for preset in ("statistical", "default"):
            result = run_rollout(
                stable=stable,
                candidate=candidate,
                kind=kind,
                salt=salt,
                preset=preset,
                holdback=holdback,
                first_stage=first_stage,
            )
            out.append(
                {
                    "kind": scenario,
                    "seed": seed,
                    "salt": salt,
                    "preset": preset,
                    "action": result.action,
                    "at_s": result.at_s,
                    "held_srm_at_s": result.held_srm_at_s,
                    "reason": result.reason[:300],
                    "stages": result.stages,
                }
            )
    return out


def cell_shares(events: Sequence[Event], cell: tuple[str, str, str]) -> tuple[float, int]:
    """The cloud share of a cell's events, and how many."""
    mine = [e for e in events if (e.task_type, e.latency_budget, e.privacy_tier) == cell]
    return (sum(e.route == "cloud" for e in mine) / len(mine) if mine else 0.0), len(mine)


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summarise(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Per scenario and preset: rollbacks, completions, SRM holds, time to act."""
    summary: dict[str, Any] = {}
    for kind in sorted({r["kind"] for r in results}):
        for preset in ("statistical", "default"):
            mine = [r for r in results if r["kind"] == kind and r["preset"] == preset]
            rolled = [r["at_s"] / 60 for r in mine if r["action"] == "rolled_back"]
            completed = [r["at_s"] / 60 for r in mine if r["action"] == "completed"]
            held = [r["held_srm_at_s"] / 60 for r in mine if r["held_srm_at_s"] is not None]
            within_bake = [t for t in rolled if t <= BAKE_MIN]
            summary[f"{kind}/{preset}"] = {
                "rollouts": len(mine),
                "rolled_back": len(rolled),
                "rolled_back_rate": len(rolled) / len(mine) if mine else None,
                "rolled_back_within_bake": len(within_bake),
                "rollback_min_median": statistics.median(rolled) if rolled else None,
                "rollback_min_p95": _quantile(rolled, 0.95),
                "completed": len(completed),
                "completed_min_median": statistics.median(completed) if completed else None,
                "held_srm": len(held),
                "held_srm_min_median": statistics.median(held) if held else None,
                "reached_25": sum(any(s == 25 for s, _ in r["stages"]) for r in mine),
                "reached_100": sum(any(s == 100 for s, _ in r["stages"]) for r in mine),
                "rolled_back_at_100": sum(
                    r["action"] == "rolled_back" and r["stages"][-1][0] == 100 for r in mine
                ),
            }
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--aa", type=int, default=200, help="A/A rollouts")
    parser.add_argument("--ab", type=int, default=32, help="rollouts of each bad candidate")
    parser.add_argument("--seeds", type=int, default=4, help="independent fleet runs")
    parser.add_argument("--threshold", type=float, default=0.3, help="θ of the one cell")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--holdback",
        type=int,
        default=10,
        help="percent held back at 100%% in the runs started at 100%% (0: none of those)",
    )
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench/guards/last_run.json")
    # A smaller world, for the suite's smoke run only: its figures say nothing.
    parser.add_argument("--devices", type=int, default=DEVICES, help=argparse.SUPPRESS)
    parser.add_argument("--minutes", type=int, default=MINUTES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    _world_size(args.devices, args.minutes)
    began = time.perf_counter()
    threshold = args.threshold  # 0.3: text/background/normal goes from ~30% to ~70% cloud
    jobs: list[tuple[str, int, int, float]] = []
    for seed in range(1, args.seeds + 1):
        jobs.append(("aa", seed, -(-args.aa // args.seeds), threshold))
        for kind in ("one_cell", "fleet_wide", "subtle", "srm"):
            jobs.append((kind, seed, -(-args.ab // args.seeds), threshold))
        # At the last stage: a fleet-wide regression and an A/A rollout started at 100%,
        # without and with a holdback (without one there is no stable cohort to judge against).
        if args.holdback:
            for scenario in ("late100", f"late100@{args.holdback}"):
                jobs.append((scenario, seed, -(-args.ab // args.seeds), threshold))
            jobs.append((f"aa100@{args.holdback}", seed, -(-args.aa // args.seeds), threshold))
    # One process per seed, so a seed's worlds are simulated once.
    by_seed: dict[int, list[tuple[str, int, int, float]]] = {}
    for job in jobs:
        by_seed.setdefault(job[1], []).append(job)
    results: list[dict[str, Any]] = []
    with ProcessPoolExecutor(
        max_workers=args.workers, initializer=_world_size, initargs=(DEVICES, MINUTES)
    ) as pool:
        for part in pool.map(_seed_jobs, by_seed.values()):
            results.extend(part)
    summary = summarise(results)
    stable = simulate("stable", 1, threshold)
    one_cell = simulate("one_cell", 1, threshold)
    fleet_wide = simulate("fleet_wide", 1, threshold)
    worlds = {
        "one_cell_cloud_share": {
            "stable": cell_shares(stable, ONE_CELL),
            "candidate": cell_shares(one_cell, ONE_CELL),
        },
        "fleet_cloud_share": {
            "stable": sum(e.route == "cloud" for e in stable) / len(stable),
            "one_cell": sum(e.route == "cloud" for e in one_cell) / len(one_cell),
            "fleet_wide": sum(e.route == "cloud" for e in fleet_wide) / len(fleet_wide),
        },
        "events_per_world": len(stable),
    }
    report = {
        "devices": DEVICES,
        "rate_tasks_per_s": RATE,
        "minutes": MINUTES,
        "bake_min": BAKE_MIN,
        "one_cell": "/".join(ONE_CELL),
        "one_cell_threshold": threshold,
        "worlds": worlds,
        "summary": summary,
        "elapsed_s": round(time.perf_counter() - began, 1),
        "python": sys.version.split()[0],
    }
    # One rollout a line, so a re-run's diff reads rollout by rollout.
    lines = [f'{{"report": {json.dumps(report, ensure_ascii=False)},', ' "results": [']
    lines += [f"  {json.dumps(r, ensure_ascii=False)}," for r in results]
    if results:
        lines[-1] = lines[-1].rstrip(",")
    args.out.write_text("\n".join([*lines, " ]}"]) + "\n")
    print(json.dumps(report, indent=1))


def _world_size(devices: int, minutes: int) -> None:
    """The simulated fleet's size and length (the defaults, except in the smoke run)."""
    global DEVICES, MINUTES
    DEVICES, MINUTES = devices, minutes


def _seed_jobs(jobs: list[tuple[str, int, int, float]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for job in jobs:
        out.extend(_job(job))
    return out
