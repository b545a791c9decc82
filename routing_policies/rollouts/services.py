"""Rollouts, immediate switches and cloud-pressure nudges: the writes of gray release.

Each transition is one call under a row lock on the fleet's routing row, idempotent (repeating
it does nothing twice), audited, and its push is sent only after the transaction commits. A
push carries ids and version numbers, never documents or model objects.

The arguments come typed and in range: each caller's input went through the use case's one
input serializer in `schemas` (the API and the pages; `manage.py rollout` with its options;
a schedule when it was made), or is the server's own (a guard advancing to the next stage).
Here are only the checks that need the database: the version is published, the rollout is
open, the fleet is not frozen.
"""

import functools
import logging
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import Exists, QuerySet
from django.utils import timezone

from controlplane.exceptions import Conflict, NotFound, ValidationFailed
from controlplane.prepared import Prepared, loaded

from ..assignment import FleetAssignment
from ..policies.audit import Actor, actor_name, actor_user, audit_of, audit_record
from ..policies.models import Fleet, PolicyVersion
from ..segments.selectors import rule_preview, segment_get
from ..validation import MAX_VERSION
from .hooks import GatedChange, rollout_gate
from .models import MAX_CLOUD_PRESSURE_TTL_S as MAX_CLOUD_PRESSURE_TTL_S
from .models import FleetRouting, Rollout, RolloutEvent
from .selectors import (
    open_rollout,
    open_rollout_row,
    open_rollouts,
    rollout_assignment,
    rollout_loaded,
    version_numbered,
)
from .signals import assignment_changed, cloud_pressure_changed

logger = logging.getLogger(__name__)


# `of=("self",)`: the stable version is a nullable join, and PostgreSQL refuses FOR UPDATE on
# the nullable side of an outer join; only the routing row needs the lock anyway.
_ROUTING_COLUMNS = [field.attname for field in FleetRouting._meta.concrete_fields]
_ROUTING_LOCKED = Prepared(
    lambda fleet_id: (
        FleetRouting.objects.select_for_update(of=("self",))
        .filter(fleet_id=fleet_id)
        .values(*_ROUTING_COLUMNS, "stable_version__number")[:1]
    ),
    "fleet_id",
)


def fleet_routing_lock(fleet: Fleet) -> FleetRouting:
    """The fleet's routing row, locked until the transaction ends: every change of what the
    fleet runs (a switch, a rollout's start or end, cloud pressure, the enrolment key) takes it.
    Compiled once (controlplane.prepared), with its stable version's number as `select_related`
    gave it (the version's other fields load if asked for)."""
    row = _ROUTING_LOCKED.first(fleet_id=fleet.pk)
    if row is None:  # fleets made before routing rows existed, or by hand
        FleetRouting.objects.get_or_create(fleet=fleet)
        row = _ROUTING_LOCKED.first(fleet_id=fleet.pk)
        assert row is not None
    routing = loaded(FleetRouting, row, _ROUTING_COLUMNS)
    routing.stable_version = version_numbered(
        row["stable_version_id"], row["stable_version__number"]
    )
    return routing


def _push_assignment_on_commit(fleet: Fleet, assignment: FleetAssignment) -> None:
    """Announce the fleet's new assignment: the push tier sends it once the change commits."""
    assignment_changed.send(sender=Rollout, fleet_id=fleet.pk, assignment=assignment)


@dataclass(frozen=True, slots=True)
class _ChangeTarget:
    """A published version and what may stand in the way of switching the fleet to it or of
    starting its rollout."""

    kind: GatedChange
    version: PolicyVersion
    rollout_open: bool
    freeze_id: int | None
    freeze_reason: str
    needs_approval: bool
    request_open: bool  # the version has an open change request of the change's kind

    def approval_consume(self, *, actor: Actor, fleet: Fleet) -> None:
        """The gate's approval for this change, from what was read with the target."""
        rollout_gate().approval_consume(
            actor=actor,
            fleet=fleet,
            kind=self.kind,
            version=self.version,
            needed=self.needs_approval,
            request_open=self.request_open,
        )


@functools.cache
def _target_read(kind: GatedChange) -> Prepared:
    """One compiled read per gated change (controlplane.prepared), made on first use, once the
    gate is registered."""

    def target(fleet_id: int, number: int) -> QuerySet[Any, Any]:
        # Typed loosely: the gate's annotations are named at run time.
        annotated: QuerySet[Any, Any] = PolicyVersion.objects.filter(
            fleet_id=fleet_id, number=number
        ).annotate(
            rollout_open=Exists(open_rollouts(fleet_id)),
            **rollout_gate().change_annotations(fleet_id, kind),
        )
        return annotated.values(
            "id",
            "fleet_id",
            "number",
            "rollout_open",
            "freeze_id",
            "freeze_reason",
            "needs_approval",
            "request_open",
        )[:1]

    return Prepared(target, "fleet_id", "number")


def _change_target(fleet: Fleet, number: int, kind: GatedChange) -> _ChangeTarget:
    """The published version `number`, the fleet's open rollout, open freeze, review setting
    and the version's open change request of `kind` in one read, compiled once: one round trip
    instead of five, on the path of every device's push (bench/fanout, bench/mqtt). The same
    rows as the version's own read, `open_rollout` and the gate's reads."""
    found = None
    if 0 < number <= MAX_VERSION:  # outside: no version (and no SQL, as the ORM would do)
        found = _target_read(kind).first(fleet_id=fleet.pk, number=number)
    if found is None:
        raise NotFound(f"Fleet {fleet.slug!r} has no published version {number}.")
    version = loaded(PolicyVersion, found, ["id", "fleet_id", "number"])
    return _ChangeTarget(
        kind=kind,
        version=version,
        rollout_open=bool(found["rollout_open"]),
        freeze_id=found["freeze_id"],
        freeze_reason=found["freeze_reason"] or "",
        needs_approval=bool(found["needs_approval"]),
        request_open=bool(found["request_open"]),
    )


def _record(
    fleet: Fleet,
    rollout: Rollout,
    action: str,
    actor: Actor,
    *,
    stages: tuple[int | None, int | None],
    summary: str,
    before: dict[str, Any],
    after: dict[str, Any],
) -> None:
    """One transition of the rollout, in its history (`action` from stage to stage) and in the
    audit log (`rollout.<action>`)."""
    RolloutEvent.objects.create(
        rollout=rollout,
        action=action,
        stage_before=stages[0],
        stage_after=stages[1],
        actor_name=actor_name(actor),
    )
    audit_of(
        "rollout",
        rollout.pk,
        action,
        actor=actor,
        fleet=fleet,
        summary=summary,
        before=before,
        after=after,
    )


# Every transition of an open rollout starts here, inside its transaction: compiled once.
_OPEN_LOCKED = Prepared(lambda fleet_id: open_rollout_row(fleet_id, lock=True), "fleet_id")


def _open_locked(fleet: Fleet) -> Rollout | None:
    """The fleet's open rollout, its row locked, with its two versions' numbers (the versions'
    other fields load if asked for)."""
    row = _OPEN_LOCKED.first(fleet_id=fleet.pk)
    return rollout_loaded(row) if row is not None else None


def _no_rollout(fleet: Fleet) -> Conflict:
    return Conflict(f"Fleet {fleet.slug!r} has no rollout in progress.", code="no_rollout")


def _require_open(fleet: Fleet) -> Rollout:
    rollout = _open_locked(fleet)
    if rollout is None:
        raise _no_rollout(fleet)
    return rollout


def _open_or_ended_as(fleet: Fleet, state: str) -> tuple[Rollout | None, Rollout | None]:
    """`(open, None)`: the open rollout, locked; `(None, last)` when the last rollout already
    ended in `state` (a repeat of the call that ended it); else no rollout is in progress."""
    rollout = _open_locked(fleet)
    if rollout is not None:
        return rollout, None
    last = Rollout.objects.filter(fleet=fleet).order_by("-started_at", "-id").first()
    if last is not None and last.state == state:
        return None, last
    raise _no_rollout(fleet)


def _scope_of(fleet: Fleet, segment: str) -> dict[str, Any]:
    """The rule of the fleet's segment `segment`, which must match at least one enrolled device
    (a rollout of nobody has no cohort to watch): a refusal naming `segment` otherwise."""
    found = segment_get(fleet=fleet, name=segment)
    if found is None:
        raise ValidationFailed(
            f"segment: fleet {fleet.slug!r} has no segment {segment!r}.",
            details=[{"field": "segment", "message": f"no segment {segment!r} in this fleet"}],
        )
    if rule_preview(fleet=fleet, rule=found.rule)["matching"] == 0:
        raise Conflict(
            f"Segment {segment!r} matches no enrolled device: a rollout scoped to it would "
            "reach nobody.",
            code="segment_matches_none",
            details=[{"field": "segment", "message": "matches no enrolled device"}],
        )
    return dict(found.rule)


@transaction.atomic
def rollout_start(
    *, actor: Actor, fleet: Fleet, version: int, holdback: int = 0, segment: str | None = None
) -> Rollout:
    """Start rolling `version` out at 5% with a new random salt (a repeat is a no-op); with a
    `holdback`, that percent of the fleet stays on stable at 100% until completion; with a
    `segment`, only the devices its rule matches (the rule as it is now, kept with the
    rollout) take part, the rest stay on stable."""
    routing = fleet_routing_lock(fleet)
    target = _change_target(fleet, version, "rollout_start")
    candidate = target.version
    current = open_rollout(fleet.pk) if target.rollout_open else None
    if current is not None:
        if current.candidate_id == candidate.pk and current.segment_name == (segment or ""):
            return current
        raise Conflict(
            f"Rollout {current.pk} of v{current.candidate.number} is in progress; complete or "
            "roll it back first.",
            code="rollout_in_progress",
        )
    if routing.stable_version is None:
        raise Conflict(
            "The fleet has no stable version yet: switch it to one first.", code="no_stable_version"
        )
    if routing.stable_version_id == candidate.pk:
        raise Conflict(f"v{version} is already the fleet's stable version.", code="already_stable")
    gate = rollout_gate()
    if target.freeze_id is not None:
        raise gate.frozen_conflict(
            freeze_id=target.freeze_id, reason=target.freeze_reason, doing="starting a rollout"
        )
    scope = _scope_of(fleet, segment) if segment else None
    target.approval_consume(actor=actor, fleet=fleet)
    now = timezone.now()
    rollout = Rollout.objects.create(
        fleet=fleet,
        candidate=candidate,
        stable=routing.stable_version,
        salt=secrets.token_hex(8),
        stage=Rollout.STAGES[0],
        started_by=actor_user(actor),
        stage_changed_at=now,
        holdback=holdback,
        segment_name=segment or "",
        segment_rule=scope,
    )
    _record(
        fleet,
        rollout,
        "started",
        actor,
        stages=(None, rollout.stage),
        summary=(
            f"Started rolling out v{version} over v{routing.stable_version.number} "
            f"at {rollout.stage}%"
            + (f", holding {holdback}% back on stable until completion" if holdback else "")
            + (f", only in segment {segment}" if segment else "")
        ),
        before={"stable": routing.stable_version.number, "candidate": None, "stage": 0},
        after={
            "stable": routing.stable_version.number,
            "candidate": version,
            "stage": rollout.stage,
            # PROTOCOL.md's bucket is computed from it: kept with the start, so anyone can
            # check which devices a stage reached.
            "salt": rollout.salt,
            "holdback": holdback,
            **({"segment": segment, "segment_rule": scope} if segment else {}),
        },
    )
    _push_assignment_on_commit(fleet, rollout_assignment(rollout))
    logger.info("rollout.started fleet=%s rollout=%d version=%d", fleet.slug, rollout.pk, version)
    return rollout


@transaction.atomic
def rollout_advance(*, actor: Actor, fleet: Fleet, to_stage: int | None = None) -> Rollout:
    """Move to the next stage (5 → 25 → 100); naming a stage already reached is a no-op."""
    gate = rollout_gate()
    # The open rollout's row lock serialises this with every other transition of it.
    rollout = _open_locked(fleet)
    if rollout is None:
        # After an automatic rollback there is no rollout, and the freeze is why none may
        # advance: say so first (docs/governance.md), then that there is nothing to advance.
        gate.freeze_refuse(fleet=fleet, doing="advancing a rollout")
        raise _no_rollout(fleet)
    target = to_stage if to_stage is not None else rollout.next_stage
    if target is None:
        raise Conflict("The rollout is at 100%: complete it.", code="at_last_stage")
    if target <= rollout.stage:
        return rollout  # a double click: already there
    if rollout.state == Rollout.State.PAUSED:
        raise Conflict("The rollout is paused: resume it before advancing.", code="paused")
    gate.freeze_refuse(fleet=fleet, doing="advancing a rollout")
    before = rollout.stage
    rollout.stage = target
    rollout.stage_changed_at = timezone.now()
    rollout.save(update_fields=["stage", "stage_changed_at"])
    _record(
        fleet,
        rollout,
        "advanced",
        actor,
        stages=(before, target),
        summary=f"Advanced v{rollout.candidate.number} from {before}% to {target}%"
        + (
            f" ({rollout.candidate_share}% of the fleet; {rollout.holdback}% held back on "
            f"v{rollout.stable.number} until completion)"
            if rollout.candidate_share != target
            else ""
        ),
        before={"stage": before},
        after={"stage": target},
    )
    _push_assignment_on_commit(fleet, rollout_assignment(rollout))
    return rollout


def _set_paused(*, actor: Actor, fleet: Fleet, paused: bool) -> Rollout:
    # The open rollout's row lock serialises this with every other transition of it.
    rollout = _require_open(fleet)
    target = Rollout.State.PAUSED if paused else Rollout.State.ACTIVE
    if rollout.state == target:
        return rollout
    before = rollout.state
    rollout.state = target
    rollout.save(update_fields=["state"])
    action = "paused" if paused else "resumed"
    _record(
        fleet,
        rollout,
        action,
        actor,
        stages=(rollout.stage, rollout.stage),
        summary=f"{action.capitalize()} at {rollout.stage}%",
        before={"state": before},
        after={"state": target},
    )
    return rollout


@transaction.atomic
def rollout_pause(*, actor: Actor, fleet: Fleet) -> Rollout:
    """Hold the rollout at its stage (devices keep what they run); repeat is a no-op."""
    return _set_paused(actor=actor, fleet=fleet, paused=True)


@transaction.atomic
def rollout_resume(*, actor: Actor, fleet: Fleet) -> Rollout:
    """Let a paused rollout advance again; repeat is a no-op."""
    return _set_paused(actor=actor, fleet=fleet, paused=False)


@transaction.atomic
def rollout_complete(*, actor: Actor, fleet: Fleet, fleet_wide: bool = False) -> Rollout:
    """At 100%, make the candidate the fleet's stable version; repeat is a no-op. A rollout
    scoped to a segment completes only with `fleet_wide` (the caller's confirmation): there is
    one stable version per fleet, so completing it moves the devices outside the segment too,
    at once (as a switch does)."""
    routing = fleet_routing_lock(fleet)
    rollout, completed = _open_or_ended_as(fleet, Rollout.State.COMPLETED)
    if rollout is None:
        assert completed is not None
        return completed
    if rollout.stage != 100:
        raise Conflict(
            f"The rollout is at {rollout.stage}%: advance it to 100% before completing.",
            code="not_at_full_stage",
        )
    if rollout.scoped and not fleet_wide:
        raise Conflict(
            f"The rollout is scoped to segment {rollout.segment_name!r}: completing it makes "
            f"v{rollout.candidate.number} stable for the whole fleet, moving the devices outside "
            "the segment at once. Confirm with fleet_wide: true, or keep it at 100% of the "
            "segment, or roll it back.",
            code="scoped_rollout",
            details=[
                {"field": "fleet_wide", "message": "must be true to complete a scoped rollout"}
            ],
        )
    rollout.state = Rollout.State.COMPLETED
    rollout.finished_at = timezone.now()
    rollout.save(update_fields=["state", "finished_at"])
    routing.stable_version = rollout.candidate
    routing.save(update_fields=["stable_version", "updated_at"])
    _record(
        fleet,
        rollout,
        "completed",
        actor,
        stages=(rollout.stage, rollout.stage),
        summary=f"v{rollout.candidate.number} is now stable (was v{rollout.stable.number})"
        + (
            f" for the whole fleet, beyond segment {rollout.segment_name}" if rollout.scoped else ""
        ),
        before={"stable": rollout.stable.number},
        after={"stable": rollout.candidate.number},
    )
    # Without a holdback no device changes version at completion (all already run the
    # candidate), but the push tells every process the rollout is over; with one, it moves
    # the held-back devices to the candidate.
    _push_assignment_on_commit(fleet, rollout_assignment(rollout))
    return rollout


@transaction.atomic
def rollout_rollback(
    *, actor: Actor, fleet: Fleet, reason: str = "", automatic: bool | None = None
) -> Rollout:
    """Return every device to the stable version, from any stage; repeat is a no-op.

    An automatic rollback (a guard's: `automatic=True`, or no actor when not said) freezes the
    fleet's rollouts until a publisher acknowledges the reason (reviews.services).
    """
    # The open rollout's row lock serialises this with every other transition of it.
    rollout, rolled_back = _open_or_ended_as(fleet, Rollout.State.ROLLED_BACK)
    if rollout is None:
        assert rolled_back is not None
        return rolled_back
    before = rollout.stage
    rollout.state = Rollout.State.ROLLED_BACK
    rollout.finished_at = timezone.now()
    rollout.stage_changed_at = rollout.finished_at
    rollout.reason = reason[:500]
    rollout.save(update_fields=["state", "finished_at", "stage_changed_at", "reason"])
    _record(
        fleet,
        rollout,
        "rolled_back",
        actor,
        stages=(before, 0),
        summary=f"Rolled v{rollout.candidate.number} back at {before}% to v{rollout.stable.number}"
        + (f": {reason}" if reason else ""),
        before={"candidate": rollout.candidate.number, "stage": before},
        after={"candidate": None, "stage": 0, "stable": rollout.stable.number},
    )
    if actor is None if automatic is None else automatic:
        rollout_gate().freeze_after_rollback(fleet=fleet, rollout=rollout, reason=rollout.reason)
    _push_assignment_on_commit(fleet, rollout_assignment(rollout))
    logger.info("rollout.rolled_back fleet=%s rollout=%d", fleet.slug, rollout.pk)
    return rollout


@transaction.atomic
def fleet_switch_version(*, actor: Actor, fleet: Fleet, version: int) -> FleetRouting:
    """Move the whole fleet to a published version at once (no stages); repeat is a no-op."""
    routing = fleet_routing_lock(fleet)
    gate = _change_target(fleet, version, "switch")
    target = gate.version
    if gate.rollout_open:
        raise Conflict(
            "A rollout is in progress: complete or roll it back first.", code="rollout_in_progress"
        )
    if routing.stable_version_id == target.pk:
        return routing
    if gate.freeze_id is not None:
        raise rollout_gate().frozen_conflict(
            freeze_id=gate.freeze_id,
            reason=gate.freeze_reason,
            doing="switching the whole fleet",
        )
    gate.approval_consume(actor=actor, fleet=fleet)
    before = routing.stable_version.number if routing.stable_version else None
    routing.stable_version = target
    routing.save(update_fields=["stable_version", "updated_at"])
    audit_record(
        actor=actor,
        action="fleet.switched",
        fleet=fleet,
        summary=f"Switched the whole fleet from v{before} to v{version}",
        before={"stable": before},
        after={"stable": version},
    )
    _push_assignment_on_commit(fleet, FleetAssignment(stable=version))
    return routing


@transaction.atomic
def cloud_pressure_set(
    *, actor: Actor, fleet: Fleet, theta_offset: float, ttl_s: int
) -> FleetRouting:
    """A fleet-wide θ nudge for `ttl_s` seconds, pushed now and to devices connecting meanwhile."""
    routing = fleet_routing_lock(fleet)
    routing.cloud_pressure_offset = float(theta_offset)
    routing.cloud_pressure_until = timezone.now() + timedelta(seconds=ttl_s)
    routing.save(update_fields=["cloud_pressure_offset", "cloud_pressure_until", "updated_at"])
    summary = f"cloud_pressure θ{theta_offset:+.2f} for {ttl_s}s"
    after = {"theta_offset": theta_offset, "ttl_s": ttl_s}
    audit_of(
        "fleet", None, "cloud_pressure", actor=actor, fleet=fleet, summary=summary, after=after
    )
    cloud_pressure_changed.send(
        sender=FleetRouting,
        fleet_id=fleet.pk,
        theta_offset=float(theta_offset),
        until=routing.cloud_pressure_until.timestamp(),
    )
    return routing
