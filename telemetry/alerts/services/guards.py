"""Guarded rollouts: set a rollout's guards; judge them and roll back or advance on their word.

A guard compares the candidate cohort with a value or with the stable cohort, over the guard
window but never before the current stage began. A firing guard rolls the rollout back
through `routing_policies.services.rollout_rollback` (audited as `system`, with the guard's
sentence as the reason). When every guard is quiet for the stage's bake time and auto-advance
is on, the rollout advances (at 100% it completes). Too few events is `insufficient`: it
stops the bake clock and never counts as quiet.
"""

from __future__ import annotations

import logging
import math
from datetime import datetime, timedelta
from typing import Any, Final

from django.db import transaction
from django.db.models import Count

from controlplane.exceptions import Conflict, ValidationFailed
from routing_policies import services as rollout_services
from routing_policies.models import Device, PolicyCell, Rollout
from routing_policies.policies.audit import Actor, audit_record

from ..judging import (
    GUARD_METRICS,
    LATENCY_METRICS,
    RATE_METRICS,
    Budgets,
    Judgement,
    RollupRow,
    ScopeFigures,
    figures_of,
    judge_guard,
)
from ..limits import MAX_MIN_SAMPLES, MAX_WINDOW_MINUTES, MIN_WINDOW_MINUTES
from ..models import (
    AlertEvent,
    GuardComparison,
    GuardKind,
    Metric,
    RolloutGuard,
    RolloutGuardSet,
)
from ..selectors import minute_floor, window_bounds
from ..sequential import (
    DECIDE_HORIZON_MINUTES,
    QUALITY_WHOLES,
    QUANTILE_LABELS,
    QUANTILE_METRICS,
    SEQUENTIAL_METRICS,
    SRM_GRACE,
    CohortFigures,
    Exposure,
    Pace,
    SequentialGuard,
    StageDecision,
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
from ..statistics import RatioCheck
from .problems import field_problem

logger = logging.getLogger(__name__)

MAX_GUARDS = 12
# What "guarded" means when no guard is named: docs/alerts.md.
DEFAULT_GUARDS: tuple[dict[str, Any], ...] = (
    {"metric": "fallback_rate", "comparison": "above_stable_by", "threshold": 0.02},
    {"metric": "p95_budget", "comparison": "above", "threshold": 1.0},
    {"metric": "privacy_violations", "comparison": "above", "threshold": 0},
    {"metric": "cloud_share", "comparison": "above_stable_by", "threshold": 0.2},
)


# "statistical": anytime-valid intervals on candidate − stable, per cell, with the privacy
# guard kept critical (any violation rolls back: a rate's interval would wait for many).
STATISTICAL_GUARDS: tuple[dict[str, Any], ...] = (
    {"kind": "sequential", "metric": "cloud_share", "tolerance": 0.05},
    {"kind": "sequential", "metric": "fallback_rate", "tolerance": 0.01},
    {"kind": "sequential", "metric": "error_rate", "tolerance": 0.01},
    {"kind": "sequential", "metric": "p95_budget", "tolerance": 0.2},
    {"metric": "privacy_violations", "comparison": "above", "threshold": 0},
)
# The quality guard (issue #15): the candidate's draft-kept rate may fall at most 3 pts below
# stable's. Not in "statistical": a fleet whose devices report no refines would keep it
# collecting, and a collecting guard holds every stage. "quality" is "statistical" plus it.
QUALITY_GUARD: Final[dict[str, Any]] = {
    "kind": "sequential",
    "metric": "draft_kept_rate",
    "tolerance": 0.03,
}
QUALITY_GUARDS: tuple[dict[str, Any], ...] = (*STATISTICAL_GUARDS, QUALITY_GUARD)
PRESETS: Final = {
    "default": DEFAULT_GUARDS,
    "statistical": STATISTICAL_GUARDS,
    "quality": QUALITY_GUARDS,
}
SEQUENTIAL_FIELDS: Final = frozenset(
    {"kind", "metric", "tolerance", "confidence", "per_cell", "min_samples"}
)
MIN_CONFIDENCE: Final = 0.5
MAX_CONFIDENCE: Final = 0.999

DEFAULT_BAKE_MINUTES: Final = 10
MAX_BAKE_MINUTES: Final = 7 * 24 * 60  # a week at one stage
MAX_EXPOSURE: Final = 10**9
MAX_EXTENSIONS: Final = 5


def _clean_sequential(
    guard: dict[str, Any], where: str, samples: object
) -> tuple[dict[str, Any], list[dict[str, str]]]:
    problems: list[dict[str, str]] = []
    metric, tolerance = guard.get("metric"), guard.get("tolerance")
    confidence, per_cell = guard.get("confidence", 0.95), guard.get("per_cell", True)
    for name in sorted(set(guard) - SEQUENTIAL_FIELDS):
        problems.append(field_problem(f"{where}.{name}", "unknown for a sequential guard"))
    if metric not in SEQUENTIAL_METRICS:
        problems.append(
            field_problem(f"{where}.metric", f"one of {', '.join(sorted(SEQUENTIAL_METRICS))}")
        )
    limit = 10.0 if metric in QUANTILE_METRICS else 1.0
    if (
        isinstance(tolerance, bool)
        or not isinstance(tolerance, int | float)
        or not 0 <= tolerance <= limit
    ):
        problems.append(
            field_problem(
                f"{where}.tolerance",
                "a regression from 0 to 10 (0.2 is 20% slower)"
                if limit > 1
                else "a fraction from 0 to 1 (0.01 is 1 pt)",
            )
        )
    if (
        isinstance(confidence, bool)
        or not isinstance(confidence, int | float)
        or not MIN_CONFIDENCE <= confidence <= MAX_CONFIDENCE
    ):
        problems.append(
            field_problem(f"{where}.confidence", f"from {MIN_CONFIDENCE} to {MAX_CONFIDENCE}")
        )
    if not isinstance(per_cell, bool):
        problems.append(field_problem(f"{where}.per_cell", "a boolean"))
    if (
        isinstance(samples, bool)
        or not isinstance(samples, int)
        or not 0 <= samples <= MAX_MIN_SAMPLES
    ):
        problems.append(field_problem(f"{where}.min_samples", "a whole number ≥ 0"))
    cleaned = {
        "kind": GuardKind.SEQUENTIAL,
        "metric": metric,
        "comparison": GuardComparison.ABOVE_STABLE_BY,
        "threshold": tolerance,
        "confidence": confidence,
        "per_cell": per_cell,
        "min_samples": samples,
    }
    return cleaned, problems


def _clean_guards(guards: object, min_samples: object) -> list[dict[str, Any]]:
    if guards is None:
        guards = "default"
    if isinstance(guards, str) and guards in PRESETS:
        guards = [dict(g) for g in PRESETS[guards]]
    if not isinstance(guards, list) or not guards or len(guards) > MAX_GUARDS:
        raise ValidationFailed(
            f'`guards` is a list of 1 to {MAX_GUARDS} guards, "default", "statistical" or '
            '"quality".',
            details=[field_problem("guards", "a list")],
        )
    problems: list[dict[str, str]] = []
    cleaned = []
    for index, guard in enumerate(guards):
        where = f"guards[{index}]"
        if not isinstance(guard, dict):
            problems.append(field_problem(where, "an object with metric, comparison, threshold"))
            continue
        kind = guard.get("kind", GuardKind.FIXED)
        if kind not in GuardKind.values:
            problems.append(field_problem(f"{where}.kind", "fixed or sequential"))
            continue
        if kind == GuardKind.SEQUENTIAL:
            one, found = _clean_sequential(guard, where, guard.get("min_samples", min_samples))
            problems.extend(found)
            cleaned.append(one)
            continue
        metric, comparison = guard.get("metric"), guard.get("comparison")
        threshold = guard.get("threshold")
        samples = guard.get("min_samples", min_samples)
        if metric not in GUARD_METRICS:
            problems.append(
                field_problem(f"{where}.metric", f"one of {', '.join(sorted(GUARD_METRICS))}")
            )
        if comparison not in GuardComparison.values:
            problems.append(
                field_problem(f"{where}.comparison", f"one of {', '.join(GuardComparison.values)}")
            )
        if (
            isinstance(threshold, bool)
            or not isinstance(threshold, int | float)
            or not math.isfinite(threshold)
            or not -1e9 <= threshold <= 1e9
        ):
            problems.append(field_problem(f"{where}.threshold", "a finite number"))
        elif metric in RATE_METRICS and comparison == GuardComparison.ABOVE_STABLE_BY:
            # A difference of two shares: a negative one asks the candidate to beat stable.
            if not -1 <= threshold <= 1:
                problems.append(
                    field_problem(
                        f"{where}.threshold",
                        "a difference of shares, a fraction from -1 to 1 (0.02 is 2 pts)",
                    )
                )
        elif metric in RATE_METRICS and not 0 <= threshold <= 1:
            problems.append(
                field_problem(f"{where}.threshold", "a share, a fraction from 0 to 1 (0.02 is 2%)")
            )
        if (
            isinstance(samples, bool)
            or not isinstance(samples, int)
            or not 0 <= samples <= MAX_MIN_SAMPLES
        ):
            problems.append(field_problem(f"{where}.min_samples", "a whole number ≥ 0"))
        cleaned.append(
            {
                "kind": GuardKind.FIXED,
                "metric": metric,
                "comparison": comparison,
                "threshold": threshold,
                "min_samples": samples,
            }
        )
    if problems:
        raise ValidationFailed("The rollout guards are invalid.", details=problems)
    return cleaned


def _clean_bake(bake_minutes: object) -> dict[str, int]:
    if bake_minutes is None:  # as for the guards: null is the default
        bake_minutes = DEFAULT_BAKE_MINUTES
    if isinstance(bake_minutes, int) and not isinstance(bake_minutes, bool):
        bake_minutes = {str(stage): bake_minutes for stage in Rollout.STAGES}
    if isinstance(bake_minutes, dict):
        bake = {str(k): v for k, v in bake_minutes.items()}
        if set(bake) <= {str(s) for s in Rollout.STAGES} and all(
            isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_BAKE_MINUTES
            for v in bake.values()
        ):
            return {str(s): int(bake.get(str(s), 0)) for s in Rollout.STAGES}
    raise ValidationFailed(
        f"`bake_minutes` is minutes from 0 to {MAX_BAKE_MINUTES}, or one per stage: "
        '{"5": 10, "25": 20, "100": 30}.',
        details=[field_problem("bake_minutes", "minutes, or minutes per stage 5, 25, 100")],
    )


@transaction.atomic
def rollout_guards_set(
    *,
    actor: Actor,
    rollout: Rollout,
    guards: object = "default",
    bake_minutes: object = DEFAULT_BAKE_MINUTES,
    auto_advance: object = False,
    window_minutes: object = 10,
    min_samples: object = 50,
    min_devices: object = 0,
    min_events: object = 0,
    stage_limit_minutes: object = 0,
    max_extensions: object = 1,
    on_expiry: object = "rollback",
) -> RolloutGuardSet:
    """Guard an open rollout (replacing its guards, if any); the verdict starts afresh."""
    exposure = _clean_exposure(
        min_devices=min_devices,
        min_events=min_events,
        stage_limit_minutes=stage_limit_minutes,
        max_extensions=max_extensions,
        on_expiry=on_expiry,
    )
    if not isinstance(auto_advance, bool):
        raise ValidationFailed(
            "`auto_advance` is true or false.", details=[field_problem("auto_advance", "a boolean")]
        )
    if (
        isinstance(window_minutes, bool)
        or not isinstance(window_minutes, int)
        or not MIN_WINDOW_MINUTES <= window_minutes <= MAX_WINDOW_MINUTES
    ):
        raise ValidationFailed(
            f"`window_minutes` is {MIN_WINDOW_MINUTES} to {MAX_WINDOW_MINUTES}.",
            details=[
                field_problem("window_minutes", f"{MIN_WINDOW_MINUTES} to {MAX_WINDOW_MINUTES}")
            ],
        )
    cleaned = _clean_guards(guards, min_samples)
    bake = _clean_bake(bake_minutes)
    locked = Rollout.objects.select_for_update().filter(pk=rollout.pk).first()
    if locked is None or not locked.is_open:
        raise Conflict("Only an open rollout can be guarded.", code="rollout_not_open")
    guard_set, _ = RolloutGuardSet.objects.update_or_create(
        rollout=locked,
        defaults={
            "window_minutes": window_minutes,
            "bake_minutes": bake,
            "auto_advance": auto_advance,
            "verdict": RolloutGuardSet.Verdict.WATCHING,
            "verdict_reason": "",
            "stage_seen": locked.stage,
            "quiet_since": None,
            "evaluated_at": None,
            "extensions_used": 0,
            "sample_ratios": {},
            **exposure,
        },
    )
    guard_set.guards.all().delete()
    RolloutGuard.objects.bulk_create(RolloutGuard(guard_set=guard_set, **g) for g in cleaned)
    audit_record(
        actor=actor,
        action="rollout.guarded",
        fleet=locked.fleet,
        target=f"rollout {locked.pk}",
        summary=(
            f"Guarded rollout {locked.pk} with {len(cleaned)} guards, bake "
            f"{'/'.join(str(bake[str(s)]) for s in Rollout.STAGES)} min"
            f"{', auto-advance' if auto_advance else ''}"
        ),
        after={
            "guards": cleaned,
            "bake_minutes": bake,
            "auto_advance": auto_advance,
            "window_minutes": window_minutes,
            **exposure,
        },
    )
    return guard_set


def _whole(value: object, name: str, limit: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limit:
        raise ValidationFailed(
            f"`{name}` is a whole number from 0 to {limit:,}.",
            details=[field_problem(name, f"0 to {limit}")],
        )
    return value


def _clean_exposure(
    *,
    min_devices: object,
    min_events: object,
    stage_limit_minutes: object,
    max_extensions: object,
    on_expiry: object,
) -> dict[str, Any]:
    if on_expiry not in RolloutGuardSet.OnExpiry.values:
        raise ValidationFailed(
            "`on_expiry` is rollback or hold.",
            details=[field_problem("on_expiry", "rollback or hold")],
        )
    return {
        "min_devices": _whole(min_devices, "min_devices", MAX_EXPOSURE),
        "min_events": _whole(min_events, "min_events", MAX_EXPOSURE),
        "stage_limit_minutes": _whole(stage_limit_minutes, "stage_limit_minutes", MAX_BAKE_MINUTES),
        "max_extensions": _whole(max_extensions, "max_extensions", MAX_EXTENSIONS),
        "on_expiry": on_expiry,
    }


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
    with_latency = any(g.metric in LATENCY_METRICS for g in guards)
    candidate = figures_of(
        rows,
        start=start,
        end=now,
        where={"cohort": "candidate", "policy_version": rollout.candidate.number},
        with_latency=with_latency,
    )
    stable = figures_of(
        rows,
        start=start,
        end=now,
        where={"cohort": "stable", "policy_version": rollout.stable.number},
        with_latency=with_latency,
    )
    firing, insufficient = [], []
    for guard in guards:
        _judge_fixed(guard, candidate=candidate, stable=stable, budgets=budgets)
        if guard.state == "firing":
            firing.append(guard)
        elif guard.state == "insufficient":
            insufficient.append(guard)
    RolloutGuard.objects.bulk_update(
        guards,
        [
            "state",
            "candidate_value",
            "stable_value",
            "candidate_samples",
            "stable_samples",
            "message",
        ],
    )
    guard_set.evaluated_at = now
    event: AlertEvent | None = None
    if firing:
        reason = "Guard fired: " + "; ".join(g.message for g in firing)
        event = _rollback(guard_set, rollout, reason[:500], now)
    elif insufficient:
        guard_set.verdict = RolloutGuardSet.Verdict.INSUFFICIENT
        guard_set.verdict_reason = "; ".join(g.message for g in insufficient)[:500]
        guard_set.quiet_since = None
    else:
        guard_set.verdict = RolloutGuardSet.Verdict.QUIET
        if guard_set.quiet_since is None:
            guard_set.quiet_since = now
        bake = guard_set.bake_for(rollout.stage)
        quiet_for = now - guard_set.quiet_since
        guard_set.verdict_reason = (
            f"quiet for {int(quiet_for.total_seconds() // 60)} of {bake} min at {rollout.stage}%"
        )
        if (
            guard_set.auto_advance
            and rollout.state == Rollout.State.ACTIVE
            and quiet_for >= timedelta(minutes=bake)
        ):
            event = _advance(guard_set, rollout, bake, now)
    guard_set.save(update_fields=GUARD_SET_STATE)
    return event


GUARD_SET_STATE = (
    "verdict",
    "verdict_reason",
    "stage_seen",
    "quiet_since",
    "evaluated_at",
    "extensions_used",
    "sample_ratios",
)
GUARD_STATE = (
    "state",
    "candidate_value",
    "stable_value",
    "candidate_samples",
    "stable_samples",
    "message",
    "estimate",
    "lower",
    "upper",
    "scope",
    "series",
    "decide",
)
SEQUENTIAL_LABELS: Final = {**{m.value: m.label for m in Metric}, **QUANTILE_LABELS}


def _sequential_evaluate(
    guard_set: RolloutGuardSet, rows: list[RollupRow], budgets: dict[Any, int], now: datetime
) -> AlertEvent | None:
    """Judge a guard set with statistical guards: every interval since the stage began, the
    sample ratios, the exposure; then act on `sequential.stage_decide`."""
    rollout = guard_set.rollout
    stage_start = minute_floor(rollout.stage_changed_at)
    guards = list(guard_set.guards.all())
    with_latency = any(g.metric in LATENCY_METRICS for g in guards)
    candidate = cohort_figures(
        rows,
        start=stage_start,
        end=now,
        version=rollout.candidate.number or 0,
        cohort="candidate",
        with_latency=with_latency,
    )
    stable = cohort_figures(
        rows,
        start=stage_start,
        end=now,
        version=rollout.stable.number or 0,
        cohort="stable",
        with_latency=with_latency,
    )
    cells_planned = PolicyCell.objects.filter(version=rollout.candidate).count()
    breaches, unsettled = _judge_all(
        guards, guard_set, rows, (candidate, stable), budgets, now, cells_planned
    )
    RolloutGuard.objects.bulk_update(guards, GUARD_STATE)
    ratios = _sample_ratios(rollout, candidate, stable, now=now)
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
    return _apply_decision(guard_set, rollout, decision, now)


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


def _sample_ratios(
    rollout: Rollout, candidate: CohortFigures, stable: CohortFigures, *, now: datetime
) -> dict[str, RatioCheck]:
    """The sample ratio checks of the stage: devices seen in it (or within the presence
    window), by the version they acked."""
    since = min(rollout.stage_changed_at, now - SRM_GRACE)
    acked = dict(
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
    on_candidate = acked.get(rollout.candidate.number, 0)
    return cohort_sample_ratios(
        stage=rollout.candidate_share,
        candidate_devices=on_candidate,
        seen_devices=on_candidate + acked.get(rollout.stable.number, 0),
        candidate_events=candidate.total.events,
        stable_events=stable.total.events,
        stage_age=now - rollout.stage_changed_at,
    )


def _apply_decision(
    guard_set: RolloutGuardSet, rollout: Rollout, decision: StageDecision, now: datetime
) -> AlertEvent | None:
    """Act on the stage decision; the history entry of a rollback or an advance, if any."""
    guard_set.evaluated_at = now
    guard_set.extensions_used = decision.extensions_used
    event: AlertEvent | None = None
    before = guard_set.verdict
    if decision.action == "rollback":
        event = _rollback(guard_set, rollout, decision.reason[:500], now)
    elif decision.action == "advance":
        event = _advance(guard_set, rollout, guard_set.bake_for(rollout.stage), now)
        guard_set.extensions_used = 0
    else:
        guard_set.verdict = decision.verdict
        guard_set.verdict_reason = decision.reason[:500]
        guard_set.quiet_since = decision.quiet_since
        if guard_set.verdict != before and decision.verdict in ("srm", "extended"):
            # Into the history (not a notification): why the stage stopped moving.
            AlertEvent.objects.create(
                fleet_id=rollout.fleet_id,
                rollout=rollout,
                kind="held" if decision.verdict == "srm" else "extended",
                rule_name=f"guards of rollout #{rollout.pk}",
                state_before=str(rollout.stage),
                state_after=str(rollout.stage),
                message=decision.reason[:500],
                at=now,
            )
    guard_set.save(update_fields=GUARD_SET_STATE)
    return event


def _rollback(
    guard_set: RolloutGuardSet, rollout: Rollout, reason: str, now: datetime
) -> AlertEvent:
    before = rollout.stage
    rolled = rollout_services.rollout_rollback(actor=None, fleet=rollout.fleet, reason=reason)
    guard_set.verdict = RolloutGuardSet.Verdict.ROLLED_BACK
    guard_set.verdict_reason = reason
    logger.warning("rollout.guard_rolled_back fleet=%s rollout=%d", rollout.fleet.slug, rollout.pk)
    return AlertEvent.objects.create(
        fleet_id=rollout.fleet_id,
        rollout=rolled,
        kind="rolled_back",
        rule_name=f"guards of rollout #{rollout.pk}",
        state_before=str(before),
        state_after="0",
        message=f"Rolled v{rollout.candidate.number} back at {before}% to "
        f"v{rollout.stable.number}. {reason}"[:500],
        at=now,
    )


def _advance(guard_set: RolloutGuardSet, rollout: Rollout, bake: int, now: datetime) -> AlertEvent:
    before = rollout.stage
    if rollout.next_stage is None:
        rollout_services.rollout_complete(actor=None, fleet=rollout.fleet)
        guard_set.verdict = RolloutGuardSet.Verdict.FINISHED
        kind, text = "completed", f"v{rollout.candidate.number} is now stable"
    else:
        rollout_services.rollout_advance(
            actor=None, fleet=rollout.fleet, to_stage=rollout.next_stage
        )
        guard_set.quiet_since = None
        guard_set.stage_seen = rollout.next_stage
        guard_set.verdict = RolloutGuardSet.Verdict.WATCHING
        kind, text = "advanced", f"Advanced v{rollout.candidate.number} to {rollout.next_stage}%"
    message = f"{text}: guards quiet for {bake} min at {before}%"
    guard_set.verdict_reason = message
    rollout.refresh_from_db(fields=["stage", "state"])
    return AlertEvent.objects.create(
        fleet_id=rollout.fleet_id,
        rollout=rollout,
        kind=kind,
        rule_name=f"guards of rollout #{rollout.pk}",
        state_before=str(before),
        state_after=str(rollout.stage),
        message=message,
        at=now,
    )


def guard_input_defaults() -> dict[str, Any]:
    """The defaults of `rollout_guards_set`, for forms and the command."""
    return {
        "guards": [dict(g) for g in DEFAULT_GUARDS],
        "bake_minutes": 10,
        "auto_advance": False,
        "window_minutes": 10,
        "min_samples": 50,
        "metrics": {m.value: m.label for m in Metric if m.value in GUARD_METRICS},
    }


@transaction.atomic
def rollout_start_guarded(
    *, actor: Actor, fleet: Any, version: int, guard_options: dict[str, Any], holdback: int = 0
) -> Rollout:
    """Start a rollout and, when `guard_options` is not empty, guard it, all or nothing."""
    rollout = rollout_services.rollout_start(
        actor=actor, fleet=fleet, version=version, holdback=holdback
    )
    if guard_options:
        rollout_guards_set(actor=actor, rollout=rollout, **guard_options)
    return rollout
