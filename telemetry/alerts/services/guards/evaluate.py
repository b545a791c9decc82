"""Guards, evaluated: read a rollout's facts, judge each guard, hand the verdict to `apply`.

A guard compares the candidate cohort with a value or with the stable cohort, over the guard
window but never before the current stage began. The judging itself is pure
(`alerts.judging`, `alerts.sequential`, `alerts.statistics`); this module reads what they
need (the rollup rows come from the caller, the planned cells and the devices' versions from
the database) and keeps each guard's outcome on its row.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final

from django.db.models import Count

from routing_policies.models import Device, PolicyCell, Rollout

from ...judging import (
    LATENCY_METRICS,
    Budgets,
    Judgement,
    RollupRow,
    ScopeFigures,
    figures_of,
    judge_guard,
)
from ...models import (
    AlertEvent,
    GuardKind,
    Metric,
    RolloutGuard,
    RolloutGuardSet,
)
from ...selectors import minute_floor, window_bounds
from ...sequential import (
    DECIDE_HORIZON_MINUTES,
    QUALITY_WHOLES,
    QUANTILE_LABELS,
    SRM_GRACE,
    CohortFigures,
    Exposure,
    Pace,
    SequentialGuard,
    StageFacts,
    cohort_figures,
    cohort_sample_ratios,
    judge_sequential,
    minutes_text,
    minutes_to_decide,
    samples_of,
    series_point,
    stage_decide,
    stage_role,
)
from ...statistics import RatioCheck
from .apply import apply_decision, apply_fixed_verdict

# What judging a fixed guard writes on it; a statistical one writes its interval too.
FIXED_GUARD_STATE = (
    "state",
    "candidate_value",
    "stable_value",
    "candidate_samples",
    "stable_samples",
    "message",
)
GUARD_STATE = (
    *FIXED_GUARD_STATE,
    "estimate",
    "lower",
    "upper",
    "scope",
    "series",
    "decide",
)


SEQUENTIAL_LABELS: Final = {**{m.value: m.label for m in Metric}, **QUANTILE_LABELS}


def guards_evaluate(
    *,
    guard_set: RolloutGuardSet,
    rows: list[RollupRow],
    budgets: dict[Any, int],
    now: datetime,
) -> AlertEvent | None:
    """Judge the guards (inside the caller's transaction, guard set locked); act on them.

    Returns the history entry of a rollback, advance or completion, if one happened.
    """
    rollout = guard_set.rollout
    if guard_set.stage_seen != rollout.stage:
        guard_set.stage_seen = rollout.stage
        guard_set.quiet_since = None
        guard_set.extensions_used = 0
    if any(g.kind == GuardKind.SEQUENTIAL for g in guard_set.guards.all()):
        return _sequential_evaluate(guard_set, rows, budgets, now)
    start = max(
        window_bounds(now, guard_set.window_minutes)[0], minute_floor(rollout.stage_changed_at)
    )
    guards = list(guard_set.guards.all())
    candidate, stable = _window_figures(
        rollout,
        rows,
        start=start,
        now=now,
        with_latency=any(g.metric in LATENCY_METRICS for g in guards),
    )
    for guard in guards:
        _judge_fixed(guard, candidate=candidate, stable=stable, budgets=budgets)
    RolloutGuard.objects.bulk_update(guards, FIXED_GUARD_STATE)
    return apply_fixed_verdict(
        guard_set,
        rollout,
        firing=[g for g in guards if g.state == "firing"],
        insufficient=[g for g in guards if g.state == "insufficient"],
        now=now,
    )


def _sequential_evaluate(
    guard_set: RolloutGuardSet, rows: list[RollupRow], budgets: dict[Any, int], now: datetime
) -> AlertEvent | None:
    """Judge a guard set with statistical guards: every interval since the stage began, the
    sample ratios, the exposure; then act on `sequential.stage_decide`."""
    rollout = guard_set.rollout
    stage_start = minute_floor(rollout.stage_changed_at)
    guards = list(guard_set.guards.all())
    with_latency = any(g.metric in LATENCY_METRICS for g in guards)
    candidate, stable = (
        cohort_figures(
            rows,
            start=stage_start,
            end=now,
            version=version.number or 0,
            cohort=cohort,
            with_latency=with_latency,
        )
        for cohort, version in (("candidate", rollout.candidate), ("stable", rollout.stable))
    )
    cells_planned = PolicyCell.objects.filter(version=rollout.candidate).count()
    breaches, unsettled = _judge_all(
        guards, guard_set, rows, (candidate, stable), budgets, now, cells_planned
    )
    RolloutGuard.objects.bulk_update(guards, GUARD_STATE)
    ratios = _sample_ratios(
        rollout, candidate, stable, acked=_acked_devices(rollout, now=now), now=now
    )
    guard_set.sample_ratios = {
        name: {
            "observed": check.observed,
            "total": check.total,
            "share": check.share,
            "expected_share": check.expected_share,
            "chi_square": check.chi_square,
            "p_value": check.p_value,
        }
        for name, check in ratios.items()
    }
    decision = stage_decide(
        StageFacts(
            now=now,
            stage_started=rollout.stage_changed_at,
            quiet_since=guard_set.quiet_since,
            bake_minutes=guard_set.bake_for(rollout.stage),
            auto_advance=guard_set.auto_advance,
            active=rollout.state == Rollout.State.ACTIVE,
            extensions_used=guard_set.extensions_used,
            breaches=breaches,
            unsettled=unsettled,
            candidate_devices=ratios["devices"].observed if "devices" in ratios else 0,
            candidate_events=candidate.total.events,
            sample_ratios=ratios,
            held=guard_set.verdict == RolloutGuardSet.Verdict.SRM,
        ),
        Exposure(
            min_devices=guard_set.min_devices,
            min_events=guard_set.min_events,
            stage_limit_minutes=guard_set.stage_limit_minutes,
            max_extensions=guard_set.max_extensions,
            on_expiry=guard_set.on_expiry,  # type: ignore[arg-type]  # OnExpiry's values
        ),
    )
    return apply_decision(guard_set, rollout, decision, now)


def _judge_all(
    guards: list[RolloutGuard],
    guard_set: RolloutGuardSet,
    rows: list[RollupRow],
    cohorts: tuple[CohortFigures, CohortFigures],
    budgets: dict[Any, int],
    now: datetime,
    cells_planned: int,
) -> tuple[list[str], list[str]]:
    """Judge each guard in place; the sentences of those that breach and those not healthy."""
    candidate, stable = cohorts
    stage = guard_set.rollout.stage
    breaches: list[str] = []
    unsettled: list[str] = []
    fixed_candidate = fixed_stable = None
    for guard in guards:
        if guard.kind == GuardKind.SEQUENTIAL:
            spec = SequentialGuard(
                metric=guard.metric,
                tolerance=guard.threshold,
                confidence=guard.confidence,
                per_cell=guard.per_cell,
                min_samples=guard.min_samples,
            )
            judgement = judge_sequential(
                spec,
                candidate=candidate,
                stable=stable,
                cells_planned=cells_planned,
                label=SEQUENTIAL_LABELS.get(guard.metric, guard.metric),
            )
            reading = judgement.acted_on or judgement.fleet
            guard.state = judgement.state
            guard.message = judgement.message[:300]
            if stage >= 100 and not stable.total.events:
                # Nothing left on stable to compare with: judged at the earlier stages.
                guard.message = "no stable cohort at 100%: compared at the earlier stages" + (
                    "" if guard_set.rollout.holdback else " (a holdback would keep one)"
                )
            guard.scope = reading.scope[:200]
            interval = reading.interval
            guard.estimate = interval.estimate if interval else None
            guard.lower = interval.lower if interval else None
            guard.upper = interval.upper if interval else None
            guard.candidate_samples = judgement.fleet.candidate_events
            guard.stable_samples = judgement.fleet.stable_events
            guard.series = series_point(guard.series, now=now, stage=stage, judgement=judgement)
            role = stage_role(judgement, stage=stage, stable_events=stable.total.events)
            guard.decide = (
                _decide_estimate(spec, guard_set, cohorts, cells_planned, now)
                if role == "unsettled"
                else {}
            )
            if role == "breach":
                breaches.append(judgement.message)
            elif role == "unsettled":
                unsettled.append(judgement.message)
            continue
        if fixed_candidate is None or fixed_stable is None:
            # Fixed guards keep their window (since the stage began at the earliest).
            start = max(
                window_bounds(now, guard_set.window_minutes)[0],
                minute_floor(guard_set.rollout.stage_changed_at),
            )
            fixed_candidate, fixed_stable = _window_figures(
                guard_set.rollout, rows, start=start, now=now, with_latency=bool(budgets)
            )
        fixed = _judge_fixed(guard, candidate=fixed_candidate, stable=fixed_stable, budgets=budgets)
        if guard.state == "firing":
            breaches.append(fixed.message)
        elif guard.state == "insufficient":
            unsettled.append(fixed.message)
    return breaches, unsettled


# The holdback a "what would shorten it" line tries at 100% when the rollout has none.
SUGGESTED_HOLDBACK: Final = 10


def _decide_estimate(
    spec: SequentialGuard,
    guard_set: RolloutGuardSet,
    cohorts: tuple[CohortFigures, CohortFigures],
    cells_planned: int,
    now: datetime,
) -> dict[str, Any]:
    """When a guard not yet healthy can decide at the current rate, and what would shorten it
    (docs/alerts.md, "When a guard will know"): `sequential.minutes_to_decide` at the pace
    seen since the stage began, at the next stage, with a holdback at 100%, at twice the
    traffic."""
    rollout = guard_set.rollout
    candidate, stable = cohorts
    unit = "reports" if spec.metric in QUALITY_WHOLES else "events"
    elapsed = max(1.0, (now - minute_floor(rollout.stage_changed_at)).total_seconds() / 60)
    n_candidate = samples_of(spec, candidate.total)
    n_stable = samples_of(spec, stable.total)
    per_minute = (n_candidate / elapsed, n_stable / elapsed)
    share = rollout.candidate_share
    if guard_set.stage_limit_minutes:
        window = guard_set.stage_limit_minutes * (guard_set.max_extensions + 1)
        in_stage = (now - rollout.stage_changed_at).total_seconds() / 60
        horizon, window_text = max(0.0, window - in_stage), f"the stage's {window} min limit"
    else:
        window, horizon, window_text = DECIDE_HORIZON_MINUTES, DECIDE_HORIZON_MINUTES, "24 h"

    def estimate(
        candidate_pm: float, stable_pm: float, *, fresh: bool, within: float
    ) -> float | None:
        return minutes_to_decide(
            spec,
            candidate=candidate.total,
            stable=stable.total,
            cells_planned=cells_planned,
            pace=Pace(candidate=candidate_pm, stable=stable_pm, fresh_stage=fresh),
            horizon_minutes=within,
        )

    pace_text = f"{per_minute[0]:.1f} candidate and {per_minute[1]:.1f} stable {unit} a minute"
    minutes = estimate(*per_minute, fresh=False, within=horizon)
    if not n_candidate or not n_stable:
        text = (
            f"cannot decide yet: no {'candidate' if not n_candidate else 'stable'} {unit} "
            "since the stage began"
        )
    elif minutes is None:
        text = f"cannot decide at this rate within {window_text} ({pace_text})"
    else:
        when = "within a minute" if minutes < 1 else f"in {minutes_text(minutes)}"
        text = f"decides {when} at the current rate ({pace_text})"
    options: list[tuple[str, float, float, bool]] = []
    if rollout.next_stage is not None:
        later = rollout.next_stage if rollout.next_stage < 100 else 100 - rollout.holdback
        if later < 100:
            options.append((f"a larger stage ({later}% on the candidate)", later, share, True))
    if not rollout.holdback and share < 100:
        options.append(
            (f"a holdback ({SUGGESTED_HOLDBACK}% kept on stable at 100%)",
             100 - SUGGESTED_HOLDBACK, share, True)
        )  # fmt: skip

    def sooner(found: float | None) -> bool:
        # Listed only when it would say a shorter time than the current rate does.
        if found is None:
            return False
        return minutes is None or (found < minutes and minutes_text(found) != minutes_text(minutes))

    shorter = []
    for label, later_share, now_share, fresh in options:
        found = estimate(
            per_minute[0] * later_share / now_share,
            per_minute[1] * (100 - later_share) / (100 - now_share),
            fresh=fresh,
            within=window,
        )
        if sooner(found):
            shorter.append(f"{label}: {minutes_text(found or 0.0)} there")
    doubled = estimate(2 * per_minute[0], 2 * per_minute[1], fresh=False, within=horizon)
    if doubled is not None and sooner(doubled):
        shorter.append(f"twice the traffic: {minutes_text(doubled)}")
    return {
        "minutes": None if minutes is None else round(minutes, 1),
        "text": text,
        "shorter": shorter,
        "candidate_per_minute": round(per_minute[0], 3),
        "stable_per_minute": round(per_minute[1], 3),
        "horizon_minutes": round(horizon, 1),
    }


def _judge_fixed(
    guard: RolloutGuard, *, candidate: ScopeFigures, stable: ScopeFigures, budgets: Budgets
) -> Judgement:
    """Judge a fixed-limit guard on the two cohorts' figures and keep the outcome on it."""
    judgement = judge_guard(
        metric=guard.metric,
        comparison=guard.comparison,
        threshold=guard.threshold,
        min_samples=guard.min_samples,
        candidate=candidate,
        stable=stable,
        budgets=budgets,
    )
    guard.state = {"breach": "firing", "ok": "ok", "no_data": "insufficient"}[judgement.outcome]
    guard.candidate_value = judgement.value
    guard.stable_value = judgement.previous
    guard.candidate_samples = candidate.events
    guard.stable_samples = stable.events
    guard.message = judgement.message[:300]
    return judgement


def _window_figures(
    rollout: Rollout, rows: list[RollupRow], *, start: datetime, now: datetime, with_latency: bool
) -> tuple[ScopeFigures, ScopeFigures]:
    """The fixed guards' figures of each cohort over their window."""
    return tuple(  # type: ignore[return-value]  # two items
        figures_of(
            rows,
            start=start,
            end=now,
            where={"cohort": cohort, "policy_version": version.number},
            with_latency=with_latency,
        )
        for cohort, version in (("candidate", rollout.candidate), ("stable", rollout.stable))
    )


def _acked_devices(rollout: Rollout, *, now: datetime) -> dict[int | None, int]:
    """Devices seen in the stage (or within the presence window), by the version they acked:
    the one read of the device table an evaluation makes."""
    since = min(rollout.stage_changed_at, now - SRM_GRACE)
    return dict(
        Device.objects.filter(
            fleet_id=rollout.fleet_id,
            revoked_at__isnull=True,
            last_seen_at__gte=since,
            acked_version__in=[rollout.candidate.number, rollout.stable.number],
        )
        .values_list("acked_version")
        .annotate(n=Count("id"))
        .order_by()
    )


def _sample_ratios(
    rollout: Rollout,
    candidate: CohortFigures,
    stable: CohortFigures,
    *,
    acked: dict[int | None, int],
    now: datetime,
) -> dict[str, RatioCheck]:
    """The sample ratio checks of the stage, from the devices on each version (`acked`)."""
    on_candidate = acked.get(rollout.candidate.number, 0)
    return cohort_sample_ratios(
        stage=rollout.candidate_share,
        candidate_devices=on_candidate,
        seen_devices=on_candidate + acked.get(rollout.stable.number, 0),
        candidate_events=candidate.total.events,
        stable_events=stable.total.events,
        stage_age=now - rollout.stage_changed_at,
    )
