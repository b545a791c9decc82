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

from controlplane.exceptions import Conflict, ValidationFailed
from routing_policies import services as rollout_services
from routing_policies.models import Rollout
from routing_policies.policies.audit import Actor, audit_record

from ..judging import (
    GUARD_METRICS,
    LATENCY_METRICS,
    RATE_METRICS,
    RollupRow,
    figures_of,
    judge_guard,
)
from ..models import (
    AlertEvent,
    GuardComparison,
    Metric,
    RolloutGuard,
    RolloutGuardSet,
)
from ..selectors import minute_floor, window_bounds
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


DEFAULT_BAKE_MINUTES: Final = 10
MAX_BAKE_MINUTES: Final = 7 * 24 * 60  # a week at one stage


def _clean_guards(guards: object, min_samples: object) -> list[dict[str, Any]]:
    if guards is None or guards == "default":
        guards = [dict(g) for g in DEFAULT_GUARDS]
    if not isinstance(guards, list) or not guards or len(guards) > MAX_GUARDS:
        raise ValidationFailed(
            f'`guards` is a list of 1 to {MAX_GUARDS} guards or "default".',
            details=[field_problem("guards", "a list")],
        )
    problems: list[dict[str, str]] = []
    cleaned = []
    for index, guard in enumerate(guards):
        where = f"guards[{index}]"
        if not isinstance(guard, dict):
            problems.append(field_problem(where, "an object with metric, comparison, threshold"))
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
        elif metric in RATE_METRICS and not -1 <= threshold <= 1:
            problems.append(
                field_problem(f"{where}.threshold", "a fraction from 0 to 1 (0.02 is 2 pts)")
            )
        if isinstance(samples, bool) or not isinstance(samples, int) or not 0 <= samples <= 10**7:
            problems.append(field_problem(f"{where}.min_samples", "a whole number ≥ 0"))
        cleaned.append(
            {
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
) -> RolloutGuardSet:
    """Guard an open rollout (replacing its guards, if any); the verdict starts afresh."""
    if not isinstance(auto_advance, bool):
        raise ValidationFailed(
            "`auto_advance` is true or false.", details=[field_problem("auto_advance", "a boolean")]
        )
    if (
        isinstance(window_minutes, bool)
        or not isinstance(window_minutes, int)
        or not 1 <= window_minutes <= 360
    ):
        raise ValidationFailed(
            "`window_minutes` is 1 to 360.", details=[field_problem("window_minutes", "1 to 360")]
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
        },
    )
    return guard_set


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
    guard_set.save(
        update_fields=["verdict", "verdict_reason", "stage_seen", "quiet_since", "evaluated_at"]
    )
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
    *, actor: Actor, fleet: Any, version: int, guard_options: dict[str, Any]
) -> Rollout:
    """Start a rollout and, when `guard_options` is not empty, guard it, all or nothing."""
    rollout = rollout_services.rollout_start(actor=actor, fleet=fleet, version=version)
    if guard_options:
        rollout_guards_set(actor=actor, rollout=rollout, **guard_options)
    return rollout
