"""The autopilot's writes: the objective, pause and resume, and the cycle, which acts only
through the services a person uses (calibration, the draft edit, change requests, publish,
guarded rollouts), so reviews, freezes and guards hold for it as for anyone.

A cycle: calibrate the cells in scope on the last window (lab/calibration); propose per cell
(core.propose); when a θ moves, write the draft (calibration_apply); where the fleet's
governance asks for an approval, open a change request and wait for a publisher, else
publish; start a rollout guarded by the quality preset with a holdback; when it completed and
`measure_minutes` passed, compare predicted with realized per cell (core.misses: the new
version's events from its 100% stage on, beside the holdback, to then). A miss, a
guard's rollback, a freeze, a rejected request stop the autopilot: the objective's state says
why (the page), `autopilot.stopped` is audited and the fleet's webhooks are told; it waits for a
person to resume it. Every action is audited as `autopilot.*` by the user `autopilot`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, time, timedelta
from typing import Any, Final, TypeVar

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from controlplane.exceptions import ApplicationError, Conflict
from lab.calibration.selectors import calibration_compute
from lab.calibration.services import calibration_apply
from lab.calibration.targets import Target
from routing_policies.cell_schema import CellKey, cell_key_label
from routing_policies.extensions import rollout_start_guarded
from routing_policies.models import ChangeRequest, Fleet, PolicyVersion, Rollout
from routing_policies.pricing import data_span_hours, has_rate
from routing_policies.selectors import (
    draft_get,
    fleet_freeze_open,
    open_rollout,
    review_settings_of,
    review_status,
    table_cells,
    version_table,
)
from routing_policies.services import (
    Actor,
    audit_record,
    change_request_open,
    change_request_publish,
    policy_draft_create,
    policy_version_publish,
    rollout_complete,
)
from telemetry.alerts.services.webhooks import governance_deliveries_create

from .core import CurvePoint, Limits, Proposal, Tolerance, curve_of, misses, propose
from .models import AutopilotCycle, AutopilotObjective
from .schedule import in_quiet_period, next_run
from .selectors import (
    cells_in_scope,
    objective_out,
    quality_readiness,
    realized_of_cells,
    segment_rows,
    stable_version,
)

__all__ = [
    "AUTOPILOT_USERNAME",
    "autopilot_actor",
    "autopilot_pause",
    "autopilot_resume",
    "autopilot_tick",
    "objective_set",
]

logger = logging.getLogger(__name__)

AUTOPILOT_USERNAME: Final = "autopilot"
GUARD_PRESET: Final = "quality"
# A cell with fewer of the candidate's events than this after the measuring window is not
# judged (said in its row), rather than judged on noise.
MIN_REALIZED_EVENTS: Final = 50

_T = TypeVar("_T")
State = AutopilotObjective.State
CycleState = AutopilotCycle.State


def autopilot_actor() -> Any:
    """The user the autopilot acts as: a person other than any publisher, so four-eyes holds
    (it can open a change request, never approve one); it cannot sign in."""
    user, created = get_user_model().objects.get_or_create(username=AUTOPILOT_USERNAME)
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    return user


_ITSELF: Final = object()  # an action the autopilot takes on its own (not a person's)


def _kept(
    fleet: Fleet,
    cycle: Any,
    field: str,
    value: Any,
    action: str,
    text: str,
    *,
    moved: tuple[str, str, datetime] | None = None,
    **audited: Any,
) -> None:
    """Keep a step's outcome on the cycle (`field`), moving it to a state where `moved`
    (state, reason, now) says so, and audit it as `autopilot.<action>`."""
    setattr(cycle, field, value)
    if moved is None:
        cycle.save(update_fields=[field])
    else:
        _finish(cycle, *moved)
    _audit(fleet, action, f"Cycle {cycle.number} {text}", cycle=cycle.number, **audited)


def _attempt(
    objective: AutopilotObjective,
    cycle: AutopilotCycle,
    now: datetime,
    failed: str,
    act: Callable[[], _T],
) -> _T | None:
    """One step's service calls in their own transaction; a refusal stops the autopilot,
    saying `failed` and why (then None)."""
    try:
        with transaction.atomic():
            return act()
    except ApplicationError as exc:
        _stop(objective, cycle, f"{failed}: {exc.message}", now)
        return None


def _audit(
    fleet: Fleet,
    action: str,
    summary: str,
    *,
    actor: Any = _ITSELF,
    before: dict[str, Any] | None = None,
    **after: Any,
) -> None:
    """Audit `autopilot.<action>`: by the autopilot itself, or by the person (or the shell's
    `system`, actor None) who set, paused or resumed it."""
    audit_record(
        actor=autopilot_actor() if actor is _ITSELF else actor,
        action=f"autopilot.{action}",
        fleet=fleet,
        target=f"autopilot of {fleet.slug}",
        summary=summary,
        before=before,
        after=after or None,
    )


def _lock(fleet: Fleet) -> AutopilotObjective:
    objective = AutopilotObjective.objects.select_for_update().filter(fleet=fleet).first()
    if objective is None:
        objective = AutopilotObjective.objects.create(fleet=fleet)
        objective = AutopilotObjective.objects.select_for_update().get(pk=objective.pk)
    return objective


def _lock_on(fleet: Fleet) -> AutopilotObjective:
    """The objective locked, refused when the autopilot is off (pause and resume need it on)."""
    objective = _lock(fleet)
    if objective.state == State.OFF:
        raise Conflict(
            "The autopilot is off: turn it on first.",
            code="autopilot_off",
            details=[{"field": "state", "message": "off"}],
        )
    return objective


def _schedule(objective: AutopilotObjective, now: datetime) -> None:
    """Set the objective's next run after `now` by its cadence and quiet periods (unsaved)."""
    objective.next_run_at = next_run(
        after=now,
        run_at=objective.run_at,
        time_zone=objective.time_zone,
        quiet_periods=objective.quiet_periods,
    )


def _refuse_without_quality_data(objective: AutopilotObjective, now: datetime) -> None:
    """Enabling is refused when a cell in scope lacks the sample its bound needs."""
    version = stable_version(fleet=objective.fleet)
    if version is None:
        raise Conflict(
            "The fleet has no stable version for the autopilot to start from.",
            code="no_stable_version",
            details=[{"field": "state", "message": "no stable version"}],
        )
    readiness = quality_readiness(objective=objective, version=version, end=now)
    if not readiness:
        raise Conflict(
            "No cell in the objective's scope has a θ the autopilot could move.",
            code="nothing_in_scope",
            details=[{"field": "cells", "message": "no calibratable cell in scope"}],
        )
    short = [cell for cell in readiness if not cell.enough]
    if short:
        raise Conflict(
            "Too little quality data for the bound: "
            + "; ".join(c.message(window_hours=objective.window_hours) for c in short),
            code="too_little_quality_data",
            details=[
                {
                    "field": "cells",
                    "cell": cell_key_label(c.cell),
                    "reports": c.reports,
                    "needed": c.needed,
                    "message": c.message(window_hours=objective.window_hours),
                }
                for c in short
            ],
        )


@transaction.atomic
def objective_set(
    *, actor: Actor, fleet: Fleet, values: Mapping[str, Any], now: datetime | None = None
) -> AutopilotObjective:
    """Set the fleet's objective (checked values, as the input serializer gives them); turning
    it on (`enabled`) is refused when a cell in scope has too little quality data for the
    bound, saying how much more it needs."""
    now = now or timezone.now()
    _cells_known(fleet, values)
    if values.get("segment"):
        segment_rows(fleet=fleet, segment=values["segment"])  # 400 naming `segment`
    objective = _lock(fleet)
    before = _objective_fields(objective)
    enabled = values.get("enabled")
    for name, value in values.items():
        if name == "run_at":
            objective.run_at = time.fromisoformat(value)
        elif name == "segment":
            objective.segment = value or ""
        elif name != "enabled":
            setattr(objective, name, value)
    if enabled is True and objective.state == State.OFF:
        _refuse_without_quality_data(objective, now)
        objective.state = State.ACTIVE
        objective.state_reason = ""
    elif enabled is False:
        objective.state = State.OFF
        objective.state_reason = ""
    _schedule(objective, now)
    objective.save()
    _audit(
        fleet,
        "objective_set",
        f"Autopilot objective set ({objective.state})",
        actor=actor,
        before=before,
        **_objective_fields(objective),
    )
    return objective


def _cells_known(fleet: Fleet, values: Mapping[str, Any]) -> None:
    """A cell the fleet's stable version lacks is refused naming it; nothing kept. A 409: the
    label is well formed, it names no cell of the fleet as it is now (its table may gain it)."""
    version = stable_version(fleet=fleet)
    known = (
        {cell_key_label(key) for key in table_cells(version_table(version=version))}
        if version is not None
        else set()
    )
    for name in ("cells", "excluded_cells"):
        for index, label in enumerate(values.get(name) or []):
            if label not in known:
                raise Conflict(
                    f"The fleet's stable version has no cell {label}.",
                    code="no_such_cell",
                    details=[{"field": f"{name}[{index}]", "message": "no such cell"}],
                )


def _objective_fields(objective: AutopilotObjective) -> dict[str, Any]:
    return {"state": objective.state, **objective_out(objective)}


@transaction.atomic
def autopilot_pause(*, actor: Actor, fleet: Fleet) -> AutopilotObjective:
    """Pause: no cycle starts or moves on until resumed (an open rollout stays guarded)."""
    objective = _lock_on(fleet)
    if objective.state == State.PAUSED:
        return objective
    objective.state = State.PAUSED
    objective.state_reason = "paused by a person"
    objective.save(update_fields=["state", "state_reason", "updated_at"])
    _audit(fleet, "paused", "Autopilot paused", actor=actor)
    return objective


@transaction.atomic
def autopilot_resume(
    *, actor: Actor, fleet: Fleet, now: datetime | None = None
) -> AutopilotObjective:
    """Resume after a pause or a stop (the person has read why it stopped)."""
    now = now or timezone.now()
    objective = _lock_on(fleet)
    if objective.state == State.ACTIVE:
        return objective
    was, reason = objective.state, objective.state_reason
    objective.state = State.ACTIVE
    objective.state_reason = ""
    _schedule(objective, now)
    objective.save(update_fields=["state", "state_reason", "next_run_at", "updated_at"])
    _audit(fleet, "resumed", f"Autopilot resumed (was {was}: {reason})", actor=actor)
    return objective


# --- the cycle -------------------------------------------------------------------------------


def autopilot_tick(
    *, fleet: Fleet, now: datetime | None = None, force: bool = False
) -> AutopilotCycle | None:
    """Move the fleet's open cycle on, or start one when it is due (`force`: now, as
    `manage.py autopilot run` does, still outside quiet periods). The cycle touched, if any."""
    now = now or timezone.now()
    with transaction.atomic():
        objective = _lock(fleet)
        if objective.state != State.ACTIVE:
            return None
        cycle = (
            AutopilotCycle.objects.select_for_update()
            .filter(fleet=fleet, state__in=AutopilotCycle.OPEN_STATES)
            .first()
        )
        if cycle is not None:
            _advance(objective, cycle, now)
            return cycle
        due = objective.next_run_at is None or objective.next_run_at <= now
        if not (due or force):
            return None
        quiet = in_quiet_period(
            now, time_zone=objective.time_zone, quiet_periods=objective.quiet_periods
        )
        if quiet is not None:
            if not force:
                _schedule(objective, now)
                objective.save(update_fields=["next_run_at", "updated_at"])
            raise Conflict(
                f"Inside the quiet period {quiet['from']}–{quiet['to']} ({objective.time_zone}).",
                code="quiet_period",
                details=[{"field": "quiet_periods", "message": "now is inside one"}],
            )
        _schedule(objective, now)
        objective.save(update_fields=["next_run_at", "updated_at"])
        return _start(objective, now)


def _new_cycle(objective: AutopilotObjective, now: datetime, **fields: Any) -> AutopilotCycle:
    last = AutopilotCycle.objects.filter(fleet=objective.fleet).order_by("-number").first()
    return AutopilotCycle.objects.create(
        fleet=objective.fleet,
        number=(last.number + 1) if last else 1,
        segment=objective.segment,
        window_start=now - timedelta(hours=objective.window_hours),
        window_end=now,
        **fields,
    )


def _finish(cycle: AutopilotCycle, state: str, reason: str, now: datetime) -> None:
    cycle.state = state
    cycle.reason = reason[:1000]
    if state not in AutopilotCycle.OPEN_STATES:
        cycle.finished_at = now
    cycle.save()


def _stop(
    objective: AutopilotObjective, cycle: AutopilotCycle | None, reason: str, now: datetime
) -> None:
    """Stop the autopilot: the page says why, the audit log and the fleet's webhooks too; it
    waits for a person to resume it."""
    fleet = objective.fleet
    objective.state = State.STOPPED
    objective.state_reason = reason[:500]
    objective.save(update_fields=["state", "state_reason", "updated_at"])
    if cycle is not None:
        _finish(cycle, CycleState.STOPPED, reason, now)
    _audit(
        fleet,
        "stopped",
        f"Autopilot stopped: {reason}",
        cycle=cycle.number if cycle else None,
        reason=reason,
    )
    governance_deliveries_create(
        fleet.pk,
        {
            "kind": "autopilot.stopped",
            "fleet": fleet.slug,
            "message": f"The autopilot stopped and waits for a person: {reason}",
            "cycle": cycle.number if cycle else None,
            "at": now.isoformat(),
        },
    )
    logger.warning("autopilot.stopped fleet=%s reason=%s", fleet.slug, reason)


def _limits(objective: AutopilotObjective, budget_ms: float) -> Limits:
    return Limits(
        quality_floor=objective.quality_floor,
        delta=objective.delta,
        max_step=objective.max_step,
        margin=objective.margin,
        hysteresis=objective.quality_resolution,
        p95_within_budget=objective.p95_within_budget,
        budget_ms=budget_ms,
    )


def _cell_row(key: CellKey, proposal: Proposal, budget_ms: float, events: int) -> dict[str, Any]:
    return {
        "cell": cell_key_label(key),
        "threshold_from": proposal.threshold_from,
        "threshold_to": proposal.threshold_to,
        "reason": proposal.reason,
        "events": events,
        "budget_ms": budget_ms,
        "current": proposal.current.as_dict(),
        "predicted": proposal.predicted.as_dict() if proposal.predicted else None,
        "quality_low": proposal.quality_low,
        "gain_low": proposal.gain_low,
        "realized": None,
        "misses": [],
    }


def _start(objective: AutopilotObjective, now: datetime) -> AutopilotCycle:
    """Start a cycle: the checks, the calibration, the proposal; a draft and onwards when a
    θ moves."""
    fleet = objective.fleet
    freeze = fleet_freeze_open(fleet_id=fleet.pk)
    if freeze is not None:
        cycle = _new_cycle(objective, now, state=CycleState.STOPPED)
        _stop(objective, cycle, f"the fleet is frozen ({freeze.reason})", now)
        return cycle
    stable = stable_version(fleet=fleet)
    busy = (
        "the fleet has no stable version"
        if stable is None
        else "a rollout is in progress"
        if open_rollout(fleet.pk) is not None
        else "a draft is open (the autopilot never edits a person's draft)"
        if draft_get(fleet=fleet) is not None
        else ""
    )
    if busy or stable is None:
        cycle = _new_cycle(objective, now, state=CycleState.NO_CHANGE, reason=f"skipped: {busy}")
        _audit(fleet, "cycle_skipped", f"Cycle {cycle.number} skipped: {busy}", cycle=cycle.number)
        return cycle
    keys = cells_in_scope(objective, stable)
    try:
        with transaction.atomic():
            calibration = calibration_compute(
                fleet=fleet,
                target=Target(kind="quality", value=objective.quality_floor),
                cells=keys,
                hours=objective.window_hours,
                version=stable.number,
                end=now,
                segment=objective.segment or None,
            )
    except ApplicationError as exc:
        cycle = _new_cycle(
            objective,
            now,
            state=CycleState.NO_CHANGE,
            base_version=stable.number,
            reason=f"not calibrated: {exc.message}",
        )
        _audit(fleet, "cycle_no_change", f"Cycle {cycle.number}: {exc.message}", cycle=cycle.number)
        return cycle
    rate = has_rate(data_span_hours(calibration.span.first, calibration.span.last))
    rows: list[dict[str, Any]] = []
    moves: list[tuple[CellKey, float]] = []
    for cell in calibration.cells:
        if cell.result is None:
            continue
        proposal = propose(
            curve=curve_of(cell.result, cost_per_day=rate),
            current_threshold=cell.current_threshold,
            events=cell.result.events,
            limits=_limits(objective, cell.latency_budget_ms),
        )
        rows.append(_cell_row(cell.key, proposal, cell.latency_budget_ms, cell.result.events))
        if proposal.threshold_to is not None:
            moves.append((cell.key, proposal.threshold_to))
    moves = _within_cost_ceiling(objective, rows, moves)
    cycle = _new_cycle(
        objective, now, state=CycleState.NO_CHANGE, base_version=stable.number, cells=rows
    )
    if not moves:
        _finish(cycle, CycleState.NO_CHANGE, "no change worth making", now)
        _audit(
            fleet,
            "cycle_no_change",
            f"Cycle {cycle.number}: no change worth making",
            cycle=cycle.number,
        )
        return cycle
    return _propose_draft(objective, cycle, moves, now)


def _within_cost_ceiling(
    objective: AutopilotObjective, rows: list[dict[str, Any]], moves: list[tuple[CellKey, float]]
) -> list[tuple[CellKey, float]]:
    """With a fleet-wide ceiling: when the cells' predicted cost per day is over it, keep only
    the moves that do not raise a cell's cost (said in the cell's row)."""
    ceiling = objective.cost_ceiling_per_day
    if ceiling is None:
        return moves
    total = 0.0
    for row in rows:
        point = row["predicted"] if row["threshold_to"] is not None else row["current"]
        total += (point or {}).get("cost_per_day") or 0.0
    if total <= ceiling:
        return moves
    kept = []
    for key, theta in moves:
        row = next(r for r in rows if r["cell"] == cell_key_label(key))
        now_cost = row["current"].get("cost_per_day") or 0.0
        new_cost = (row["predicted"] or {}).get("cost_per_day") or 0.0
        if new_cost <= now_cost:
            kept.append((key, theta))
        else:
            row["threshold_to"] = None
            row["reason"] += (
                f"; held: the cells' cost {total:.2f}/day is over the {ceiling:.2f} ceiling"
            )
    return kept


def _propose_draft(
    objective: AutopilotObjective,
    cycle: AutopilotCycle,
    moves: Sequence[tuple[CellKey, float]],
    now: datetime,
) -> AutopilotCycle:
    """Write the draft through the lab's calibration apply, then publish or ask for review."""
    fleet = objective.fleet
    bot = autopilot_actor()
    summary = _in_segment(cycle) + ", ".join(
        f"{cell_key_label(key)} θ {row['threshold_from']:.3f}→{theta:.3f}"
        for key, theta in moves
        for row in cycle.cells
        if row["cell"] == cell_key_label(key)
    )

    def write() -> PolicyVersion:
        # With a segment, the θs go into the draft's override for it (the base cells kept).
        draft = policy_draft_create(actor=bot, fleet=fleet, from_number=cycle.base_version)
        return calibration_apply(
            actor=bot,
            fleet=fleet,
            revision=draft.revision,
            thresholds=list(moves),
            segment=cycle.segment or None,
        )[0]

    draft = _attempt(objective, cycle, now, "could not write the draft", write)
    if draft is None:
        return cycle
    _kept(fleet, cycle, "draft_revision", draft.revision, "draft_written",
          f"wrote the draft: {summary}", revision=draft.revision)  # fmt: skip
    note = f"Autopilot cycle {cycle.number}: {summary}"
    if review_settings_of(fleet).publish_needs_approval:
        return _ask(objective, cycle, ChangeRequest.Kind.PUBLISH, note, now)
    return _publish(objective, cycle, note, now)


def _ask(
    objective: AutopilotObjective, cycle: AutopilotCycle, kind: str, note: str, now: datetime
) -> AutopilotCycle:
    request = _attempt(
        objective,
        cycle,
        now,
        "could not open the change request",
        lambda: change_request_open(
            actor=autopilot_actor(),
            fleet=objective.fleet,
            kind=kind,
            note=note,
            version=cycle.version if kind != ChangeRequest.Kind.PUBLISH else None,
        ),
    )
    if request is None:
        return cycle
    _kept(
        objective.fleet,
        cycle,
        "change_request",
        request.pk,
        "change_request_opened",
        f"asked for review (change request {request.pk})",
        moved=(
            CycleState.AWAITING_APPROVAL,
            f"change request {request.pk} waits for a publisher's approval",
            now,
        ),
        change_request=request.pk,
    )
    return cycle


def _publish(
    objective: AutopilotObjective, cycle: AutopilotCycle, note: str, now: datetime
) -> AutopilotCycle:
    fleet = objective.fleet
    revision = cycle.draft_revision or 0

    def publish() -> PolicyVersion:
        if cycle.change_request is not None:
            return change_request_publish(
                actor=autopilot_actor(),
                fleet=fleet,
                request_id=cycle.change_request,
                revision=revision,
                note=note,
            )
        return policy_version_publish(
            actor=autopilot_actor(), fleet=fleet, revision=revision, note=note
        )

    version = _attempt(objective, cycle, now, "could not publish", publish)
    if version is None:
        return cycle
    _kept(fleet, cycle, "version", version.number, "published",
          f"published v{version.number}", version=version.number)  # fmt: skip
    if review_settings_of(fleet).rollout_needs_approval:
        cycle.change_request = None
        return _ask(
            objective,
            cycle,
            ChangeRequest.Kind.ROLLOUT_START,
            f"Autopilot cycle {cycle.number}: roll out v{version.number}",
            now,
        )
    return _roll_out(objective, cycle, now)


def _roll_out(
    objective: AutopilotObjective, cycle: AutopilotCycle, now: datetime
) -> AutopilotCycle:
    rollout = _attempt(
        objective,
        cycle,
        now,
        "could not start the rollout",
        lambda: rollout_start_guarded(
            actor=autopilot_actor(),
            fleet=objective.fleet,
            version=cycle.version or 0,
            guard_options={
                "guards": GUARD_PRESET,
                "bake_minutes": objective.bake_minutes,
                "auto_advance": True,
            },
            holdback=objective.holdback,
            segment=cycle.segment or None,
        ),
    )
    if rollout is None:
        return cycle
    _kept(
        objective.fleet,
        cycle,
        "rollout",
        rollout.pk,
        "rollout_started",
        f"started rollout {rollout.pk}",
        moved=(
            CycleState.ROLLING_OUT,
            f"rollout {rollout.pk} of v{cycle.version} {_to_whom(cycle)} under the "
            f"{GUARD_PRESET} guards, {objective.holdback}% held back",
            now,
        ),
        rollout=rollout.pk,
        holdback=objective.holdback,
        segment=cycle.segment or None,
    )
    return cycle


def _in_segment(cycle: AutopilotCycle) -> str:
    """The prefix of a cycle's summary that says which segment's override it moves."""
    return f"segment {cycle.segment}: " if cycle.segment else ""


def _to_whom(cycle: AutopilotCycle) -> str:
    return f"to segment {cycle.segment}" if cycle.segment else "to the fleet"


def _advance(objective: AutopilotObjective, cycle: AutopilotCycle, now: datetime) -> None:
    """Move an open cycle on by what happened since: an approval, the rollout, the clock."""
    fleet = objective.fleet
    freeze = fleet_freeze_open(fleet_id=fleet.pk)
    if freeze is not None:
        _stop(objective, cycle, f"the fleet is frozen ({freeze.reason})", now)
        return
    if cycle.state == CycleState.AWAITING_APPROVAL:
        request = ChangeRequest.objects.filter(pk=cycle.change_request or 0, fleet=fleet).first()
        if request is None or request.state == ChangeRequest.State.CLOSED:
            _stop(objective, cycle, f"change request {cycle.change_request} was closed", now)
            return
        status = review_status(request, request.verdicts.all())
        if status.status == "rejected":
            _stop(
                objective,
                cycle,
                f"change request {request.pk} was rejected by {', '.join(status.rejected_by)}",
                now,
            )
            return
        if status.status != "approved":
            return
        if request.kind == ChangeRequest.Kind.PUBLISH:
            _publish(objective, cycle, request.note, now)
        else:
            _roll_out(objective, cycle, now)
        return
    if cycle.state == CycleState.ROLLING_OUT:
        _rolling(objective, cycle, now)
        return
    if cycle.state == CycleState.MEASURING:
        if cycle.segment and _segment_rollout_ended(objective, cycle, now):
            return
        completed = cycle.rollout_completed_at or now
        if now < completed + timedelta(minutes=objective.measure_minutes):
            return
        _realize(objective, cycle, cycle.measure_from or completed, now)


def _rolling(objective: AutopilotObjective, cycle: AutopilotCycle, now: datetime) -> None:
    """A rollout under way: its end moves the cycle on. A rollout of the whole fleet completes
    by its guards; one scoped to a segment stays at 100% of the segment (completing it is
    fleet-wide), so its check begins once it has baked there, still guarded."""
    fleet = objective.fleet
    rollout = Rollout.objects.filter(pk=cycle.rollout or 0, fleet=fleet).first()
    if rollout is None:
        _stop(objective, cycle, f"rollout {cycle.rollout} is gone", now)
    elif rollout.state == Rollout.State.ROLLED_BACK:
        _stop(objective, cycle, f"rollout {rollout.pk} was rolled back: {rollout.reason}", now)
    elif rollout.state == Rollout.State.COMPLETED:
        reached = f"rollout {rollout.pk} completed"
        _measuring(objective, cycle, rollout, rollout.finished_at or now, reached, now)
    elif (
        rollout.scoped
        and rollout.stage == 100
        and now >= rollout.stage_changed_at + timedelta(minutes=objective.bake_minutes)
    ):
        reached = f"rollout {rollout.pk} baked at 100% of segment {rollout.segment_name}"
        _measuring(objective, cycle, rollout, now, reached, now)


def _measuring(
    objective: AutopilotObjective,
    cycle: AutopilotCycle,
    rollout: Rollout,
    reached_at: datetime,
    reached: str,
    now: datetime,
) -> None:
    """The check begins: the candidate's events from its 100% stage (the last stage change;
    completion keeps the stage) to `measure_minutes` after `reached_at`."""
    cycle.rollout_completed_at = reached_at
    cycle.measure_from = rollout.stage_changed_at
    text = f"{reached}; measuring for {objective.measure_minutes} min"
    _finish(cycle, CycleState.MEASURING, text, now)
    _audit(
        objective.fleet,
        "rollout_completed",
        f"Cycle {cycle.number}: {reached}",
        cycle=cycle.number,
        rollout=rollout.pk,
    )


def _segment_rollout_ended(
    objective: AutopilotObjective, cycle: AutopilotCycle, now: datetime
) -> bool:
    """A segment's rollout stays open through the check: one its guards rolled back (or that a
    person ended) stops the autopilot."""
    rollout = Rollout.objects.filter(pk=cycle.rollout or 0, fleet=objective.fleet).first()
    if rollout is not None and rollout.state != Rollout.State.ROLLED_BACK:
        return False
    why = f"was rolled back: {rollout.reason}" if rollout is not None else "is gone"
    _stop(objective, cycle, f"rollout {cycle.rollout} {why}", now)
    return True


def _complete_segment_rollout(
    objective: AutopilotObjective, cycle: AutopilotCycle, now: datetime
) -> bool:
    """After a segment's check within the tolerance: complete its rollout fleet-wide (the
    person's service, confirmed), so the segment's θs become the stable version. It moves no
    device outside the segment to other θs: the candidate's base cells and other overrides are
    the base version's (the cycle wrote the segment's override alone). False: refused, stopped."""
    rollout = Rollout.objects.filter(pk=cycle.rollout or 0, fleet=objective.fleet).first()
    if rollout is None or rollout.state != Rollout.State.ACTIVE:
        return True  # completed (or ended) by a person meanwhile
    done = _attempt(
        objective,
        cycle,
        now,
        "could not complete the segment's rollout",
        lambda: rollout_complete(actor=autopilot_actor(), fleet=objective.fleet, fleet_wide=True),
    )
    if done is None:
        return False
    _audit(
        objective.fleet,
        "segment_rollout_completed",
        f"Cycle {cycle.number}: completed rollout {rollout.pk} of segment {cycle.segment} "
        f"(v{cycle.version} stable; only the segment's override differs)",
        cycle=cycle.number,
        rollout=rollout.pk,
        segment=cycle.segment,
    )
    return True


def cell_key_of(label: str) -> CellKey:
    """A cell's key from its label `task/budget/tier`."""
    task_type, latency_budget, privacy_tier = label.split("/")
    return (task_type, latency_budget, privacy_tier)


def _realize(
    objective: AutopilotObjective, cycle: AutopilotCycle, since: datetime, now: datetime
) -> None:
    """Compare predicted with realized per moved cell; a miss stops the autopilot."""
    moved = [row for row in cycle.cells if row["threshold_to"] is not None]
    keys: list[CellKey] = [cell_key_of(row["cell"]) for row in moved]
    try:  # the segment's own rows (a segment deleted since cannot be judged)
        rows = segment_rows(fleet=objective.fleet, segment=cycle.segment)
    except ApplicationError as exc:
        _stop(objective, cycle, f"could not measure: {exc.message}", now)
        return
    realized = realized_of_cells(
        fleet=objective.fleet,
        version=cycle.version or 0,
        start=since,
        end=now,
        cells=keys,
        segment=rows,
    )
    tolerance = Tolerance(share=objective.share_tolerance)
    all_misses: list[str] = []
    for row, key in zip(moved, keys, strict=True):
        got = realized[key]
        row["realized"] = got.as_dict()
        if got.events < MIN_REALIZED_EVENTS:
            row["misses"] = []
            row["unchecked"] = (
                f"{got.events} events of v{cycle.version}, {MIN_REALIZED_EVENTS} needed"
            )
            continue
        row["misses"] = misses(
            predicted=CurvePoint.from_stored(row["predicted"]),
            predicted_quality_low=row["quality_low"],
            realized=got,
            budget_ms=row["budget_ms"],
            tolerance=tolerance,
        )
        all_misses += [f"{row['cell']}: {miss}" for miss in row["misses"]]
    cycle.save(update_fields=["cells"])
    if all_misses:
        _stop(objective, cycle, "the prediction missed: " + "; ".join(all_misses), now)
        return
    if cycle.segment and not _complete_segment_rollout(objective, cycle, now):
        return
    _finish(cycle, CycleState.COMPLETED, "realized within the tolerance of the prediction", now)
    _audit(
        objective.fleet,
        "cycle_completed",
        f"Cycle {cycle.number} completed: realized within the tolerance",
        cycle=cycle.number,
    )
