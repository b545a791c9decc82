"""Judging alert rules and rollout guards from rollup rows: pure functions, no database.

`selectors.alerts` reads minute-rollup rows of a fleet once per evaluation (telemetry.rollups
`read_rows`); these functions fold the rows a rule looks at (its scope and window) into
`Figures` and compare them with the rule. A judgement is `breach`, `ok`, or `no_data` when
there were too few samples to say: too few is never taken for healthy.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Literal

from ..rollups import Figures, MetricField, figures_at
from ..rollups import RollupRow as RollupRow  # the rows these functions judge, for callers
from ..rollups import ratio as share_of
from .models import AlertRule, Condition, GuardComparison, Metric, Scope

Outcome = Literal["breach", "ok", "no_data"]
# (policy version, task type, latency budget, privacy tier)
VersionCell = tuple[int, str, str, str]
# A version's cell → the cell's latency budget in ms.
Budgets = Mapping[VersionCell, int]

RATE_METRICS: Final = frozenset(
    {
        Metric.CLOUD_SHARE,
        Metric.ALPHA,
        Metric.FALLBACK_RATE,
        Metric.ERROR_RATE,
        Metric.CACHE_HIT_RATE,
        Metric.DRAFT_KEPT_RATE,
        Metric.MEAN_QUALITY,
    }
)
# The quality metrics (issue #15), as (part, whole) columns: judged over the events that
# report the signal, so their samples are reports, not events; without any, no data.
QUALITY_METRICS: Final[dict[str, tuple[MetricField, MetricField]]] = {
    Metric.DRAFT_KEPT_RATE: ("refine_kept", "refine_reported"),
    Metric.MEAN_QUALITY: ("quality_sum", "quality_count"),
}
LATENCY_METRICS: Final = {Metric.P95_BUDGET: 0.95, Metric.P99_BUDGET: 0.99}
GUARD_METRICS: Final = frozenset(set(Metric) - {Metric.EVENTS})


@dataclass(slots=True)
class ScopeFigures:
    """The figures of the rows a rule or guard looks at: in all, per version × cell for the
    latency metrics, and the cells where privacy violations were."""

    total: Figures = field(default_factory=Figures)
    # Per version × cell: its rows with a latency sketch (only when a latency metric asks).
    cells: dict[VersionCell, Figures] = field(default_factory=dict)
    # Per version × cell: privacy violations, where there were any (the alert names them).
    violations: dict[VersionCell, int] = field(default_factory=dict)

    @property
    def events(self) -> int:
        """How many events the rows count."""
        return self.total.events

    def add(self, row: RollupRow, with_latency: bool) -> None:
        """Fold one row in."""
        self.total.add(row, latency=False, scores=False)
        violations = row.privacy_violations
        with_sketch = with_latency and bool(row.latency_hist)
        if not violations and not with_sketch:
            return
        key = (row.policy_version, row.task_type, row.latency_budget, row.privacy_tier)
        if violations:
            self.violations[key] = self.violations.get(key, 0) + violations
        if with_sketch:
            figures_at(self.cells, key).add(row, scores=False)


@dataclass(frozen=True, slots=True)
class Reading:
    """A metric's value over some rows, with the samples it rests on (None: cannot say)."""

    value: float | None
    samples: int
    detail: str = ""


def parse_scope(scope: str, value: str) -> dict[str, Any]:
    """The row filter of a scope: {} for the fleet, {"policy_version": 3}, … ; ValueError."""
    if scope == Scope.FLEET:
        return {}
    if scope == Scope.VERSION:
        # Checked by hand, not by int(): its refusal is Python's text, and it reads "٣" or "1_0".
        digits = value.strip().removeprefix("v")
        if not (digits.isascii() and digits.isdigit()) or int(digits) < 1:
            raise ValueError(f"a version number such as 3 (whole, ≥ 1); got {value!r}")
        return {"policy_version": int(digits)}
    if scope == Scope.COHORT:
        if value not in ("stable", "candidate"):
            raise ValueError("a cohort is `stable` or `candidate`")
        return {"cohort": value}
    if scope == Scope.CELL:
        parts = [part.strip() for part in value.split("/")]
        if len(parts) != 3 or not all(parts):
            raise ValueError("a cell is task_type/latency_budget/privacy_tier")
        return dict(zip(("task_type", "latency_budget", "privacy_tier"), parts, strict=True))
    raise ValueError(f"unknown scope {scope!r}")


def figures_of(
    rows: Sequence[RollupRow],
    *,
    start: datetime,
    end: datetime,
    where: Mapping[str, Any],
    with_latency: bool,
) -> ScopeFigures:
    """Sum the rows with `start <= minute <= end` that match `where` (rows sorted by minute)."""
    figures = ScopeFigures()
    first = bisect_left(rows, start, key=_minute_of)
    last = bisect_right(rows, end, key=_minute_of)
    wanted = list(where.items())
    for index in range(first, last):
        row = rows[index]
        if wanted and any(getattr(row, name) != value for name, value in wanted):
            continue
        figures.add(row, with_latency)
    return figures


def _minute_of(row: RollupRow) -> datetime:
    return row.minute


def reading(metric: str, figures: ScopeFigures, budgets: Budgets, min_samples: int) -> Reading:
    """The metric's value over `figures` (a latency metric: the worst cell's P/budget)."""
    total = figures.total
    events = total.events
    if metric == Metric.EVENTS:
        return Reading(float(events), events)
    if metric == Metric.PRIVACY_VIOLATIONS:
        return Reading(float(total.privacy_violations), events, _violation_detail(figures))
    if metric in QUALITY_METRICS:
        part, whole = QUALITY_METRICS[metric]
        reports = int(total.total(whole))
        return Reading(share_of(total.total(part), reports), reports)
    if metric in RATE_METRICS:
        if not events:
            return Reading(None, 0)
        if metric == Metric.CLOUD_SHARE:
            return Reading(total.share("cloud"), events)
        if metric == Metric.ALPHA:
            return Reading(total.share("device"), events)
        if metric == Metric.FALLBACK_RATE:
            return Reading(total.fallback_rate(), events)
        if metric == Metric.CACHE_HIT_RATE:
            return Reading(total.rate("cache_hits"), events)
        return Reading(total.rate("errors"), events)
    quantile = LATENCY_METRICS[Metric(metric)]
    worst: Reading | None = None
    for key, cell in sorted(figures.cells.items(), key=lambda item: item[0]):
        budget = budgets.get(key)
        count = cell.events
        if not budget or count < min_samples:
            continue
        latency = cell.latency_quantiles([quantile])[0]
        if latency is None:
            continue
        ratio = latency / budget
        if worst is None or (worst.value is not None and ratio > worst.value):
            label = "/".join(key[1:])
            worst = Reading(
                ratio,
                count,
                f"worst cell {label} v{key[0]}: {latency:,.0f} ms of a {budget:,} ms budget",
            )
    if worst is None:
        # No cell has enough samples: say how many the busiest one had.
        busiest = max((cell.events for cell in figures.cells.values()), default=0)
        return Reading(None, busiest)
    return worst


def _violation_detail(figures: ScopeFigures) -> str:
    """`in text/interactive/sensitive v2: 3, image/background/sensitive v2: 1` (most first)."""
    if not figures.violations:
        return ""
    ranked = sorted(figures.violations.items(), key=lambda item: (-item[1], item[0]))
    shown = ", ".join(f"{'/'.join(key[1:])} v{key[0]}: {count:,}" for key, count in ranked[:3])
    more = f" and {len(ranked) - 3} more cells" if len(ranked) > 3 else ""
    return f"in {shown}{more}"


def _breach(condition: str, value: float, threshold: float, previous: float | None) -> bool:
    if condition == Condition.ABOVE:
        return value > threshold
    if condition == Condition.BELOW:
        return value < threshold
    assert previous is not None
    if condition == Condition.RISES_BY:
        return value - previous >= threshold
    return previous - value >= threshold


def clear_level(condition: str, threshold: float, hysteresis: float) -> float:
    """The level past which a breached rule clears: the threshold moved to the healthy side
    by the hysteresis (down for above / rises by / falls by, up for below)."""
    if condition == Condition.BELOW:
        return threshold + hysteresis
    return threshold - hysteresis


@dataclass(frozen=True, slots=True)
class Judgement:
    """A rule's outcome, its value (and the previous window's), samples and a sentence.

    `held`: not breached, but not yet past the clear level either (inside the hysteresis
    band): a pending or firing rule stays as it is.
    """

    outcome: Outcome
    value: float | None
    previous: float | None
    samples: int
    message: str
    held: bool = False


def format_value(metric: str, value: float | None) -> str:
    """`31.5%`, `3`, `1.24× budget`, `0.82` (mean quality), `—`."""
    if value is None:
        return "—"
    if metric == Metric.MEAN_QUALITY:
        return f"{value:.2f}"
    if metric in RATE_METRICS:
        return f"{value * 100:.1f}%"
    if metric in LATENCY_METRICS:
        return f"{value:.2f}× budget"
    return f"{value:,.0f}"


def format_threshold(metric: str, condition: str, threshold: float) -> str:
    """`above 5.0%`, `rises by ≥ 20.0 pts`, `above 1.00× budget`."""
    if condition in (Condition.RISES_BY, Condition.FALLS_BY) and metric in RATE_METRICS:
        amount = f"{threshold * 100:.1f} pts"
    else:
        amount = format_value(metric, threshold)
    words = {
        Condition.ABOVE: "above",
        Condition.BELOW: "below",
        Condition.RISES_BY: "rises by ≥",
        Condition.FALLS_BY: "falls by ≥",
    }[Condition(condition)]
    return f"{words} {amount}"


def _too_few_to_compare(mine: Reading, other: Reading, what: str, min_samples: int) -> Judgement:
    """No data: the reading to compare with (`what`) has too few samples."""
    return Judgement(
        "no_data",
        mine.value,
        other.value,
        mine.samples,
        f"too few {what}: {other.samples:,} of the {min_samples:,} needed",
    )


def judge_rule(
    rule: AlertRule,
    *,
    current: ScopeFigures,
    previous: ScopeFigures | None,
    budgets: Budgets,
    reported_before: bool = True,
) -> Judgement:
    """Breach, ok or no_data for one rule (its metric, condition, threshold, sample count and
    hysteresis) over its current (and previous) window; an ok inside the hysteresis band is
    `held`."""
    metric, condition, threshold = rule.metric, rule.condition, rule.threshold
    min_samples, hysteresis = rule.min_samples, rule.hysteresis
    now_reading = reading(metric, current, budgets, min_samples)
    label = Metric(metric).label
    if metric == Metric.EVENTS:
        # Silence: judged on the count itself, but a fleet that never reported is not silent.
        if not reported_before and current.events == 0:
            return Judgement("no_data", 0.0, None, 0, "no events yet: nothing to miss")
        assert now_reading.value is not None
        outcome: Outcome = (
            "breach" if _breach(condition, now_reading.value, threshold, None) else "ok"
        )
        rule_text = format_threshold(metric, condition, threshold)
        text = f"{current.events:,} events in the window (alert if {rule_text})"
        held = outcome == "ok" and _breach(
            condition, now_reading.value, clear_level(condition, threshold, hysteresis), None
        )
        return Judgement(outcome, now_reading.value, None, current.events, text, held)
    conclusive_violation = (
        metric == Metric.PRIVACY_VIOLATIONS
        and condition == Condition.ABOVE
        and now_reading.value is not None
        and now_reading.value > threshold
    )
    if now_reading.value is None or (
        now_reading.samples < min_samples and not conclusive_violation
    ):
        return Judgement(
            "no_data",
            now_reading.value,
            None,
            now_reading.samples,
            f"too few samples: {now_reading.samples:,} of the {min_samples:,} needed",
        )
    before: Reading | None = None
    if condition in (Condition.RISES_BY, Condition.FALLS_BY):
        before = reading(metric, previous or ScopeFigures(), budgets, min_samples)
        if before.value is None or before.samples < min_samples:
            return _too_few_to_compare(
                now_reading, before, "samples in the previous window", min_samples
            )
    previous_value = before.value if before is not None else None
    breached = _breach(condition, now_reading.value, threshold, previous_value)
    level = clear_level(condition, threshold, hysteresis)
    held = not breached and _breach(condition, now_reading.value, level, previous_value)
    shown = format_value(metric, now_reading.value)
    if before is not None:
        shown = f"{format_value(metric, before.value)} → {shown}"
    rule_text = format_threshold(metric, condition, threshold)
    if hysteresis > 0:
        rule_text += f"; {format_clear(metric, condition, threshold, hysteresis)}"
    text = f"{label} {shown} (alert if {rule_text})"
    if now_reading.detail:
        text += f"; {now_reading.detail}"
    return Judgement(
        "breach" if breached else "ok",
        now_reading.value,
        previous_value,
        now_reading.samples,
        text,
        held,
    )


def format_clear(metric: str, condition: str, threshold: float, hysteresis: float) -> str:
    """Where a breached rule clears: `clears at ≤ 0.90× budget`, `clears at a rise < 15.0 pts`,
    `clears at ≥ 2`; "" without hysteresis (it clears as soon as it is not breached)."""
    if hysteresis <= 0:
        return ""
    level = clear_level(condition, threshold, hysteresis)
    return f"clears {_clear_words(metric, condition, level)}"


def _clear_words(metric: str, condition: str, level: float) -> str:
    if condition in (Condition.RISES_BY, Condition.FALLS_BY):
        amount = f"{level * 100:.1f} pts" if metric in RATE_METRICS else format_value(metric, level)
        change = "rise" if condition == Condition.RISES_BY else "fall"
        return f"at a {change} < {amount}"
    sign = "≥" if condition == Condition.BELOW else "≤"
    return f"at {sign} {format_value(metric, level)}"


def judge_guard(
    *,
    metric: str,
    comparison: str,
    threshold: float,
    min_samples: int,
    candidate: ScopeFigures,
    stable: ScopeFigures,
    budgets: Budgets,
) -> Judgement:
    """Breach, ok or no_data for one rollout guard: candidate against a value or stable."""
    mine = reading(metric, candidate, budgets, min_samples)
    label = Metric(metric).label
    conclusive_violation = (
        metric == Metric.PRIVACY_VIOLATIONS
        and comparison == GuardComparison.ABOVE
        and mine.value is not None
        and mine.value > threshold
    )
    if mine.value is None or (mine.samples < min_samples and not conclusive_violation):
        return Judgement(
            "no_data",
            mine.value,
            None,
            mine.samples,
            f"too few candidate events to judge: {mine.samples:,} of the {min_samples:,} needed",
        )
    if comparison == GuardComparison.ABOVE:
        breached = mine.value > threshold
        text = (
            f"candidate {label} {format_value(metric, mine.value)} "
            f"({'above' if breached else 'within'} {format_value(metric, threshold)})"
        )
        if mine.detail:
            text += f"; {mine.detail}"
        return Judgement("breach" if breached else "ok", mine.value, None, mine.samples, text)
    theirs = reading(metric, stable, budgets, min_samples)
    if theirs.value is None or theirs.samples < min_samples:
        return _too_few_to_compare(mine, theirs, "stable events to compare with", min_samples)
    gap = mine.value - theirs.value
    breached = gap > threshold
    if metric in RATE_METRICS:
        gap_text = f"{gap * 100:+.1f} pts"
        limit_text = f"{threshold * 100:.1f} pts"
    else:
        gap_text, limit_text = f"{gap:+.2f}", f"{threshold:.2f}"
    text = (
        f"candidate {label} {format_value(metric, mine.value)} vs stable "
        f"{format_value(metric, theirs.value)} ({gap_text}; "
        f"{'more than' if breached else 'within'} {limit_text})"
    )
    return Judgement("breach" if breached else "ok", mine.value, theirs.value, mine.samples, text)
