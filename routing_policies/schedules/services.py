"""The writes of scheduled changes: schedule, edit, cancel, and run what is due.

Each run is one transaction: the schedule's row is locked (skipping a row another runner
holds), checked to be pending and due, the change carried out through its normal service
(as the person who scheduled it) and the schedule marked done, or skipped with the reason
its preconditions failed. The push of a change is sent after that commit, as always.
"""

import logging
import secrets
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from controlplane.exceptions import ApplicationError, Conflict, NotFound, ValidationFailed

from ..extensions import rollout_guard_status, rollout_start_guarded
from ..policies.audit import Actor, actor_name, actor_user, audit_of
from ..policies.models import Fleet, PolicyVersion
from ..policies.services import policy_version_publish
from ..reviews.gate import fleet_freeze_open
from ..rollouts.models import Rollout
from ..rollouts.selectors import open_rollout
from ..rollouts.services import cloud_pressure_set, fleet_switch_version, rollout_advance
from .models import ScheduledChange
from .times import describe

logger = logging.getLogger(__name__)

MAX_PENDING_PER_FLEET = 50
Kind = ScheduledChange.Kind


def _problem(field: str, message: str) -> ValidationFailed:
    return ValidationFailed(f"{field}: {message}.", details=[{"field": field, "message": message}])


def _params(fleet: Fleet, kind: str, params: dict[str, Any]) -> dict[str, Any]:
    """The parameters of `kind` (as its input serializer typed them) as stored, checked against
    the fleet now (they are checked again at run time)."""
    if kind == Kind.PUBLISH:
        draft = PolicyVersion.objects.filter(fleet=fleet, published_at__isnull=True).first()
        if draft is None:
            raise Conflict(f"Fleet {fleet.slug!r} has no draft to publish.", code="no_draft")
        return {"revision": params.get("revision", draft.revision), "note": params["note"].strip()}
    if kind in (Kind.ROLLOUT_START, Kind.SWITCH):
        version = params["version"]
        if not PolicyVersion.objects.filter(fleet=fleet, number=version).exists():
            raise NotFound(f"Fleet {fleet.slug!r} has no published version {version}.")
        holdback = params.get("holdback", 0)
        if kind == Kind.ROLLOUT_START and holdback:
            # The share kept on stable at 100% until completion (docs/PROTOCOL.md, "Holdback").
            return {"version": version, "holdback": holdback}
        return {"version": version}
    if kind == Kind.ROLLOUT_ADVANCE:
        healthy = params.get("require_healthy_guards", False)
        return {"to_stage": params["to_stage"], "require_healthy_guards": healthy}
    return {"theta_offset": float(params["theta_offset"]), "ttl_s": params["ttl_s"]}


def _when(run_at: datetime) -> datetime:
    if run_at < timezone.now() - timedelta(minutes=1):
        # A conflict with the clock, not a malformed time: the same body was fine a minute ago.
        raise Conflict(
            "That time has passed: schedule a change for the future.",
            code="run_at_past",
            details=[{"field": "run_at", "message": "in the past"}],
        )
    return run_at


def _audit(actor: Actor, schedule: ScheduledChange, action: str, summary: str) -> None:
    audit_of(
        "scheduled_change",
        schedule.pk,
        action,
        actor=actor,
        fleet=schedule.fleet,
        summary=summary,
        after={
            "kind": schedule.kind,
            "run_at": schedule.run_at.isoformat(),
            "params": schedule.params,
            "state": schedule.state,
        },
    )


@transaction.atomic
def scheduled_change_create(
    *,
    actor: Actor,
    fleet: Fleet,
    kind: str,
    run_at: datetime,
    params: dict[str, Any],
    time_zone: str = "UTC",
    plan: str = "",
) -> ScheduledChange:
    """Schedule one change of the fleet for `run_at` (aware; stored in UTC); `params` are the
    kind's own (`version`, `note`, …, as its input serializer in `schemas` takes them)."""
    fleet = Fleet.objects.select_for_update().get(pk=fleet.pk)
    when = _when(run_at)
    checked = _params(fleet, kind, params)
    pending = ScheduledChange.objects.filter(fleet=fleet, state=ScheduledChange.State.PENDING)
    if pending.count() >= MAX_PENDING_PER_FLEET:
        raise Conflict(
            f"A fleet has at most {MAX_PENDING_PER_FLEET} pending scheduled changes.",
            code="too_many_schedules",
        )
    schedule = ScheduledChange.objects.create(
        fleet=fleet,
        kind=kind,
        run_at=when,
        time_zone=time_zone,
        params=checked,
        plan=plan,
        created_by=actor_user(actor),
        created_by_name=actor_name(actor),
    )
    _audit(actor, schedule, "created", f"Scheduled {describe(schedule)}")
    logger.info("scheduled_change.created fleet=%s schedule=%d", fleet.slug, schedule.pk)
    return schedule


@transaction.atomic
def stage_plan_create(
    *,
    actor: Actor,
    fleet: Fleet,
    version: int,
    steps: list[dict[str, Any]],
    time_zone: str = "UTC",
    holdback: int = 0,
) -> list[ScheduledChange]:
    """A rollout of `version` in timed steps: the first starts it (5%, holding `holdback`
    percent back at 100%), each later one advances to its stage, optionally only if the guards
    are healthy then."""
    if not steps or len(steps) > len(Rollout.STAGES):
        raise _problem("steps", f"1 to {len(Rollout.STAGES)} steps")
    plan = secrets.token_hex(6)
    made: list[ScheduledChange] = []
    for index, step in enumerate(steps):
        if index == 0 and step.get("to_stage", 5) != Rollout.STAGES[0]:
            raise _problem("steps[0].to_stage", "5: the first step starts the rollout")
        if index and (step.get("run_at") is None or made[-1].run_at >= step["run_at"]):
            raise Conflict(
                "Each step of a stage plan comes after the one before it.",
                code="plan_out_of_order",
                details=[{"field": f"steps[{index}].run_at", "message": "after the step before"}],
            )
        start = {"version": version, "holdback": holdback}
        healthy = step.get("require_healthy_guards", False)
        advance = {"to_stage": step.get("to_stage"), "require_healthy_guards": healthy}
        made.append(
            scheduled_change_create(
                actor=actor,
                fleet=fleet,
                kind=Kind.ROLLOUT_ADVANCE if index else Kind.ROLLOUT_START,
                run_at=step["run_at"],
                params=advance if index else start,
                time_zone=time_zone,
                plan=plan,
            )
        )
    return made


def _lock_pending(fleet: Fleet, schedule_id: int) -> ScheduledChange:
    # Waits for a runner holding the row: once it commits, the schedule is no longer pending.
    schedule = (
        ScheduledChange.objects.select_for_update()
        .select_related("fleet")
        .filter(fleet=fleet, pk=schedule_id)
        .first()
    )
    if schedule is None:
        raise NotFound(f"Fleet {fleet.slug!r} has no scheduled change {schedule_id}.")
    if schedule.state != ScheduledChange.State.PENDING:
        raise Conflict(
            f"Scheduled change {schedule.pk} is {schedule.state}: it can no longer change.",
            code="schedule_not_pending",
        )
    return schedule


@transaction.atomic
def scheduled_change_update(
    *,
    actor: Actor,
    fleet: Fleet,
    schedule_id: int,
    run_at: datetime,
    time_zone: str | None = None,
) -> ScheduledChange:
    """Move a pending change to another time (shown in `time_zone` when given)."""
    schedule = _lock_pending(fleet, schedule_id)
    before = describe(schedule)
    schedule.run_at = _when(run_at)
    if time_zone is not None:
        schedule.time_zone = time_zone
    schedule.save(update_fields=["run_at", "time_zone"])
    _audit(actor, schedule, "updated", f"Rescheduled {before} → {describe(schedule)}")
    return schedule


@transaction.atomic
def scheduled_change_cancel(*, actor: Actor, fleet: Fleet, schedule_id: int) -> ScheduledChange:
    """Cancel a pending change (a repeat is a no-op)."""
    found = ScheduledChange.objects.filter(fleet=fleet, pk=schedule_id).first()
    if found is not None and found.state == ScheduledChange.State.CANCELLED:
        return found
    schedule = _lock_pending(fleet, schedule_id)
    schedule.state = ScheduledChange.State.CANCELLED
    schedule.outcome = f"cancelled by {actor_name(actor)}"
    schedule.save(update_fields=["state", "outcome"])
    _audit(actor, schedule, "cancelled", f"Cancelled {describe(schedule)}")
    return schedule


def _precondition(schedule: ScheduledChange) -> str | None:
    """Why the change must not run now, beyond what its own service refuses."""
    fleet = schedule.fleet
    if schedule.kind == Kind.ROLLOUT_START:
        current = open_rollout(fleet.pk)
        if current is not None:
            return f"rollout {current.pk} of v{current.candidate.number} is still open"
    if schedule.kind == Kind.ROLLOUT_ADVANCE and schedule.params.get("require_healthy_guards"):
        current = open_rollout(fleet.pk)
        if current is None:
            return "no rollout is open"
        status = rollout_guard_status(rollout_id=current.pk)
        if status is None:
            return "the rollout has no guards to say it is healthy"
        if status["verdict"] != "quiet":
            return f"the guards are not healthy: {status['verdict_label']}"
    return None


def _carry_out(schedule: ScheduledChange) -> str:
    actor, fleet, params = schedule.created_by, schedule.fleet, schedule.params
    if schedule.kind == Kind.PUBLISH:
        version = policy_version_publish(
            actor=actor, fleet=fleet, revision=params["revision"], note=params["note"]
        )
        return f"published v{version.number}"
    if schedule.kind == Kind.ROLLOUT_START:
        rollout = rollout_start_guarded(
            actor=actor,
            fleet=fleet,
            version=params["version"],
            guard_options={},
            holdback=params.get("holdback", 0),
        )
        return f"started rollout {rollout.pk} of v{params['version']} at {rollout.stage}%"
    if schedule.kind == Kind.ROLLOUT_ADVANCE:
        rollout = rollout_advance(actor=actor, fleet=fleet, to_stage=params["to_stage"])
        return f"rollout {rollout.pk} at {rollout.stage}%"
    if schedule.kind == Kind.SWITCH:
        fleet_switch_version(actor=actor, fleet=fleet, version=params["version"])
        return f"switched the fleet to v{params['version']}"
    cloud_pressure_set(
        actor=actor, fleet=fleet, theta_offset=params["theta_offset"], ttl_s=params["ttl_s"]
    )
    return f"cloud pressure θ{params['theta_offset']:+.2f} for {params['ttl_s']} s"


@transaction.atomic
def scheduled_change_run(
    *, schedule_id: int, now: datetime | None = None
) -> ScheduledChange | None:
    """Carry out one due schedule exactly once; None when another runner holds it, it is no
    longer pending or not yet due, or its fleet is frozen (it then waits, still pending)."""
    schedule = (
        ScheduledChange.objects.select_for_update(skip_locked=True, of=("self",))
        .select_related("fleet", "created_by")
        .filter(
            pk=schedule_id,
            state=ScheduledChange.State.PENDING,
            run_at__lte=now or timezone.now(),
        )
        .first()
    )
    if schedule is None:
        return None
    if fleet_freeze_open(fleet_id=schedule.fleet_id) is not None:
        return None  # a frozen fleet's changes wait for the freeze's release (issue #17)
    why = _precondition(schedule)
    if why is None:
        try:
            with transaction.atomic():
                outcome = _carry_out(schedule)
        except ApplicationError as exc:
            why = exc.message
    schedule.state = ScheduledChange.State.DONE if why is None else ScheduledChange.State.SKIPPED
    schedule.outcome = (outcome if why is None else f"did not run: {why}")[:500]
    schedule.ran_at = timezone.now()
    schedule.save(update_fields=["state", "outcome", "ran_at"])
    _audit(
        None,
        schedule,
        "ran" if why is None else "skipped",
        f"{describe(schedule)}: {schedule.outcome}",
    )
    logger.info(
        "scheduled_change.%s fleet=%s schedule=%d",
        schedule.state,
        schedule.fleet.slug,
        schedule.pk,
    )
    return schedule


def scheduled_changes_run_due(*, now: datetime | None = None) -> int:
    """Run every due schedule, oldest first (each in its own transaction); how many ran."""
    moment = now or timezone.now()
    due = list(
        ScheduledChange.objects.filter(state=ScheduledChange.State.PENDING, run_at__lte=moment)
        .order_by("run_at", "id")
        .values_list("pk", flat=True)[:200]
    )
    return sum(
        1 for schedule_id in due if scheduled_change_run(schedule_id=schedule_id, now=moment)
    )
