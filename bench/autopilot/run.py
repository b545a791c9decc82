"""bench/autopilot: the θ autopilot on simulated worlds in virtual time, against a static θ.

    .venv/bin/python -m bench.autopilot                      # 60 cycles a scenario, 5 scenarios
    .venv/bin/python -m bench.autopilot --cycles 6 --tasks 800 --out /tmp/a.json   # smoke

What it runs. One cell (`text/interactive/normal` of the demo table, mode `draft_refine`,
shadow refines at `--shadow-rate`) on a fleet of `--devices` simulated devices: each a link
(the simulator's `Link`, its profile drawn from LINK_PROFILES, under the scenario's
`NetworkConditions` of the day) and a load (`Load`, bursts included), read at the task's
virtual second; tasks drawn by the simulator's `Workload` (its kinds, lengths and
confidences); each task routed by `edge_sdk.decision.decide`, the function the SDK's `Router`
runs on devices; its draft kept by the simulator's `QualityModel` (the keep curve of its task
type, lowered by the scenario's `drop` of the day). A cycle is a virtual day of `--tasks` tasks:

1. **calibrate** the day's events with the lab's own sweep (`lab.calibration.sweep.CellSweep`,
   `LatencyModel`, `kept_groups` of the day's draft reports: the code `calibration_compute`
   runs on stored events), giving the curve θ → α, cloud share, P95, cost, device quality with
   its interval;
2. **propose** with `autopilot.core.propose` (the service's function) under the objective;
3. the world **applies** it for the next virtual day (the next day's tasks routed at the new θ);
4. **realize**: the next day's α, cloud share, P95, device-route kept rate (its shadow refines)
   and the true device quality (the simulator's keep chance averaged over the device answers),
   checked with `autopilot.core.misses` as the service does. A miss counts as a stop; the bench
   resumes at once (a person would) so every scenario runs its cycles.

The static arm routes the same worlds (same seeds, same tasks, same devices) at the starting θ.
What only the integration test covers: storing events, rollups, reviews and change requests,
publish, the guarded rollout with its holdback, the Celery worker and beat, the webhook.

Figures per scenario: α of the autopilot and of the static θ (mean over the cycles), the true
device quality of each, the share of cycles whose true device quality fell below the floor
(to hold within δ), the share of cycles that proposed a change, the prediction error of α and
of quality per cycle (mean absolute, and the share within the tolerance), stops and why.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

import django

django.setup()

from autopilot.core import (  # noqa: E402
    Limits,
    Realized,
    Tolerance,
    curve_of,
    misses,
    propose,
)
from edge_sdk.decision import Cell, DeviceState, TaskSignals, decide  # noqa: E402
from edge_sdk.simulate.models import (  # noqa: E402
    LINK_PROFILES,
    Link,
    Load,
    NetworkConditions,
    pick_weighted,
)
from edge_sdk.simulate.quality import QualityModel  # noqa: E402
from edge_sdk.simulate.workload import Workload  # noqa: E402
from lab.calibration.quality import kept_groups  # noqa: E402
from lab.calibration.sweep import CellSweep  # noqa: E402
from lab.calibration.targets import Target  # noqa: E402
from lab.estimate import LatencyModel, network_ms  # noqa: E402
from routing_policies.demo import demo_table  # noqa: E402
from routing_policies.pricing import CloudPrice  # noqa: E402
from routing_policies.selectors import table_cells  # noqa: E402
from telemetry.rollups.sketch import score_bin  # noqa: E402

KEY = ("text", "interactive", "normal")


def demo_cell(key: tuple[str, str, str], **overrides: Any) -> Cell:
    """The demo table's cell `key`, with flat overrides, as the decision function reads it."""
    return table_cells({key: {**demo_table()[key], **overrides}})[key]


PRICE = CloudPrice(per_1k_tokens=0.002, per_call=0.0)


@dataclass(frozen=True, slots=True, kw_only=True)
class World:
    """A scenario: the world's levers on day d of n (0 ≤ d/n ≤ 1)."""

    name: str
    network: Callable[[float], NetworkConditions]
    drop: Callable[[float], float]  # the device model's keep chance lowered by this
    long_share: Callable[[float], float]  # share of tasks drawn from the image mix


def _flat(value: float) -> Callable[[float], float]:
    return lambda _: value


WORLDS = {
    "aa": World(
        name="aa", network=lambda _: NetworkConditions(), drop=_flat(0.0), long_share=_flat(0.0)
    ),
    "network-degrades": World(
        name="network-degrades",
        network=lambda f: NetworkConditions(rtt_factor=1 + 3 * f, bandwidth_factor=1 - 0.8 * f),
        drop=_flat(0.0),
        long_share=_flat(0.0),
    ),
    "model-improves": World(
        name="model-improves",
        network=lambda _: NetworkConditions(),
        drop=lambda f: 0.02 - 0.17 * f,
        long_share=_flat(0.0),
    ),
    "model-degrades": World(
        name="model-degrades",
        network=lambda _: NetworkConditions(),
        drop=lambda f: 0.15 * f,
        long_share=_flat(0.0),
    ),
    "task-mix-shift": World(
        name="task-mix-shift",
        network=lambda _: NetworkConditions(),
        drop=_flat(0.0),
        long_share=lambda f: 0.6 * f,
    ),
}


@dataclass(slots=True)
class Event:
    """One routed task: what the lab's sweep reads (task and device) and what happened."""

    task: TaskSignals
    device: DeviceState
    route: str
    score: float | None
    latency_ms: float
    reported: bool
    kept: bool
    true_kept: float


class Fleet:
    """The simulated devices: links and loads, read at a task's virtual second."""

    def __init__(self, devices: int, seed: int) -> None:
        rng = random.Random(seed)
        profiles = tuple((p, p.weight) for p in LINK_PROFILES)
        self.links = [
            Link(pick_weighted(rng, profiles), random.Random(rng.random())) for _ in range(devices)
        ]
        self.loads = [Load(random.Random(rng.random())) for _ in range(devices)]


def day_events(
    *,
    cell: Cell,
    world: World,
    fleet: Fleet,
    day: int,
    days: int,
    tasks: int,
    seed: int,
    shadow_rate: float,
) -> list[Event]:
    """One virtual day of the cell's tasks, routed at `cell`'s θ by the SDK's decision."""
    fraction = day / max(1, days - 1)
    rng = random.Random(seed * 1_000_003 + day)
    conditions = world.network(fraction)
    quality = QualityModel(drop=world.drop(fraction))
    text = Workload(
        {"task_type": ["text"], "latency_budget": ["interactive"], "privacy_tier": ["normal"]}
    )
    image = Workload(
        {"task_type": ["image"], "latency_budget": ["interactive"], "privacy_tier": ["normal"]}
    )
    long_share = world.long_share(fraction)
    out = []
    for index in range(tasks):
        now = day * 86_400 + index * 86_400 / tasks
        device_index = rng.randrange(len(fleet.links))
        reading = fleet.links[device_index].reading(now, conditions)
        load = fleet.loads[device_index].reading(now)
        draw = (image if rng.random() < long_share else text).draw(rng)
        task = TaskSignals(
            tokens=draw.tokens,
            intent_conf=min(1.0, draw.intent_conf),
            lm_conf=min(1.0, draw.lm_conf),
            upload_bytes=min(draw.upload_bytes, 50_000),
        )
        infer = rng.lognormvariate(math.log(300), 0.3)
        device = DeviceState(
            rtt_ms=reading.rtt_ms,
            bandwidth_kbps=reading.bandwidth_kbps,
            device_load=load,
            online=reading.online,
            cloud_infer_ms=infer,
            cloud_pressure=0.0,
        )
        decision = decide(cell, task, device)
        score = decision.score
        keep = quality.kept_rate(KEY, score) if score is not None else 1.0
        device_ms = rng.lognormvariate(math.log(40 + 0.6 * task.tokens), 0.25)
        net = network_ms(
            upload_bytes=task.upload_bytes,
            bandwidth_kbps=device.bandwidth_kbps,
            rtt_ms=device.rtt_ms,
        )
        route = decision.route
        reported = kept = False
        if route == "device":
            latency = device_ms
            if score is not None and rng.random() < shadow_rate:
                reported, kept = True, rng.random() < keep
        elif route == "draft_refine":
            latency = device_ms + net + infer
            if score is not None:
                reported, kept = True, rng.random() < keep
        else:
            latency = net + infer
        out.append(
            Event(
                task=task,
                device=device,
                route=route,
                score=score,
                latency_ms=latency,
                reported=reported,
                kept=kept,
                true_kept=keep,
            )
        )
    return out


class _Recorded:
    """What the lab's latency model reads of an observed event."""

    __slots__ = (
        "bandwidth_kbps",
        "cache_hit",
        "fallback",
        "latency_ms",
        "ok",
        "route",
        "rtt_ms",
        "upload_bytes",
    )

    def __init__(self, event: Event) -> None:
        self.route = event.route
        self.latency_ms = event.latency_ms
        self.upload_bytes = event.task.upload_bytes
        self.bandwidth_kbps = event.device.bandwidth_kbps
        self.rtt_ms = event.device.rtt_ms
        self.ok, self.cache_hit, self.fallback = True, False, "none"


def calibrate(cell: Cell, events: list[Event], *, shadow_rate: float, floor: float) -> Any:
    """The lab's sweep over the day (the code calibration_compute runs on stored events)."""
    model = LatencyModel()
    observed = model.of_cell(KEY)
    for event in events:
        net = (
            0.0
            if event.route == "device"
            else network_ms(
                upload_bytes=event.task.upload_bytes,
                bandwidth_kbps=event.device.bandwidth_kbps,
                rtt_ms=event.device.rtt_ms,
            )
        )
        observed.add(event.route, event.latency_ms, net)
    sweep = CellSweep(cell=cell, shadow_rate=shadow_rate)
    refine: dict[str, int] = {}
    kept: dict[str, int] = {}
    for event in events:
        sweep.add(event.task, event.device, cache_hit=False)
        if event.reported and event.score is not None:
            key = str(score_bin(event.score))
            refine[key] = refine.get(key, 0) + 1
            if event.kept:
                kept[key] = kept.get(key, 0) + 1
    groups = kept_groups(refine, kept, reports=sum(refine.values()))
    return sweep.result(
        target=Target(kind="quality", value=floor),
        model=model,
        hours=24.0,
        price=PRICE,
        kept=groups,
    )


def realized(events: list[Event]) -> tuple[Realized, float]:
    """The day as the service reads it (α, cloud share, P95, shadow-refine kept rate, cost per
    day) and the true device quality (the keep chance averaged over the device answers)."""
    n = len(events)
    device = [e for e in events if e.route == "device"]
    cloud = [e for e in events if e.route in ("cloud", "draft_refine")]
    shadow = [e for e in device if e.reported]
    latencies = sorted(e.latency_ms for e in events)
    p95 = latencies[min(n - 1, math.ceil(0.95 * n) - 1)]
    scored = [e.true_kept for e in device if e.score is not None]
    return (
        Realized(
            events=n,
            alpha=len(device) / n,
            cloud_share=len(cloud) / n,
            p95_ms=p95,
            quality=(sum(e.kept for e in shadow) / len(shadow)) if shadow else None,
            quality_reports=len(shadow),
            quality_kept=sum(e.kept for e in shadow),
            cost_per_day=PRICE.cost(tokens=sum(e.task.tokens for e in cloud), calls=len(cloud)),
        ),
        statistics.fmean(scored) if scored else 1.0,
    )


def run_world(world: World, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """Both arms over `args.cycles` counted cycles (A/A: after a warm-up until it settles)."""
    base = demo_cell(
        KEY, mode="draft_refine", threshold=args.start_theta, latency_budget_ms=args.budget_ms
    )
    fleet_auto, fleet_static = Fleet(args.devices, seed), Fleet(args.devices, seed)
    limits = Limits(
        quality_floor=args.floor,
        delta=args.delta,
        max_step=args.max_step,
        margin=args.margin,
        hysteresis=args.hysteresis,
        budget_ms=base.latency_budget_ms,
    )
    tolerance = Tolerance(share=args.tolerance)
    warmup = args.warmup if world.name == "aa" else 0
    days = warmup + args.cycles + 1
    theta = args.start_theta
    events = day_events(
        cell=base,
        world=world,
        fleet=fleet_auto,
        day=0,
        days=days,
        tasks=args.tasks,
        seed=seed,
        shadow_rate=args.shadow_rate,
    )
    rows = []
    for day in range(days - 1):
        cell = replace(base, threshold=theta)
        result = calibrate(cell, events, shadow_rate=args.shadow_rate, floor=args.floor)
        proposal = propose(
            curve=curve_of(result, cost_per_day=True),
            current_threshold=theta,
            events=result.events,
            limits=limits,
        )
        theta_next = proposal.threshold_to if proposal.threshold_to is not None else theta
        # The world applies it for a virtual day; the static arm on the same world and tasks.
        events = day_events(
            cell=replace(base, threshold=theta_next),
            world=world,
            fleet=fleet_auto,
            day=day + 1,
            days=days,
            tasks=args.tasks,
            seed=seed,
            shadow_rate=args.shadow_rate,
        )
        static_events = day_events(
            cell=base,
            world=world,
            fleet=fleet_static,
            day=day + 1,
            days=days,
            tasks=args.tasks,
            seed=seed,
            shadow_rate=args.shadow_rate,
        )
        got, true_quality = realized(events)
        static, static_quality = realized(static_events)
        predicted = proposal.predicted if proposal.changes else proposal.current
        assert predicted is not None
        missed = misses(
            predicted=predicted,
            predicted_quality_low=proposal.quality_low if proposal.changes else None,
            realized=got,
            budget_ms=base.latency_budget_ms,
            tolerance=tolerance,
        )
        if day >= warmup:
            rows.append(
                {
                    "day": day + 1,
                    "theta": theta,
                    "theta_next": theta_next,
                    "changed": proposal.changes,
                    "reason": proposal.reason,
                    "predicted_alpha": predicted.alpha,
                    "alpha": got.alpha,
                    "predicted_quality": predicted.quality,
                    "quality_true": true_quality,
                    "quality_measured": got.quality,
                    "static_alpha": static.alpha,
                    "static_quality_true": static_quality,
                    "misses": missed,
                    "p95_ms": got.p95_ms,
                    "cost_per_day": got.cost_per_day,
                    "static_cost_per_day": static.cost_per_day,
                }
            )
        theta = theta_next
    return summarize(world.name, rows, args)


def summarize(name: str, rows: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """The scenario's figures."""
    n = len(rows)
    alpha_errors = [abs(r["alpha"] - r["predicted_alpha"]) for r in rows]
    quality_errors = [
        abs(r["quality_true"] - r["predicted_quality"])
        for r in rows
        if r["predicted_quality"] is not None
    ]
    stops: dict[str, int] = {}
    for row in rows:
        for miss in row["misses"]:
            kind = miss.split(" ")[0]
            stops[kind] = stops.get(kind, 0) + 1
    return {
        "scenario": name,
        "cycles": n,
        "alpha_autopilot": statistics.fmean(r["alpha"] for r in rows),
        "alpha_static": statistics.fmean(r["static_alpha"] for r in rows),
        "quality_autopilot": statistics.fmean(r["quality_true"] for r in rows),
        "quality_static": statistics.fmean(r["static_quality_true"] for r in rows),
        "broke_floor_autopilot": sum(r["quality_true"] < args.floor for r in rows) / n,
        "broke_floor_static": sum(r["static_quality_true"] < args.floor for r in rows) / n,
        "proposed_share": sum(r["changed"] for r in rows) / n,
        "alpha_error_mean": statistics.fmean(alpha_errors),
        "alpha_within_tolerance": sum(e <= args.tolerance for e in alpha_errors) / n,
        "quality_error_mean": statistics.fmean(quality_errors) if quality_errors else None,
        "cycles_stopped": sum(bool(r["misses"]) for r in rows),
        "stops_by_kind": stops,
        "cost_per_day_autopilot": statistics.fmean(r["cost_per_day"] for r in rows),
        "cost_per_day_static": statistics.fmean(r["static_cost_per_day"] for r in rows),
        "theta_first": rows[0]["theta"],
        "theta_last": rows[-1]["theta_next"],
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=60)
    parser.add_argument("--tasks", type=int, default=8000, help="tasks of the cell a day")
    parser.add_argument("--devices", type=int, default=200)
    parser.add_argument("--shadow-rate", type=float, default=0.2)
    parser.add_argument("--floor", type=float, default=0.65)
    parser.add_argument("--delta", type=float, default=0.05)
    parser.add_argument("--max-step", type=float, default=0.05)
    parser.add_argument("--margin", type=float, default=0.02)
    parser.add_argument("--hysteresis", type=float, default=0.03)
    parser.add_argument("--budget-ms", type=int, default=2500)
    parser.add_argument("--tolerance", type=float, default=0.05)
    parser.add_argument("--start-theta", type=float, default=0.45)
    parser.add_argument("--warmup", type=int, default=15, help="A/A: uncounted cycles first")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--scenario", action="append", choices=sorted(WORLDS))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    results = []
    for name in args.scenario or list(WORLDS):
        started = time.perf_counter()
        summary = run_world(WORLDS[name], args, args.seed)
        summary["seconds"] = round(time.perf_counter() - started, 1)
        results.append(summary)
        print(
            f"{name}: {summary['cycles']} cycles; α autopilot {summary['alpha_autopilot']:.3f} vs "
            f"static {summary['alpha_static']:.3f}; true quality {summary['quality_autopilot']:.3f}"
            f" vs {summary['quality_static']:.3f}; broke the floor "
            f"{summary['broke_floor_autopilot']:.1%} (static {summary['broke_floor_static']:.1%}, "
            f"δ {args.delta:.0%}); proposed in {summary['proposed_share']:.1%}; α error "
            f"{summary['alpha_error_mean']:.4f} mean, {summary['alpha_within_tolerance']:.0%} "
            f"within ±{args.tolerance}; quality error {summary['quality_error_mean'] or 0:.4f}; "
            f"stopped {summary['cycles_stopped']} {summary['stops_by_kind']}; θ "
            f"{summary['theta_first']:.3f}→{summary['theta_last']:.3f}; {summary['seconds']} s",
            flush=True,
        )
    if args.out:
        args.out.write_text(
            json.dumps(
                {"args": vars(args) | {"out": str(args.out)}, "results": results},
                indent=1,
                default=str,
            )
        )
    print("autopilot bench: done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
