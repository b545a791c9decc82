"""Statistical rollout guards and the stage decision: pure functions over rollup rows.

A sequential guard compares the candidate cohort with the stable one since the stage began
(never a sliding window: the confidence sequence of `statistics` accumulates) fleet-wide and,
when `per_cell`, in each cell with enough events in both cohorts. Error control across cells:
the guard's α = 1 − confidence is split by Bonferroni, half to the fleet-wide interval and
half shared equally by the cells the candidate's table has (known when the guard is set, so
the split never depends on the data); each interval is anytime-valid, so the chance that this
guard ever rolls back a candidate that is no worse than the tolerance is at most α, however
often it looks. A rollout's guards add up: k guards at 95% bound a false rollback by k × 5%
(the bench measures the real rate, far lower: a rollback needs the interval wholly beyond a
tolerance above zero).

`stage_decide` is the state machine of a guarded stage (rollback, hold on a sample ratio
mismatch, extend, advance, wait); the service (services.guards) applies its decision and the
benchmark (bench/guards) runs the same function over simulated rollouts.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final, Literal

from ..rollups import Figures, RollupRow, figures_at
from .statistics import (
    SRM_P_VALUE,
    SRM_RELEASE_P_VALUE,
    Interval,
    RatioCheck,
    Verdict,
    quantile_ratio,
    rate_difference,
    sample_ratio,
)

Cell = tuple[str, str, str]  # (task type, latency budget, privacy tier)

# metric → how a rate is read from Figures: (part, worse when); latency metrics: the quantile.
RATE_PARTS: Final[dict[str, tuple[str, Literal["higher", "lower"]]]] = {
    "cloud_share": ("cloud", "higher"),
    "alpha": ("device", "lower"),
    "fallback_rate": ("fallbacks", "higher"),
    "error_rate": ("errors", "higher"),
    "cache_hit_rate": ("cache_hits", "lower"),
    "privacy_violations": ("privacy_violations", "higher"),
    # The quality guards (issue #15): a drop is a regression. Their whole is the reports of the
    # signal, not the events (QUALITY_WHOLES); a mean of values in [0, 1] is judged as a rate,
    # whose Bernoulli variance μ(1 − μ) bounds the variance of any such value from above.
    "draft_kept_rate": ("refine_kept", "lower"),
    "mean_quality": ("quality_sum", "lower"),
}
QUALITY_WHOLES: Final = {"draft_kept_rate": "refine_reported", "mean_quality": "quality_count"}
QUANTILE_METRICS: Final = {"p95_budget": 0.95, "p99_budget": 0.99}
# A statistical latency guard compares the cohorts' quantiles (not a budget): its name.
QUANTILE_LABELS: Final = {"p95_budget": "P95 latency", "p99_budget": "P99 latency"}
SEQUENTIAL_METRICS: Final = frozenset(RATE_PARTS) | frozenset(QUANTILE_METRICS)
# The mixture's prior: the size of a regression worth finding fast (never data-dependent).
MIN_PRIOR_SD: Final = 0.005
MAX_SERIES_POINTS: Final = 240
# Events cluster by device: an event-share mismatch also has to be this far off (relatively)
# before it holds a rollout; the device share has no such floor.
EVENT_SRM_FLOOR: Final = 0.2
# Hysteresis: a held stage stays held until each ratio is clearly back, p at or above
# SRM_RELEASE_P_VALUE and, for events, off by at most this share of expected.
EVENT_SRM_RELEASE_FLOOR: Final = 0.15
# How long after a stage change the sample ratios are left alone (the devices' presence
# window, routing_policies.selectors.ONLINE_WINDOW: by then every live device was seen).
SRM_GRACE: Final = timedelta(minutes=2)


@dataclass(slots=True)
class CohortFigures:
    """One cohort's figures since the stage began: in all and per cell."""

    total: Figures = field(default_factory=Figures)
    cells: dict[Cell, Figures] = field(default_factory=dict)


def cohort_figures(
    rows: Sequence[RollupRow],
    *,
    start: datetime,
    end: datetime,
    version: int,
    cohort: str,
    with_latency: bool,
) -> CohortFigures:
    """Fold the cohort's rows with `start <= minute <= end` (rows sorted by minute)."""
    figures = CohortFigures()
    first = bisect_left(rows, start, key=_minute_of)
    last = bisect_right(rows, end, key=_minute_of)
    for index in range(first, last):
        row = rows[index]
        if row.cohort != cohort or row.policy_version != version:
            continue
        figures.total.add(row, latency=with_latency, scores=False)
        cell = (row.task_type, row.latency_budget, row.privacy_tier)
        figures_at(figures.cells, cell).add(row, latency=with_latency, scores=False)
    return figures


def _minute_of(row: RollupRow) -> datetime:
    return row.minute


@dataclass(frozen=True, slots=True, kw_only=True)
class SequentialGuard:
    """What a statistical guard is: a metric, the tolerated regression and a confidence."""

    metric: str
    tolerance: float
    confidence: float = 0.95
    per_cell: bool = True
    min_samples: int = 50


@dataclass(frozen=True, slots=True, kw_only=True)
class ScopeReading:
    """One scope (the fleet or a cell) judged: its interval, verdict and the events behind."""

    scope: str  # "fleet" or "voice/interactive/normal"
    verdict: Verdict
    interval: Interval | None
    candidate_events: int
    stable_events: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SequentialJudgement:
    """A statistical guard's state, its fleet-wide reading, the cell it acted on, a sentence."""

    state: Verdict
    fleet: ScopeReading
    acted_on: ScopeReading | None
    cells_judged: int
    message: str


def _whole(figures: Figures, metric: str) -> int:
    """What a metric's rate is a share of: the reports of a quality signal, else the events."""
    whole = QUALITY_WHOLES.get(metric)
    return figures.events if whole is None else int(figures.total(whole))  # type: ignore[arg-type]


def _rate_counts(figures: Figures, part: str, metric: str = "") -> tuple[float, int]:
    events = figures.events
    if metric in QUALITY_WHOLES:
        return figures.total(part), _whole(figures, metric)  # type: ignore[arg-type]
    if part in ("cloud", "device"):
        return int(figures.total("events", part)), events
    if part == "fallbacks":
        return int(figures.fallbacks), events
    if part == "privacy_violations":
        return figures.privacy_violations, events
    return int(figures.total(part)), events  # type: ignore[arg-type]  # a MetricField


def _read_scope(
    guard: SequentialGuard, scope: str, mine: Figures, theirs: Figures, alpha: float
) -> ScopeReading:
    # The samples behind the figure: events, or a quality signal's reports.
    events = (_whole(mine, guard.metric), _whole(theirs, guard.metric))
    if min(events) < max(1, guard.min_samples):
        return ScopeReading(
            scope=scope, verdict="collecting", interval=None,
            candidate_events=events[0], stable_events=events[1],
        )  # fmt: skip
    interval: Interval | None
    if guard.metric in QUANTILE_METRICS:
        q = QUANTILE_METRICS[guard.metric]
        estimate = (mine.latency_quantiles([q])[0], theirs.latency_quantiles([q])[0])
        interval = None
        if estimate[0] is not None and estimate[1] is not None:
            interval = quantile_ratio(
                mine.latency_hist,
                theirs.latency_hist,
                q=q,
                alpha=alpha,
                estimate=(estimate[0], estimate[1]),
            )
    else:
        part, worse_when = RATE_PARTS[guard.metric]
        interval = rate_difference(
            candidate=_rate_counts(mine, part, guard.metric),
            stable=_rate_counts(theirs, part, guard.metric),
            alpha=alpha,
            prior_sd=max(guard.tolerance, MIN_PRIOR_SD),
            worse_when=worse_when,
        )
    verdict: Verdict = "collecting" if interval is None else interval.verdict(guard.tolerance)
    return ScopeReading(
        scope=scope, verdict=verdict, interval=interval,
        candidate_events=events[0], stable_events=events[1],
    )  # fmt: skip


def format_amount(metric: str, value: float) -> str:
    """`+3.1 pts` for a rate, `+20%` for a latency ratio."""
    if metric in QUANTILE_METRICS:
        return f"{value * 100:+.0f}%"
    return f"{value * 100:+.1f} pts"


def describe(guard: SequentialGuard, reading: ScopeReading, label: str) -> str:
    """`fallback rate in fleet: +3.2 pts (95% interval +1.4 to +5.0 pts; tolerated +1.0 pts)`."""
    where = "fleet-wide" if reading.scope == "fleet" else f"in {reading.scope}"
    unit = "reports" if guard.metric in QUALITY_WHOLES else "events"
    confidence = f"{guard.confidence * 100:g}%"
    tolerated = format_amount(guard.metric, guard.tolerance)
    if reading.interval is None:
        return (
            f"{label} {where}: collecting ({reading.candidate_events:,} candidate, "
            f"{reading.stable_events:,} stable {unit} of {guard.min_samples:,} each)"
        )
    interval = reading.interval
    words = {
        "regressed": "wholly beyond",
        "healthy": "wholly within",
        "inconclusive": "straddles",
        "collecting": "—",
    }[reading.verdict]
    return (
        f"{label} {where}: candidate vs stable {format_amount(guard.metric, interval.estimate)} "
        f"({confidence} interval {format_amount(guard.metric, interval.lower)} to "
        f"{format_amount(guard.metric, interval.upper)}, {words} the tolerated "
        f"{tolerated}; {reading.candidate_events:,} vs {reading.stable_events:,} {unit})"
    )


def judge_sequential(
    guard: SequentialGuard,
    *,
    candidate: CohortFigures,
    stable: CohortFigures,
    cells_planned: int,
    label: str,
) -> SequentialJudgement:
    """The guard's state: regressed when the fleet or any cell's interval is wholly beyond the
    tolerance; healthy when the fleet's is wholly within (and no cell regressed); collecting
    while the fleet has too few events in either cohort; inconclusive otherwise."""
    alpha = 1 - guard.confidence
    split = guard.per_cell and cells_planned > 0
    fleet_alpha = alpha / 2 if split else alpha
    fleet = _read_scope(guard, "fleet", candidate.total, stable.total, fleet_alpha)
    cells: list[ScopeReading] = []
    if split:
        cell_alpha = alpha / 2 / cells_planned
        for cell in sorted(set(candidate.cells) & set(stable.cells)):
            reading = _read_scope(
                guard, "/".join(cell), candidate.cells[cell], stable.cells[cell], cell_alpha
            )
            if reading.interval is not None:
                cells.append(reading)
    regressed = [r for r in (fleet, *cells) if r.verdict == "regressed"]
    if regressed:
        # The clearest evidence: the scope whose interval lies furthest beyond the tolerance.
        worst = max(regressed, key=lambda r: r.interval.lower if r.interval else 0.0)
        return SequentialJudgement(
            state="regressed",
            fleet=fleet,
            acted_on=worst,
            cells_judged=len(cells),
            message=describe(guard, worst, label),
        )
    return SequentialJudgement(
        state=fleet.verdict,
        fleet=fleet,
        acted_on=None,
        cells_judged=len(cells),
        message=describe(guard, fleet, label)
        + (f"; {len(cells)} cells judged, none regressed" if cells else ""),
    )


def stage_role(
    judgement: SequentialJudgement, *, stage: int, stable_events: int
) -> Literal["breach", "unsettled", "settled"]:
    """What a guard's judgement means for the stage: a breach rolls back, an unsettled guard
    stops the bake clock. At 100% with no stable cohort left (no holdback) nothing can be
    compared: the guard was judged at the earlier stages and does not hold completion."""
    if judgement.state == "regressed":
        return "breach"
    if judgement.state == "healthy" or (stage >= 100 and not stable_events):
        return "settled"
    return "unsettled"


# --- the stage ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Exposure:
    """What a stage needs before it may advance, and what to do when it takes too long."""

    min_devices: int = 0
    min_events: int = 0
    # 0: no limit. Past it (from the stage's start), the stage is extended by as long, up to
    # `max_extensions` times, then `on_expiry` happens.
    stage_limit_minutes: int = 0
    max_extensions: int = 1
    on_expiry: Literal["rollback", "hold"] = "rollback"


@dataclass(frozen=True, slots=True, kw_only=True)
class StageFacts:
    """What the stage decision looks at, gathered by the caller."""

    now: datetime
    stage_started: datetime
    quiet_since: datetime | None
    bake_minutes: int
    auto_advance: bool
    active: bool  # the rollout is active (not paused)
    extensions_used: int
    # (guard sentence) of each guard that wants a rollback, and of each that is not healthy yet
    breaches: Sequence[str]
    unsettled: Sequence[str]
    candidate_devices: int
    candidate_events: int
    sample_ratios: Mapping[str, RatioCheck] = field(default_factory=dict)  # "devices", "events"
    held: bool = False  # the stage is held for a sample ratio mismatch (released with hysteresis)


Action = Literal["rollback", "hold", "extend", "advance", "wait"]
StageVerdict = Literal["rolled_back", "srm", "collecting", "inconclusive", "quiet", "extended"]


@dataclass(frozen=True, slots=True, kw_only=True)
class StageDecision:
    """What to do with the stage, the verdict to show, why, and the new quiet clock."""

    action: Action
    verdict: StageVerdict
    reason: str
    quiet_since: datetime | None
    extensions_used: int


def srm_mismatches(ratios: Mapping[str, RatioCheck], *, held: bool = False) -> list[str]:
    """Sentences for each mismatched sample ratio (devices: p < 0.001; events: and 20% off).

    While `held`, a ratio still counts until it is clearly back (p < 0.01; events more than
    15% off): a p-value near the threshold would otherwise hold and release at every look.
    """
    out = []
    p_value = SRM_RELEASE_P_VALUE if held else SRM_P_VALUE
    for name, check in ratios.items():
        floor = 0.0
        if name == "events":
            floor = EVENT_SRM_RELEASE_FLOOR if held else EVENT_SRM_FLOOR
        if check.mismatched(relative_floor=floor, p_value=p_value):
            out.append(
                f"sample ratio mismatch in {name}: candidate has {check.share * 100:.1f}% of "
                f"{check.total:,} {name}, expected {check.expected_share * 100:.1f}% "
                f"(χ² {check.chi_square:.1f}, p {_p_text(check.p_value)})"
            )
    return out


def cohort_sample_ratios(
    *,
    stage: int,
    candidate_devices: int,
    seen_devices: int,
    candidate_events: int,
    stable_events: int,
    stage_age: timedelta,
) -> dict[str, RatioCheck]:
    """The candidate's share of the devices seen (against the stage's share) and of the events
    (against its share of those devices: a device's events come with it, and the bucket split
    of a small fleet is itself off the stage's share by chance). None while the stage is
    younger than SRM_GRACE: devices are still applying the new assignment."""
    if stage_age < SRM_GRACE:
        return {}
    expected = stage / 100
    event_share = (
        candidate_devices / seen_devices if 0 < candidate_devices < seen_devices else expected
    )
    return {
        "devices": sample_ratio(
            observed=candidate_devices, total=seen_devices, expected_share=expected
        ),
        "events": sample_ratio(
            observed=candidate_events,
            total=candidate_events + stable_events,
            expected_share=event_share,
        ),
    }


def _p_text(p_value: float) -> str:
    return "< 1e-12" if p_value < 1e-12 else f"= {p_value:.2g}"


def stage_decide(facts: StageFacts, exposure: Exposure) -> StageDecision:
    """Roll back on a breach; hold on a sample ratio mismatch; otherwise advance once exposed,
    every guard healthy and the bake time over; past the stage limit extend, then expire."""
    if facts.breaches:
        return StageDecision(
            action="rollback",
            verdict="rolled_back",
            reason="Guard fired: " + "; ".join(facts.breaches),
            quiet_since=None,
            extensions_used=facts.extensions_used,
        )
    mismatches = srm_mismatches(facts.sample_ratios, held=facts.held)
    if mismatches:
        return StageDecision(
            action="hold",
            verdict="srm",
            reason="Held (a bucket or SDK fault?): "
            + "; ".join(mismatches)
            + f"; released once p ≥ {SRM_RELEASE_P_VALUE:g}",
            quiet_since=None,
            extensions_used=facts.extensions_used,
        )
    missing = []
    if facts.candidate_devices < exposure.min_devices:
        missing.append(f"{facts.candidate_devices:,} of {exposure.min_devices:,} devices")
    if facts.candidate_events < exposure.min_events:
        missing.append(f"{facts.candidate_events:,} of {exposure.min_events:,} events")
    if missing or facts.unsettled:
        waiting = ([f"exposure {', '.join(missing)} on the candidate"] if missing else []) + list(
            facts.unsettled
        )
        verdict: StageVerdict = "collecting" if missing else "inconclusive"
        return _expire_or_wait(facts, exposure, verdict, "; ".join(waiting))
    quiet_since = facts.quiet_since or facts.now
    quiet_for = facts.now - quiet_since
    minutes = int(quiet_for.total_seconds() // 60)
    baked = quiet_for >= timedelta(minutes=facts.bake_minutes)
    advance = facts.auto_advance and facts.active and baked
    return StageDecision(
        action="advance" if advance else "wait",
        verdict="quiet",
        reason=f"guards healthy for {facts.bake_minutes} min"
        if advance
        else f"healthy for {minutes} of {facts.bake_minutes} min",
        quiet_since=quiet_since,
        extensions_used=facts.extensions_used,
    )


def _expire_or_wait(
    facts: StageFacts, exposure: Exposure, verdict: StageVerdict, waiting: str
) -> StageDecision:
    limit = exposure.stage_limit_minutes
    used = facts.extensions_used
    if limit and facts.now - facts.stage_started >= timedelta(minutes=limit * (used + 1)):
        if used < exposure.max_extensions:
            return StageDecision(
                action="extend",
                verdict="extended",
                reason=f"Stage extended by {limit} min ({used + 1} of "
                f"{exposure.max_extensions}): still waiting for {waiting}",
                quiet_since=None,
                extensions_used=used + 1,
            )
        if exposure.on_expiry == "rollback":
            return StageDecision(
                action="rollback",
                verdict="rolled_back",
                reason=f"Stage limit of {limit * (used + 1)} min passed without a verdict: "
                f"{waiting}",
                quiet_since=None,
                extensions_used=used,
            )
        return StageDecision(
            action="hold",
            verdict=verdict,
            reason=f"Held past the stage limit of {limit * (used + 1)} min: {waiting}",
            quiet_since=None,
            extensions_used=used,
        )
    return StageDecision(
        action="wait", verdict=verdict, reason=f"waiting for {waiting}", quiet_since=None,
        extensions_used=used,
    )  # fmt: skip


def series_point(
    series: list[list[object]], *, now: datetime, stage: int, judgement: SequentialJudgement
) -> list[list[object]]:
    """The guard's series with this look appended: [iso time, stage, estimate, lower, upper,
    state, scope] of the scope it acted on (else the fleet); points 10 s apart or more (the
    newest look replaces the last) and the last MAX_SERIES_POINTS."""
    reading = judgement.acted_on or judgement.fleet
    interval = reading.interval
    point: list[object] = [
        now.isoformat(),
        stage,
        interval.estimate if interval else None,
        interval.lower if interval else None,
        interval.upper if interval else None,
        judgement.state,
        reading.scope,
    ]
    out = list(series)
    # Points stay 10 s apart; the newest look replaces the last point until then.
    if (
        len(out) >= 2
        and isinstance(out[-2][0], str)
        and out[-1][1] == stage
        and (now - datetime.fromisoformat(out[-2][0])).total_seconds() < 10
    ):
        out[-1] = point
        return out[-MAX_SERIES_POINTS:]
    out.append(point)
    return out[-MAX_SERIES_POINTS:]


# --- when a guard will know ---------------------------------------------------------------------

# With no stage limit, an estimate looks this far ahead before saying "cannot decide".
DECIDE_HORIZON_MINUTES: Final = 24 * 60
_DECIDE_STEPS: Final = 24  # bisection steps: under 0.1 s of a 24 h horizon


@dataclass(frozen=True, slots=True, kw_only=True)
class Pace:
    """Samples a minute of each cohort (events, or a quality signal's reports), and whether
    the stage starts over (a new stage: the evidence since the stage began restarts at 0)."""

    candidate: float
    stable: float
    fresh_stage: bool = False


def samples_of(guard: SequentialGuard, figures: Figures) -> int:
    """What a guard counts of a cohort: its events, or the reports of a quality signal."""
    return _whole(figures, guard.metric)


def _scaled_hist(counts: Mapping[str, int], factor: float) -> dict[str, int]:
    return {key: max(1, round(count * factor)) for key, count in counts.items() if count > 0}


def _verdict_with(
    guard: SequentialGuard, mine: Figures, theirs: Figures, alpha: float, grow: tuple[float, float]
) -> Verdict:
    """The fleet-wide verdict had each cohort `grow` times its samples, in the same
    proportions (the rates, the latency distribution and so the estimate unchanged): the
    interval `_read_scope` would draw at that sample size, from the same boundary."""
    grow_c, grow_s = grow
    n_c, n_s = _whole(mine, guard.metric), _whole(theirs, guard.metric)
    if min(n_c * grow_c, n_s * grow_s) < max(1, guard.min_samples):
        return "collecting"
    interval: Interval | None
    if guard.metric in QUANTILE_METRICS:
        q = QUANTILE_METRICS[guard.metric]
        estimate = (mine.latency_quantiles([q])[0], theirs.latency_quantiles([q])[0])
        if estimate[0] is None or estimate[1] is None:
            return "collecting"
        interval = quantile_ratio(
            _scaled_hist(mine.latency_hist, grow_c),
            _scaled_hist(theirs.latency_hist, grow_s),
            q=q,
            alpha=alpha,
            estimate=(estimate[0], estimate[1]),
        )
    else:
        part, worse_when = RATE_PARTS[guard.metric]
        (c_part, c_whole), (s_part, s_whole) = (
            _rate_counts(mine, part, guard.metric),
            _rate_counts(theirs, part, guard.metric),
        )
        interval = rate_difference(
            candidate=(c_part * grow_c, c_whole * grow_c),
            stable=(s_part * grow_s, s_whole * grow_s),
            alpha=alpha,
            prior_sd=max(guard.tolerance, MIN_PRIOR_SD),
            worse_when=worse_when,
        )
    return "collecting" if interval is None else interval.verdict(guard.tolerance)


def minutes_to_decide(
    guard: SequentialGuard,
    *,
    candidate: Figures,
    stable: Figures,
    cells_planned: int,
    pace: Pace,
    horizon_minutes: float,
) -> float | None:
    """Minutes until the guard's fleet-wide interval would lie wholly on one side of its
    tolerance (healthy or regressed), if the estimate stays what it is and samples keep coming
    at `pace`: the confidence sequence's own boundary (`_read_scope`'s interval at the larger
    sample), solved for the time by bisection. 0 when it is decided now; None when it would not
    be within `horizon_minutes`, or there is nothing yet to extrapolate from (no sample, or no
    sample coming, in a cohort).
    """
    alpha = 1 - guard.confidence
    if guard.per_cell and cells_planned > 0:
        alpha /= 2  # the fleet-wide interval's share (judge_sequential's Bonferroni split)
    n_c, n_s = _whole(candidate, guard.metric), _whole(stable, guard.metric)
    if n_c <= 0 or n_s <= 0 or pace.candidate <= 0 or pace.stable <= 0:
        return None
    base = 0.0 if pace.fresh_stage else 1.0

    def decided(minutes: float) -> bool:
        grow = (
            base + pace.candidate * minutes / n_c,
            base + pace.stable * minutes / n_s,
        )
        return _verdict_with(guard, candidate, stable, alpha, grow) in ("healthy", "regressed")

    if not pace.fresh_stage and decided(0.0):
        return 0.0
    if not decided(horizon_minutes):
        return None
    low, high = 0.0, float(horizon_minutes)
    for _ in range(_DECIDE_STEPS):
        middle = (low + high) / 2
        if decided(middle):
            high = middle
        else:
            low = middle
    return high


def minutes_text(minutes: float) -> str:
    """`within a minute`, `about 17 min`, `about 3.5 h`."""
    if minutes < 1:
        return "within a minute"
    if minutes < 120:
        return f"about {math.ceil(minutes)} min"
    return f"about {minutes / 60:.1f} h"
