"""The device's quality below and above θ, from the rollups: the curve score → draft kept per
cell, and the estimator of the quality target (docs/lab.md, "Device quality").

Every event that reports `refine_changed` (a draft-refine, or a device answer the cloud
refined in the background: a shadow refine) is counted in its cell's rollups per score bin:
`refine_hist` (reported) and `kept_hist` (the cloud kept the draft). Over a window they give,
per bin, how often the cloud kept a draft of that score.

The quality target judges a candidate θ by the tasks it keeps on the device: each such task
(with a score, as the sweep decides it) counts with the kept rate of its score. The 100 bins
are pooled, from score 0 up, into contiguous groups of at least MIN_GROUP_REPORTS reports
(the last group takes the remainder; the first and the last reach to 0 and 1, so a score no
report had is judged by its neighbours); a task is judged by its group's kept rate. The
prediction is the mean over the kept tasks,

    Q(θ) = Σ_g N_g(θ) p̂_g / N(θ),

with N_g(θ) the device tasks in group g and p̂_g = kept_g / reported_g. The p̂_g are
independent binomial estimates, so Var Q = Σ_g (N_g/N)² p_g(1 − p_g)/reported_g; p_g is shrunk
by half a report towards ½ in the variance (as the guards do), and the interval is
Q ± 1.96 √Var, clipped to [0, 1]. The display curve pools the bins into deciles, each with a
Wilson score interval.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from routing_policies.cell_schema import CellKey
from telemetry.rollups import (
    ALL_DEVICES,
    SCORE_BINS,
    Figures,
    figures_at,
    plan_window,
    read_rows,
    score_counts,
)

__all__ = [
    "DISPLAY_BINS",
    "MIN_GROUP_REPORTS",
    "MIN_QUALITY_REPORTS",
    "KeptGroups",
    "Prediction",
    "display_curve",
    "groups_of_cells",
    "kept_figures",
    "kept_groups",
    "predict",
    "wilson",
]

# A cell needs this many scored reports in the window before its quality is predicted.
MIN_QUALITY_REPORTS: Final = 100
# The estimator pools score bins into groups of at least this many reports.
MIN_GROUP_REPORTS: Final = 30
# The lab's curve: deciles of the score.
DISPLAY_BINS: Final = 10
Z_95: Final = 1.959964


def wilson(kept: int, reported: int, *, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval of kept / reported (95% by default); (0, 1) without reports."""
    if reported <= 0:
        return 0.0, 1.0
    p = kept / reported
    z2 = z * z
    centre = (p + z2 / (2 * reported)) / (1 + z2 / reported)
    half = z * math.sqrt(p * (1 - p) / reported + z2 / (4 * reported * reported))
    half /= 1 + z2 / reported
    # The interval always holds p; at p = 0 or 1 rounding can put its end a hair inside.
    return max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half))


def kept_figures(
    *, fleet_id: int, start: datetime, end: datetime, segment: int = ALL_DEVICES
) -> dict[CellKey, Figures]:
    """Each cell's figures over the window with the refine and kept histograms: one query on
    the rollups that keep the cell (minutes up to 6 h, hours beyond), every version and
    cohort together (how often the cloud keeps a draft of a given score is the device model's,
    not the policy's); of the whole fleet, or of one segment's rows (its id)."""
    plan = plan_window(end - start, now=end)
    rows = read_rows(
        plan.level(cell_level=True),
        fleet_id=fleet_id,
        since=plan.start,
        until=end,
        scores=True,
        segment=segment,
    )
    cells: dict[CellKey, Figures] = {}
    for row in rows:
        key = (row.task_type, row.latency_budget, row.privacy_tier)
        figures_at(cells, key).add(row, latency=False)
    return cells


def display_curve(figures: Figures, *, bins: int = DISPLAY_BINS) -> list[dict[str, Any]]:
    """Score → draft kept in `bins` equal score bins (those with reports), each with its count
    and Wilson interval: [{"score_from", "score_to", "reported", "kept", "kept_rate", "low",
    "high"}], by score."""
    width = SCORE_BINS // bins
    reported = [0] * bins
    kept = [0] * bins
    for point in figures.kept_curve():
        index = min(bins - 1, round(point["score_from"] * SCORE_BINS) // width)
        reported[index] += point["reported"]
        kept[index] += point["kept"]
    out = []
    for index in range(bins):
        if not reported[index]:
            continue
        low, high = wilson(kept[index], reported[index])
        out.append(
            {
                "score_from": round(index / bins, 4),
                "score_to": round((index + 1) / bins, 4),
                "reported": reported[index],
                "kept": kept[index],
                "kept_rate": kept[index] / reported[index],
                "low": low,
                "high": high,
            }
        )
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class KeptGroups:
    """A cell's kept rates pooled for the estimator: each score bin's group, and per group its
    (reported, kept) counts; `reports` are all the cell's reports, `scored` those in a bin."""

    reports: int
    scored: int
    group_of: tuple[int, ...]  # SCORE_BINS entries
    groups: tuple[tuple[int, int], ...]

    @property
    def enough(self) -> bool:
        """Whether the cell has the reports the quality target needs."""
        return self.scored >= MIN_QUALITY_REPORTS

    def refusal(self) -> str:
        """Why the quality target is refused in this cell, or ""."""
        if self.enough:
            return ""
        return (
            f"too few draft reports to predict quality: {self.scored:,} scored reports in the "
            f"window, {MIN_QUALITY_REPORTS:,} needed"
        )


def kept_groups(
    refine_hist: Mapping[str, int],
    kept_hist: Mapping[str, int],
    *,
    reports: int,
    min_group: int = MIN_GROUP_REPORTS,
) -> KeptGroups:
    """Pool the score bins, from 0 up, into groups of at least `min_group` reports."""
    reported = score_counts(refine_hist)
    kept = [min(k, r) for k, r in zip(score_counts(kept_hist), reported, strict=True)]
    group_of = [0] * SCORE_BINS
    groups: list[tuple[int, int]] = []
    running = [0, 0]
    for index in range(SCORE_BINS):
        group_of[index] = len(groups)
        running[0] += reported[index]
        running[1] += kept[index]
        if running[0] >= min_group:
            groups.append((running[0], running[1]))
            running = [0, 0]
    if running[0] and groups:  # the remainder joins the last group
        last_reported, last_kept = groups.pop()
        groups.append((last_reported + running[0], last_kept + running[1]))
    elif not groups:  # fewer than `min_group` reports in all: one group
        groups.append((running[0], running[1]))
    # The bins after the last group's end (none reported, or the remainder) belong to it.
    top = len(groups) - 1
    group_of = [min(group, top) for group in group_of]
    return KeptGroups(
        reports=reports, scored=sum(reported), group_of=tuple(group_of), groups=tuple(groups)
    )


@dataclass(frozen=True, slots=True)
class Prediction:
    """Predicted device quality at one θ: the estimate, its 95% interval, tasks judged."""

    quality: float
    low: float
    high: float
    tasks: int


def predict(groups: KeptGroups, tasks_per_group: Sequence[int]) -> Prediction | None:
    """Q = Σ N_g p̂_g / N with its interval (module docstring); None without a judged task or
    without a group that has reports."""
    total = sum(tasks_per_group)
    if total <= 0:
        return None
    estimate = variance = 0.0
    for (reported, kept), tasks in zip(groups.groups, tasks_per_group, strict=True):
        if not tasks:
            continue
        if reported <= 0:
            return None
        weight = tasks / total
        estimate += weight * kept / reported
        shrunk = (kept + 0.5) / (reported + 1)
        variance += weight * weight * shrunk * (1 - shrunk) / reported
    radius = Z_95 * math.sqrt(variance)
    return Prediction(estimate, max(0.0, estimate - radius), min(1.0, estimate + radius), total)


def groups_of_cells(
    cells: Mapping[CellKey, Figures], keys: Iterable[CellKey]
) -> dict[CellKey, KeptGroups]:
    """The pooled kept rates of each of `keys` (a cell without rollups: no reports)."""
    out = {}
    for key in keys:
        figures = cells.get(key) or Figures()
        out[key] = kept_groups(
            figures.refine_hist, figures.kept_hist, reports=int(figures.total("refine_reported"))
        )
    return out
