"""bench/lab `--what calibration`: θ of all 12 cells calibrated over the day of stored events,
against one backtest of the same rows and the read alone, in the same run.

    .venv/bin/python -m bench.lab --what calibration          # 1,000,000 events

The demo table keeps 4 of its 12 cells fixed (device_only, cloud_only, sensitive without
upload), where θ plays no part; the bench makes the draft's 4 fixed cells `auto` with
de-identified upload allowed, so that all 12 are swept (the events, decided under v1, carry
every signal the sweep needs). The baseline backtest is `--what backtest`'s (the draft as the
bench made it, 4 θs changed, against v1), its cells taken before that edit. Each repetition
reads the rows alone, runs the backtest and runs the calibration, one after the other, so all
three see the same machine; best of `--repeat` each, wall clock and CPU (process + database
backend, as `run.Meter` measures):

- `calibration_compute` of every cell for α 70%, the function the API and the page call;
  target: calibration of 12 cells <= 2x one backtest;
- memory: the growth of the process's VmHWM (and tracemalloc's peak, unless
  `--no-tracemalloc`) during a calibration over an eighth of the window and over the whole
  window: bounded, they do not grow with the events.
"""

from __future__ import annotations

import argparse
import tracemalloc
from datetime import datetime, timedelta
from typing import Any, Final

from .run import WHAT, Context, Cost, Meter, backtest_spec, reset_peak_rss, rss_kib

ALL_AUTO: Final = {
    ("voice", "interactive", "sensitive"): {"mode": "auto", "upload.allowed": True},
    ("voice", "background", "sensitive"): {"mode": "auto", "upload.allowed": True},
    ("image", "interactive", "sensitive"): {"mode": "auto", "upload.allowed": True},
    ("image", "background", "normal"): {"mode": "auto"},
}


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


def bench_calibration(args: argparse.Namespace, context: Context) -> dict[str, Any]:
    """Calibrate all 12 cells; the ratios to one backtest and to the read; memory."""
    from django.db import connection

    from lab.backtests.engine import backtest_compute
    from lab.calibration.selectors import calibration_compute
    from lab.calibration.targets import Target

    fleet = context.fleet
    spec = backtest_spec(context, context.start)  # the draft's cells before the edit below
    _every_cell_auto(fleet)
    target = Target(kind="alpha", value=0.7)

    def calibrate(start: datetime) -> Any:
        return calibration_compute(
            fleet=fleet,
            target=target,
            hours=round((context.end - start) / timedelta(hours=1)),
            end=context.end,
        )

    connection.ensure_connection()
    backend = connection.connection.info.backend_pid
    backtests: list[Cost] = []
    runs: list[Cost] = []
    result: Any = None
    for _ in range(args.repeat):  # interleaved: read, backtest, calibration see the same load
        context.read()
        with Meter(backend) as meter:
            backtest_compute(spec)
        backtests.append(meter.cost)
        with Meter(backend) as meter:
            result = calibrate(context.start)
        runs.append(meter.cost)
    best = _best(runs)
    backtest = _best(backtests)
    read = context.best_read
    swept = [cell for cell in result.cells if cell.result is not None]
    reached = sum(cell.result.reached for cell in swept)
    worst = max(abs(cell.result.chosen.alpha - 0.7) for cell in swept)
    checked = sum(cell.result.verified_events for cell in swept)
    matching = sum(cell.result.verified_matching for cell in swept)
    print(
        f"calibration: {len(swept)} cells over {result.events:,} events; wall {best.wall_s:.2f} s"
        f" = {best.wall_s / backtest.wall_s:.2f}x one backtest ({backtest.wall_s:.2f} s), "
        f"{best.wall_s / read.wall_s:.2f}x the read ({read.wall_s:.2f} s); CPU {best.cpu_s:.2f} s"
        f" = {best.cpu_s / backtest.cpu_s:.2f}x the backtest's ({backtest.cpu_s:.2f} s) "
        f"(best of {args.repeat} each; target <= 2x one backtest)",
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
        reset_peak_rss()
        rss_before = rss_kib("VmRSS")
        run = calibrate(start)
        entry: dict[str, Any] = {
            "events": run.events,
            "rss_peak_growth_mib": round((rss_kib("VmHWM") - rss_before) / 1024, 1),
        }
        if not args.no_tracemalloc:
            tracemalloc.start()
            calibrate(start)
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            entry["tracemalloc_peak_mib"] = round(peak / 2**20, 2)
        memory[name] = entry
        print(f"    memory over the {name} of the window: {entry}", flush=True)
    return {
        "events": result.events,
        "cells_swept": len(swept),
        "runs": [vars(c) for c in runs],
        "backtests": [vars(c) for c in backtests],
        "best": vars(best),
        "backtest_best": vars(backtest),
        "read_best": vars(read),
        "wall_ratio_to_backtest": round(best.wall_s / backtest.wall_s, 3),
        "cpu_ratio_to_backtest": round(best.cpu_s / backtest.cpu_s, 3),
        "wall_ratio_to_read": round(best.wall_s / read.wall_s, 3),
        "target_ratio_to_backtest": 2.0,
        "alpha_target": 0.7,
        "cells_reached": reached,
        "worst_alpha_error": round(worst, 5),
        "sampled_check": {"events": checked, "matching": matching},
        "memory": memory,
    }


def _best(costs: list[Cost]) -> Cost:
    return Cost(wall_s=min(c.wall_s for c in costs), cpu_s=min(c.cpu_s for c in costs))


WHAT["calibration"] = bench_calibration
