"""Issue #15, "Done when": on a simulated fleet the measured curve score → draft kept recovers
the simulator's true curve within ±3 points per score decile.

The simulator's devices on its virtual clock (tests/integration/quality_fleet.py) report every
refine through the real ingest into the real rollups; the lab reads the curve back from them
(`kept_figures`, `Figures.kept_curve`). The truth is the simulator's own keep curve
(`true_kept_rate`), averaged over the very tasks each decile holds.
"""

import itertools
import math
from datetime import timedelta
from typing import Any

import pytest

from edge_sdk.simulate.quality import true_kept_rate
from lab.calibration.quality import kept_figures
from telemetry.rollups.sketch import SCORE_BINS, score_bin, score_counts

from .quality_fleet import CELL, VirtualRun, fleet_config, one_cell_fleet

pytestmark = pytest.mark.integration

# ±3 points must be at least 4 standard errors of a decile's kept rate: sqrt(p(1-p)/n) ≤ 0.75
# pt, i.e. n ≥ 0.25/0.0075² ≈ 4,450 reports a decile at worst (p = ½), ~45,000 in all. The
# cell is draft_refine with θ 0, so every task that reaches the cloud is refined (those the
# latency step keeps on the device, about half, are shadow-refined at 5%): 200 tasks/s for 10
# virtual minutes report ~55,000 (~5,500 a decile, standard errors 0.5–0.7 pt).
RATE = 200.0
SECONDS = 600
STEP_S = 30
DECILES = 10
BOUND = 0.03
MIN_STANDARD_ERRORS = 4.0


def _decile_edges(reported: list[int]) -> list[int]:
    """Score-bin edges cutting the reports into DECILES groups of about a tenth each."""
    total = sum(reported)
    edges, running = [0], 0
    for index, count in enumerate(reported):
        running += count
        if len(edges) < DECILES and running >= total * len(edges) / DECILES:
            edges.append(index + 1)
    edges.append(SCORE_BINS)
    return edges


def test_kept_curve__simulated_fleet__each_score_decile_within_3_points_of_the_true_curve(
    db: None, publisher: Any
) -> None:
    # Given a one-cell fleet whose cell refines every draft it can
    fleet = one_cell_fleet(
        actor=publisher,
        slug="curve",
        values={"mode": "draft_refine", "threshold": 0.0, "shadow_refine_rate": 0.05},
    )
    run = VirtualRun(
        fleet=fleet,
        actor=publisher,
        config=fleet_config(rate=RATE, feedback_share=0.0),
        document=_document(fleet),
        seconds=SECONDS,
    )

    # When it runs ten virtual minutes, its telemetry landed and rolled up
    try:
        for _ in range(SECONDS // STEP_S):
            run.step(STEP_S)
    finally:
        run.close()
    end = run.now() + timedelta(minutes=1)
    figures = kept_figures(fleet_id=fleet.pk, start=end - timedelta(hours=1), end=end)[CELL]

    # Then the rollups hold every report the devices sent, in its score's bin
    reports = [e for e in run.events if e["refine_changed"] is not None]
    reported = score_counts(figures.refine_hist)
    kept = score_counts(figures.kept_hist)
    sent = [0] * SCORE_BINS
    for event in reports:
        sent[score_bin(event["score"])] += 1
    assert reported == sent
    assert sum(kept) == sum(not e["refine_changed"] for e in reports)

    # ... and in each decile of the reports' scores the measured kept rate is within ±3 points
    # of the true rate averaged over the same tasks, ±3 points being ≥ 4 standard errors
    edges = _decile_edges(reported)
    rows = []
    for low, high in itertools.pairwise(edges):
        mine = [e for e in reports if low <= score_bin(e["score"]) < high]
        n = sum(reported[low:high])
        assert n == len(mine) > 0
        measured = sum(kept[low:high]) / n
        truth = sum(true_kept_rate(CELL, e["score"]) for e in mine) / n
        standard_error = math.sqrt(truth * (1 - truth) / n)
        rows.append((low / SCORE_BINS, high / SCORE_BINS, n, measured, truth, standard_error))
    table = "\n".join(
        f"  [{a:.2f}, {b:.2f}) n={n} measured={m:.4f} true={t:.4f} "
        f"error={100 * (m - t):+.2f} pts (se {100 * s:.2f})"
        for a, b, n, m, t, s in rows
    )
    print(f"\nkept curve per score decile:\n{table}")
    assert len(rows) == DECILES, table
    for _, _, _, measured, truth, standard_error in rows:
        assert MIN_STANDARD_ERRORS * standard_error <= BOUND, table
        assert abs(measured - truth) <= BOUND, table


def _document(fleet: Any) -> dict[str, Any]:
    from .quality_fleet import document_of

    return document_of(fleet, 1)
