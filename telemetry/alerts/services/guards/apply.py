"""Guards, applied: the writes a verdict leads to (hold, roll back, advance or complete).

Rollbacks and advances go through the rollout services (`routing_policies.services`),
audited as `system`; each leaves an entry in the alert history.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from routing_policies import services as rollout_services
from routing_policies.models import Rollout

from ...models import (
    AlertEvent,
    RolloutGuard,
    RolloutGuardSet,
)
from ...sequential import (
    StageDecision,
)

logger = logging.getLogger(__name__)

GUARD_SET_STATE = (
    "verdict",
    "verdict_reason",
    "stage_seen",
    "quiet_since",
    "evaluated_at",
    "extensions_used",
    "sample_ratios",
)


def apply_fixed_verdict(
    guard_set: RolloutGuardSet,
    rollout: Rollout,
    *,
    firing: list[RolloutGuard],
    insufficient: list[RolloutGuard],
    now: datetime,
) -> AlertEvent | None:
    """Act on a fixed-limit guard set's judgement: roll back on a firing guard, stop the bake
    clock on too few events, else advance once quiet for the stage's bake time."""
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


def apply_decision(
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


def _advance(
    guard_set: RolloutGuardSet, rollout: Rollout, bake: int, now: datetime
) -> AlertEvent | None:
    before = rollout.stage
    if rollout.next_stage is None and rollout.scoped:
        # Completing a rollout scoped to a segment makes its candidate stable for the whole
        # fleet: a confirmed step (`fleet_wide`), never the guards'. They hold it at 100% of
        # the segment, still watching.
        guard_set.verdict = RolloutGuardSet.Verdict.QUIET
        guard_set.verdict_reason = (
            f"quiet for {bake} min at 100% of segment {rollout.segment_name}; completing it is "
            "fleet-wide, confirmed by whoever completes it"
        )
        return None
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
