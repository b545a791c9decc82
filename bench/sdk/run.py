"""Decisions per second of `edge_sdk.Router.route` against the seed's `TaskRouter.route`.

The seed (the design article's simulator) routes on three signals with a fixed θ 0.6 and
weights 0.4/0.3/0.3 over 400 tokens. `Router.route` does all of PROTOCOL.md's decision: the
cell lookup in the current policy, the fixed modes, privacy, offline, the score, θ adjusted
for network, load and the pushed cloud pressure, the latency check, draft_refine, and the
explanation fields of `Decision`. Both run in this process, on the same generated tasks, in
alternating rounds; the figure is the ratio of their costs per decision (best round of each).
Rounds are timed in CPU time of this thread (`time.thread_time`), so that other processes on
a shared machine, which take the CPU away between rounds, do not count against either side.
For reference the same tasks also go through `decide()` itself with a `DeviceState` built
per task (what a naive router would do).

Segment overrides (issue 26): the same tasks also go through a `Router` whose policy carries 8
overrides by segment (docs/segments.md), the device in two of them (so its cells are resolved
from the base cells and the first matching override), timed in the same alternating rounds;
its figure is the ratio to today's `Router.route` (target: at most 1.2x). The resolution runs
once per applied document (`PolicyStore.apply`), not per task; its cost is shown too.

    .venv/bin/python -m bench.sdk                  # ~15 s
    .venv/bin/python -m bench.sdk --write bench/sdk/RESULTS_sdk.md
"""

from __future__ import annotations

import argparse
import gc
import platform
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge_sdk import PolicyStore, Readings, Router, Task, decide

TARGET_RATIO = 3.0
OVERRIDES_TARGET_RATIO = 1.2
# What the benchmark device reports: an NPU phone on Android 14 with 8 GB.
DEVICE_ATTRIBUTES = {
    "platform": "android",
    "accelerator": "npu",
    "os_version": "14",
    "memory_gb": 8,
}

# --- the seed, as published (the article's TaskRouter.route, counters included) ----------


class SeedTaskRouter:
    """A line-for-line re-implementation of the seed's TaskRouter (routing part)."""

    def __init__(self, threshold: float = 0.6, end_latency: float = 0.03,
                 cloud_latency: float = 0.25) -> None:  # fmt: skip
        self.threshold = threshold
        self.end_latency = end_latency
        self.cloud_latency = cloud_latency
        self.end_count = 0
        self.cloud_count = 0

    def complexity(self, tokens: int, intent_conf: float, lm_conf: float) -> float:
        length_score = min(1.0, tokens / 400.0)
        intent_score = 1.0 - intent_conf
        lm_score = 1.0 - lm_conf
        return 0.4 * length_score + 0.3 * intent_score + 0.3 * lm_score

    def route(self, tokens: int, intent_conf: float, lm_conf: float) -> tuple[str, float]:
        score = self.complexity(tokens, intent_conf, lm_conf)
        if score < self.threshold:
            self.end_count += 1
            return "end", score
        self.cloud_count += 1
        return "cloud", score


# --- a 12-cell policy like the demo fleet's ------------------------------------------------

_DIMENSIONS = {
    "task_type": ["voice", "text", "image"],
    "latency_budget": ["interactive", "background"],
    "privacy_tier": ["sensitive", "normal"],
}
# Modes of the demo fleet: voiceprints and sensitive images stay on the device, images
# draft on the device and refine in the cloud, background images go to the big model.
_MODES = {
    ("voice", "interactive", "sensitive"): "device_only",
    ("voice", "background", "sensitive"): "device_only",
    ("image", "interactive", "sensitive"): "device_only",
    ("image", "interactive", "normal"): "draft_refine",
    ("image", "background", "normal"): "cloud_only",
}


def policy_document() -> dict[str, Any]:
    """Version 1 of a 12-cell fleet (the seed's θ, weights and norm in every auto cell)."""
    cells = []
    for task_type in _DIMENSIONS["task_type"]:
        for budget in _DIMENSIONS["latency_budget"]:
            for tier in _DIMENSIONS["privacy_tier"]:
                cells.append(
                    {
                        "task_type": task_type,
                        "latency_budget": budget,
                        "privacy_tier": tier,
                        "mode": _MODES.get((task_type, budget, tier), "auto"),
                        "threshold": 0.6,
                        "weights": {"length": 0.4, "intent": 0.3, "lm": 0.3},
                        "length_norm_tokens": 400,
                        "latency_budget_ms": 800 if budget == "interactive" else 10_000,
                        "cloud_timeout_ms": 1500,
                        "fallback": "other_side",
                        "upload": {"allowed": True, "deidentify": True, "max_bytes": 262_144},
                        "network": {
                            "rtt_high_ms": 200,
                            "bandwidth_low_kbps": 500,
                            "theta_raise": 0.15,
                        },
                        "load": {"busy": 0.8, "theta_lower": 0.1},
                        "cache_ttl_s": 3600,
                    }
                )
    return {"fleet": "bench-sdk", "version": 1, "etag": '"v1"', "dimensions": _DIMENSIONS,
            "cells": cells}  # fmt: skip


def overrides_document() -> dict[str, Any]:
    """`policy_document()` with 8 overrides by segment: six the device is not in, then two it
    is in (an NPU on 14+: θ 0.7 and other weights in every cell; 8 GB or more: the mode and
    θ of the text cells, which the NPU override, first, already takes)."""
    document = policy_document()
    keys = [{name: cell[name] for name in _DIMENSIONS} for cell in document["cells"]]
    others = [
        {
            "segment": f"region-{index}",
            "rule": {"attribute": "region", "equals": f"region-{index}"},
            "cells": [{**key, "threshold": 0.5} for key in keys],
        }
        for index in range(6)
    ]
    npu = {
        "segment": "npu-14",
        "rule": {
            "all_of": [
                {"attribute": "accelerator", "equals": "npu"},
                {"attribute": "os_version", "range": {"gte": "14"}},
            ]
        },
        "cells": [
            {**key, "threshold": 0.7, "weights": {"length": 0.5, "intent": 0.25, "lm": 0.25}}
            for key in keys
        ],
    }
    big = {
        "segment": "big-memory",
        "rule": {"attribute": "memory_gb", "range": {"gte": 8}},
        "cells": [{**key, "threshold": 0.65} for key in keys if key["task_type"] == "text"],
    }
    return {**document, "etag": '"v1-overrides"', "overrides": [*others, npu, big]}


# --- inputs ----------------------------------------------------------------------------------


def make_inputs(count: int, seed: int, *, cells: str) -> tuple[list[Task], list[Readings]]:
    """Tasks with the simulator's kind of signals and live readings (1 in 10 offline-ish)."""
    rng = random.Random(seed)
    keys = [
        (t, b, p)
        for t in _DIMENSIONS["task_type"]
        for b in _DIMENSIONS["latency_budget"]
        for p in _DIMENSIONS["privacy_tier"]
    ]
    tasks: list[Task] = []
    readings: list[Readings] = []
    for _ in range(count):
        task_type, budget, tier = (
            ("text", "interactive", "normal") if cells == "auto" else rng.choice(keys)
        )
        short = rng.random() < 0.6
        tasks.append(
            Task(
                task_type=task_type,
                latency_budget=budget,
                privacy_tier=tier,
                tokens=rng.randint(5, 80) if short else rng.randint(150, 900),
                intent_conf=rng.uniform(0.85, 0.99) if short else rng.uniform(0.3, 0.8),
                lm_conf=rng.uniform(0.8, 0.97) if short else rng.uniform(0.25, 0.75),
                upload_bytes=rng.choice((0, 0, 2048, 65536)),
            )
        )
        readings.append(
            Readings(
                rtt_ms=rng.uniform(20, 300),
                bandwidth_kbps=rng.uniform(200, 50_000),
                device_load=rng.random(),
                online=rng.random() >= 0.1,
                cloud_infer_ms=rng.uniform(60, 400),
            )
        )
    return tasks, readings


# --- timing ----------------------------------------------------------------------------------


def _time_seed(router: SeedTaskRouter, tasks: Sequence[Task]) -> float:
    route = router.route
    signals = [(t.tokens, t.intent_conf, t.lm_conf) for t in tasks]
    started = time.thread_time()
    for tokens, intent_conf, lm_conf in signals:
        route(tokens, intent_conf, lm_conf)
    return time.thread_time() - started


def _time_decide(router: Router, tasks: Sequence[Task], readings: Sequence[Readings]) -> float:
    cell_of = router.cell
    pressure = router.cloud_pressure
    pairs = list(zip(tasks, readings, strict=True))
    started = time.thread_time()
    for task, reading in pairs:
        cell = cell_of(task)
        if cell is not None:
            decide(cell, task, reading.device_state(pressure))
    return time.thread_time() - started


def _time_sdk(router: Router, tasks: Sequence[Task], readings: Sequence[Readings]) -> float:
    route = router.route
    pairs = list(zip(tasks, readings, strict=True))
    started = time.thread_time()
    for task, reading in pairs:
        route(task, reading)
    return time.thread_time() - started


@dataclass(frozen=True)
class Measurement:
    """Best-round costs per decision, in nanoseconds."""

    workload: str
    tasks: int
    seed_ns: float
    sdk_ns: float
    decide_ns: float
    overrides_ns: float  # Router.route with the overrides document, resolved for the device
    resolve_us: float  # one PolicyStore.apply of the overrides document (parse + resolve)

    @property
    def ratio(self) -> float:
        return self.sdk_ns / self.seed_ns

    @property
    def overrides_ratio(self) -> float:
        return self.overrides_ns / self.sdk_ns


def measure(workload: str, count: int, rounds: int, pressure: float) -> Measurement:
    """Alternate seed and SDK rounds over the same tasks; keep each one's best round."""
    tasks, readings = make_inputs(count, seed=42, cells=workload)
    store = PolicyStore()
    store.apply(policy_document())
    router = Router(store)
    segmented = PolicyStore(attributes=DEVICE_ATTRIBUTES)
    document = overrides_document()
    best_resolve = float("inf")
    for index in range(5):  # a fresh ETag each time: the shared-table cache must not answer
        started = time.thread_time()
        segmented.apply({**document, "etag": f'"v1-overrides-{index}"'}, save=False)
        best_resolve = min(best_resolve, time.thread_time() - started)
    assert segmented.cells != store.cells, "the device must be in the overrides' segments"
    overridden = Router(segmented)
    if pressure:
        router.set_cloud_pressure(pressure, 3600)
        overridden.set_cloud_pressure(pressure, 3600)
    seed_router = SeedTaskRouter(threshold=0.6)
    best_seed = best_sdk = best_decide = best_overrides = float("inf")
    gc.disable()
    try:
        for _ in range(rounds):
            best_seed = min(best_seed, _time_seed(seed_router, tasks))
            best_sdk = min(best_sdk, _time_sdk(router, tasks, readings))
            best_overrides = min(best_overrides, _time_sdk(overridden, tasks, readings))
            best_decide = min(best_decide, _time_decide(router, tasks, readings))
    finally:
        gc.enable()
    return Measurement(
        workload,
        count,
        best_seed / count * 1e9,
        best_sdk / count * 1e9,
        best_decide / count * 1e9,
        best_overrides / count * 1e9,
        best_resolve * 1e6,
    )


def _report(results: list[Measurement], command: str) -> str:
    lines = [
        "# bench/sdk: Router.route against the seed's TaskRouter.route",
        "",
        f"Command: `{command}`  ",
        f"Machine: {platform.machine()}, {platform.python_implementation()} "
        f"{platform.python_version()}, {platform.system()} (2 cores shared); "
        "best round of each (CPU time of the thread), same tasks, same process, rounds "
        "alternating.",
        "",
        "| workload | tasks | seed ns/decision | Router.route ns | Router.route decisions/s "
        "| ratio | decide() ns (reference) | decide() ratio |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for m in results:
        lines.append(
            f"| {m.workload} | {m.tasks:,} | {m.seed_ns:.0f} | {m.sdk_ns:.0f} | "
            f"{1e9 / m.sdk_ns:,.0f} | {m.ratio:.2f}x | {m.decide_ns:.0f} | "
            f"{m.decide_ns / m.seed_ns:.2f}x |"
        )
    worst = max(m.ratio for m in results)
    verdict = "meets" if worst <= TARGET_RATIO else "misses"
    lines += [
        "",
        f"Target: at most {TARGET_RATIO:.0f}x the seed's cost per decision; worst ratio "
        f"{worst:.2f}x: {verdict} the target.",
        "",
        "Segment overrides (8 overrides, the device in 2): Router.route with the resolved "
        "table against today's Router.route, same rounds.",
        "",
        "| workload | Router.route ns | with overrides ns | ratio | apply + resolve µs (once "
        "per version) |",
        "|---|---:|---:|---:|---:|",
    ]
    for m in results:
        lines.append(
            f"| {m.workload} | {m.sdk_ns:.0f} | {m.overrides_ns:.0f} | "
            f"{m.overrides_ratio:.2f}x | {m.resolve_us:.0f} |"
        )
    worst_overrides = max(m.overrides_ratio for m in results)
    verdict = "meets" if worst_overrides <= OVERRIDES_TARGET_RATIO else "misses"
    lines += [
        "",
        f"Target: at most {OVERRIDES_TARGET_RATIO}x today's Router.route; worst ratio "
        f"{worst_overrides:.2f}x: {verdict} the target.",
    ]
    return "\n".join(lines) + "\n"


WORKLOADS: dict[str, Callable[[], tuple[str, float]]] = {
    # the seed's own case: one auto cell (θ 0.6, 0.4/0.3/0.3, 400 tokens), no pressure
    "auto": lambda: ("auto", 0.0),
    # the fleet: 12 cells of every mode, live readings, a pushed cloud pressure of +0.1
    "fleet": lambda: ("fleet", 0.1),
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sdk", description=__doc__)
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--write", type=Path, default=None, help="write the table here")
    args = parser.parse_args(argv)
    results = []
    for name, spec in WORKLOADS.items():
        workload, pressure = spec()
        result = measure(workload, args.tasks, args.rounds, pressure)
        results.append(result)
        print(
            f"{name:6s} seed {result.seed_ns:7.0f} ns  sdk {result.sdk_ns:7.0f} ns  "
            f"sdk {1e9 / result.sdk_ns:>10,.0f}/s  ratio {result.ratio:.2f}x  "
            f"(decide() {result.decide_ns / result.seed_ns:.2f}x)  "
            f"overrides {result.overrides_ns:7.0f} ns  "
            f"{result.overrides_ratio:.2f}x of Router.route",
            flush=True,
        )
    report = _report(results, f"python -m bench.sdk --tasks {args.tasks} --rounds {args.rounds}")
    print(report)
    if args.write is not None:
        args.write.write_text(report)
    met = max(m.ratio for m in results) <= TARGET_RATIO
    met_overrides = max(m.overrides_ratio for m in results) <= OVERRIDES_TARGET_RATIO
    return 0 if met and met_overrides else 1
