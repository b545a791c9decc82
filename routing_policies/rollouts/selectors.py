"""Reads of rollouts: the fleet's assignment, cloud pressure, what its devices run, and the
history of its rollouts. (Convergence and propagation are the devices' reads:
`devices.selectors.fleet_convergence`.)"""

from datetime import datetime
from typing import Any

from django.db.models import F, FilteredRelation, Max, Q, QuerySet
from django.utils import timezone

from controlplane.prepared import Prepared, loaded

from ..assignment import FleetAssignment
from ..policies.models import Fleet, PolicyVersion
from .hooks import fleet_convergence_of, rollout_gate
from .models import OPEN_STATES, FleetRouting, Rollout, RolloutEvent

ROLLOUT_HISTORY_LIMIT = 50
# How many of the devices that have not acked their version the rollout status names (it
# counts them all).
NOT_ACKED_LIMIT = 20


def open_rollouts(fleet_id: Any) -> QuerySet[Rollout]:
    """The fleet's active or paused rollout (at most one) as a queryset; `fleet_id` may be an
    expression (`OuterRef`) or a prepared read's marker."""
    return Rollout.objects.filter(fleet_id=fleet_id, state__in=OPEN_STATES)


def open_rollout(fleet_id: int) -> Rollout | None:
    """The fleet's active or paused rollout."""
    return open_rollouts(fleet_id).select_related("candidate", "stable").first()


_ROLLOUT_COLUMNS = [field.attname for field in Rollout._meta.concrete_fields]


def open_rollout_row(fleet_id: Any, *, lock: bool = False) -> QuerySet[Any, Any]:
    """The fleet's open rollout as one row of its columns and its two versions' numbers (for a
    prepared read: controlplane.prepared; `rollout_loaded` makes it a Rollout), its row locked
    with `lock`."""
    rows = open_rollouts(fleet_id)
    if lock:
        rows = rows.select_for_update(of=("self",))
    row: QuerySet[Any, Any] = rows.values(*_ROLLOUT_COLUMNS, "candidate__number", "stable__number")
    return row[:1]


def rollout_loaded(row: dict[str, Any], prefix: str = "") -> Rollout:
    """The Rollout of an `open_rollout_row` (or of an `assignment_read`'s row, its keys under
    `prefix`), its versions' numbers set as `select_related` would (their other fields load if
    asked for)."""
    columns = {column: row[prefix + column] for column in _ROLLOUT_COLUMNS}
    rollout = loaded(Rollout, columns, _ROLLOUT_COLUMNS)
    for side in ("candidate", "stable"):
        version = version_numbered(row[f"{prefix}{side}_id"], row[f"{prefix}{side}__number"])
        setattr(rollout, side, version)
    return rollout


def version_numbered(version_id: int | None, number: int | None) -> PolicyVersion | None:
    """The version `version_id` with its number, as `select_related` would have set it on the
    row that names it (its other fields load if asked for); None for no version."""
    if version_id is None:
        return None
    return loaded(PolicyVersion, {"id": version_id, "number": number}, ["id", "number"])


_OPEN = "open_rollout__"  # an assignment_read's rollout columns
_STABLE = "assignment_stable"  # and its routing's stable number


def assignment_read(rows: QuerySet[Any, Any], *columns: str, fleet: str = "") -> QuerySet[Any, Any]:
    """`rows`' `columns` and, in the same row, what `assignment_of` needs of the fleet at the
    path `fleet` ("" when `rows` are fleets): its open rollout (its columns and its versions'
    numbers) and its routing's stable number, both left-joined. One query where
    `fleet_assignment` would be one or two: the state's publish waits on it (mqtt.publish)."""
    path = f"{fleet}__" if fleet else ""
    relation = f"{path}rollouts"
    open_only = Q(**{f"{relation}__state__in": OPEN_STATES})
    joined = rows.annotate(open_rollout=FilteredRelation(relation, condition=open_only))
    read: QuerySet[Any, Any] = joined.values(
        *columns,
        *(_OPEN + column for column in _ROLLOUT_COLUMNS),
        f"{_OPEN}candidate__number",
        f"{_OPEN}stable__number",
        **{_STABLE: F(f"{path}routing__stable_version__number")},
    )
    return read


def assignment_of(row: dict[str, Any]) -> FleetAssignment:
    """The FleetAssignment of an `assignment_read`'s row."""
    if row[f"{_OPEN}id"] is not None:
        return rollout_assignment(rollout_loaded(row, _OPEN))
    return FleetAssignment(stable=row[_STABLE])


def compared_rollout(fleet_id: int, since: datetime) -> Rollout | None:
    """The rollout whose two versions a view's cohorts are (telemetry/rollups/cohorts.py): the
    open one, else the latest one that was open at some time since `since`."""
    return (
        Rollout.objects.filter(fleet_id=fleet_id)
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gte=since))
        .select_related("candidate", "stable")
        .order_by("-started_at", "-id")
        .first()
    )


_ASSIGNMENT = Prepared(
    lambda fleet_id: assignment_read(Fleet.objects.filter(pk=fleet_id).order_by()), "fleet_id"
)


def fleet_assignment(fleet_id: int) -> FleetAssignment:
    """What each device of the fleet must run now (stable, candidate, salt, stage): one read,
    compiled once (controlplane.prepared), since every device's push and hello waits on it."""
    row = _ASSIGNMENT.first(fleet_id=fleet_id)
    return assignment_of(row) if row is not None else FleetAssignment(stable=None)


def rollout_assignment(rollout: Rollout) -> FleetAssignment:
    """What the fleet runs under this rollout: split by bucket while it is open; after it,
    everyone on the version that won (the candidate if completed, else the stable one)."""
    if rollout.is_open:
        return FleetAssignment(
            stable=rollout.stable.number,
            candidate=rollout.candidate.number,
            salt=rollout.salt,
            percent=rollout.stage,
            rollout_id=rollout.pk,
            holdback=rollout.holdback,
            scope=rollout.segment_rule,
            scope_name=rollout.segment_name,
        )
    winner = rollout.candidate if rollout.state == Rollout.State.COMPLETED else rollout.stable
    return FleetAssignment(stable=winner.number)


def cloud_pressure_live(fleet_id: int) -> dict[str, float] | None:
    """The fleet's cloud-pressure nudge while at least a second of it is left:
    `{"theta_offset", "until"}` (a timestamp), else None."""
    routing = (
        FleetRouting.objects.filter(fleet_id=fleet_id)
        .only("cloud_pressure_offset", "cloud_pressure_until")
        .first()
    )
    if routing is None or routing.cloud_pressure_until is None:
        return None
    until = routing.cloud_pressure_until.timestamp()
    if until - timezone.now().timestamp() < 1:
        return None
    return {"theta_offset": routing.cloud_pressure_offset, "until": until}


def rollout_status(fleet: Fleet) -> dict[str, Any]:
    """Stable version, the open (or last) rollout with its stage, since when, what comes next."""
    routing = FleetRouting.objects.select_related("stable_version").filter(fleet=fleet).first()
    rollout = open_rollout(fleet.pk) or (
        Rollout.objects.filter(fleet=fleet).select_related("candidate", "stable").first()
    )
    pressure = None
    if routing and routing.cloud_pressure_until and routing.cloud_pressure_until > timezone.now():
        pressure = {
            "theta_offset": routing.cloud_pressure_offset,
            "until": routing.cloud_pressure_until,
        }
    return {
        "fleet": fleet.slug,
        "stable_version": routing.stable_version.number
        if routing and routing.stable_version
        else None,
        "rollout": rollout_out(rollout) if rollout else None,
        "cloud_pressure": pressure,
        # Devices per version (routing_policies.devices computes it).
        "convergence": fleet_convergence_of(fleet),
        # Set after an automatic rollback until a publisher acknowledges it (docs/governance.md).
        "freeze": rollout_gate().freeze_status(fleet.pk),
    }


def rollout_out(rollout: Rollout) -> dict[str, Any]:
    """A rollout as the API and the page show it."""
    next_step = None
    if rollout.is_open:
        if rollout.state == Rollout.State.PAUSED:
            next_step = "resume"
        elif rollout.next_stage is not None:
            next_step = f"advance to {rollout.next_stage}%"
        else:
            next_step = "complete"
    return {
        "id": rollout.pk,
        "candidate": rollout.candidate.number,
        "stable": rollout.stable.number,
        "stage": rollout.stage,
        # Percent kept on stable at 100% until completion; the candidate's share of buckets.
        "holdback": rollout.holdback,
        "candidate_share": rollout.candidate_share,
        # Scoped to a segment: its name and its rule as at the start (a snapshot); null: the
        # whole fleet. The shares above are then shares of the segment's devices.
        "segment": rollout.segment_name or None,
        "segment_rule": rollout.segment_rule,
        "state": rollout.state,
        # PROTOCOL.md: bucket = int(sha256(f"{salt}:{device_id}")[:8], 16) % 10000.
        "salt": rollout.salt,
        "open": rollout.is_open,
        "started_at": rollout.started_at,
        "stage_changed_at": rollout.stage_changed_at,
        "finished_at": rollout.finished_at,
        "reason": rollout.reason,
        "next": next_step,
        "next_stage": rollout.next_stage if rollout.is_open else None,
    }


def fleet_running(*, fleet: Fleet) -> dict[str, Any]:
    """What the fleet's devices run now and what ships the newest version to them.

    `stable` is what every device runs outside a rollout; `rollout` (candidate, stage, state,
    next step) while one is open; `idle` is the newest published version that runs on no
    device (published, but neither stable nor the candidate): it needs a rollout or a switch.
    """
    routing = FleetRouting.objects.select_related("stable_version").filter(fleet=fleet).first()
    stable = routing.stable_version.number if routing and routing.stable_version else None
    rollout = open_rollout(fleet.pk)
    latest = PolicyVersion.objects.filter(fleet=fleet).aggregate(m=Max("number"))["m"]
    running = {stable, rollout.candidate.number if rollout else None}
    return {
        "stable": stable,
        "rollout": rollout_out(rollout) if rollout else None,
        "stable_share": 100 - rollout.candidate_share if rollout else 100,
        "latest": latest,
        "idle": latest if latest is not None and latest not in running else None,
    }


def rollout_history(*, fleet: Fleet, limit: int = ROLLOUT_HISTORY_LIMIT) -> list[RolloutEvent]:
    """The fleet's rollout transitions, newest first, each with its rollout's versions."""
    return list(
        RolloutEvent.objects.filter(rollout__fleet=fleet)
        .select_related("rollout__candidate", "rollout__stable")
        .order_by("-at", "-id")[:limit]
    )
