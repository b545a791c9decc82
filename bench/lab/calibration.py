"""bench/lab `--what calibration`: θ of all 12 cells calibrated over the day of stored events,
against one backtest of the same rows and the read alone, in the same run.

    .venv/bin/python -m bench.lab --what calibration          # 1,000,000 events

The demo table keeps 4 of its 12 cells fixed (device_only, cloud_only, sensitive without
upload), where θ plays no part; the bench first makes the draft's 4 fixed cells `auto` with
de-identified upload allowed, so that all 12 are swept (the events, decided under v1, carry
every signal the sweep needs). Then, each best of `--repeat`:

- one backtest (`backtest_compute`: the draft against the stable v1, with the self-check),
  the baseline the target names: calibration of 12 cells <= 2x one backtest;
- `calibration_compute` of every cell for α 70%, the function the API and the page call;
- memory: tracemalloc's peak and the growth of the process's VmHWM during a calibration over
  an eighth of the window and over the whole window (bounded: they do not grow with events).
"""

from __future__ import annotations

import argparse
import time
import tracemalloc
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Final

ALL_AUTO: Final = {
    ("voice", "interactive", "sensitive"): {"mode": "auto", "upload.allowed": True},
    ("voice", "background", "sensitive"): {"mode": "auto", "upload.allowed": True},
    ("image", "interactive", "sensitive"): {"mode": "auto", "upload.allowed": True},
    ("image", "background", "normal"): {"mode": "auto"},
}


def _status_kib(field: str) -> int:
    """A field of /proc/self/status in KiB (VmRSS, VmHWM)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return 0


def _every_cell_auto(fleet: Any) -> None:
    """Make the draft's fixed cells auto, so θ matters in all 12 (one draft edit)."""
    from routing_policies.selectors import draft_get
    from routing_policies.services import policy_draft_update_cells

    draft = draft_get(fleet=fleet)
    edits = [
        {"task_type": key[0], "latency_budget": key[1], "privacy_tier": key[2], "values": values}
        for key, values in ALL_AUTO.items()
    ]
    policy_draft_update_cells(actor=None, fleet=fleet, revision=draft.revision, edits=edits)


def _one_backtest(fleet: Any, start: datetime, end: datetime) -> float:
    """Seconds of one backtest of the draft against v1 over [start, end)."""
    from routing_policies.policies.sdk_cells import table_cells
    from routing_policies.pricing import CloudPrice
    from routing_policies.selectors import draft_get, version_get, version_table
    from telemetry.lab.backtests.engine import BacktestInput, backtest_compute

    v1 = table_cells(version_table(version=version_get(fleet=fleet, ref=1)))
    spec = BacktestInput(
        fleet_id=fleet.pk,
        start=start,
        end=end,
        subject=table_cells(version_table(version=draft_get(fleet=fleet))),
        stable=v1,
        versions={1: v1},
        price=CloudPrice.of_fleet(fleet),
    )
    began = time.perf_counter()
    backtest_compute(spec)
    return time.perf_counter() - began


def bench_calibration(args: argparse.Namespace, context: Any) -> dict[str, Any]:
    """Calibrate all 12 cells; the ratios to one backtest and to the read; memory."""
    from django.db import connection

    from telemetry.lab.calibration.selectors import calibration_compute
    from telemetry.lab.calibration.targets import Target

    fleet = context.fleet
    _every_cell_auto(fleet)
    target = Target(kind="alpha", value=0.7)
    hours = round((context.end - context.start) / timedelta(hours=1))

    def calibrate(start: datetime) -> Any:
        return calibration_compute(
            fleet=fleet,
            target=target,
            hours=round((context.end - start) / timedelta(hours=1)),
            end=context.end,
        )

    backtest_s = min(_one_backtest(fleet, context.start, context.end) for _ in range(args.repeat))
    times = []
    result: Any = None
    for _ in range(args.repeat):
        began = time.perf_counter()
        result = calibrate(context.start)
        times.append(time.perf_counter() - began)
    best = min(times)
    swept = [cell for cell in result.cells if cell.result is not None]
    reached = sum(cell.result.reached for cell in swept)
    worst = max(abs(cell.result.chosen.alpha - 0.7) for cell in swept)
    checked = sum(cell.result.verified_events for cell in swept)
    matching = sum(cell.result.verified_matching for cell in swept)
    print(
        f"calibration: {len(swept)} cells over {result.events:,} events in {best:.2f} s (best "
        f"of {args.repeat}) = {best / backtest_s:.2f}x one backtest ({backtest_s:.2f} s; "
        f"target <= 2x), {best / context.read_s:.2f}x the read ({context.read_s:.2f} s)",
        flush=True,
    )
    print(
        f"    α 70%: reached in {reached}/{len(swept)} cells, worst |α - 70%| = {worst:.4f}; "
        f"sampled check: decide agrees on {matching:,}/{checked:,}",
        flush=True,
    )
    memory = {}
    window = context.end - context.start
    for name, start in (("eighth", context.end - window / 8), ("whole", context.start)):
        connection.close()
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM back to the current RSS
        rss_before = _status_kib("VmRSS")
        run = calibrate(start)
        hwm_growth = _status_kib("VmHWM") - rss_before
        tracemalloc.start()
        calibrate(start)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        memory[name] = {
            "events": run.events,
            "tracemalloc_peak_mib": round(peak / 2**20, 2),
            "rss_peak_growth_mib": round(hwm_growth / 1024, 1),
        }
        print(f"    memory over {name} of the window: {memory[name]}", flush=True)
    return {
        "events": result.events,
        "hours": hours,
        "cells_swept": len(swept),
        "seconds": [round(t, 3) for t in times],
        "best_s": round(best, 3),
        "backtest_s": round(backtest_s, 3),
        "ratio_to_backtest": round(best / backtest_s, 3),
        "target_ratio_to_backtest": 2.0,
        "ratio_to_read": round(best / context.read_s, 3),
        "alpha_target": 0.7,
        "cells_reached": reached,
        "worst_alpha_error": round(worst, 5),
        "sampled_check": {"events": checked, "matching": matching},
        "memory": memory,
    }
