"""Reads of rollouts: the fleet's assignment, cloud pressure, convergence and propagation,
what its devices run, and the history of its rollouts."""

import math
from datetime import datetime
from typing import Any

from django.db.models import Count, Max, Q
from django.utils import timezone

from ..assignment import FleetAssignment
from ..devices.models import Device, DeviceQuerySet
from ..policies.models import AuditEntry, Fleet, PolicyVersion
from ..reviews.gate import fleet_freeze_open
from ..reviews.selectors import freeze_out
from .models import FleetRouting, Rollout, RolloutEvent

ROLLOUT_HISTORY_LIMIT = 50


def open_rollout(fleet_id: int) -> Rollout | None:
    """The fleet's active or paused rollout."""
    return (
        Rollout.objects.filter(
            fleet_id=fleet_id, state__in=[Rollout.State.ACTIVE, Rollout.State.PAUSED]
        )
        .select_related("candidate", "stable")
        .first()
    )


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


def fleet_assignment(fleet_id: int) -> FleetAssignment:
    """What each device of the fleet must run now (stable, candidate, salt, stage)."""
    routing = (
        FleetRouting.objects.select_related("stable_version").filter(fleet_id=fleet_id).first()
    )
    stable = routing.stable_version.number if routing and routing.stable_version else None
    rollout = open_rollout(fleet_id)
    return rollout_assignment(rollout) if rollout is not None else FleetAssignment(stable=stable)


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


def candidate_cohort_count(fleet: Fleet, assignment: FleetAssignment) -> int:
    """How many live devices are assigned the candidate right now."""
    if assignment.candidate_share <= 0:
        return 0
    devices = _live(fleet)
    if assignment.candidate_share >= 100:
        return devices.count()
    return devices.in_candidate_cohort(assignment).count()


def _live(fleet: Fleet) -> DeviceQuerySet:
    return Device.objects.filter(fleet=fleet).live()


def _percentile(sorted_values: list[float], fraction: float) -> float | None:
    """Nearest rank: the smallest value with at least `fraction` of the values at or below it."""
    if not sorted_values:
        return None
    index = min(len(sorted_values) - 1, max(0, math.ceil(fraction * len(sorted_values)) - 1))
    return sorted_values[index]


def fleet_convergence(fleet: Fleet) -> dict[str, Any]:
    """Per version: devices assigned, acked and online; propagation since the last change."""
    now = timezone.now()
    assignment = fleet_assignment(fleet.pk)
    devices = _live(fleet)
    total = devices.count()
    on_candidate = candidate_cohort_count(fleet, assignment)
    assigned: dict[int, int] = {}
    if assignment.stable is not None:
        assigned[assignment.stable] = total - on_candidate
    if assignment.candidate is not None:
        assigned[assignment.candidate] = on_candidate
    acked = {
        row["acked_version"]: row["n"]
        for row in devices.exclude(acked_version__isnull=True)
        .values("acked_version")
        .annotate(n=Count("id"))
        .order_by()
    }
    online_acked = {
        row["acked_version"]: row["n"]
        for row in devices.online(now)
        .exclude(acked_version__isnull=True)
        .values("acked_version")
        .annotate(n=Count("id"))
        .order_by()
    }
    versions = sorted(set(assigned) | set(acked), reverse=True)
    last_change = _last_change_at(fleet)
    propagation: dict[str, float | None] = {"p50_ms": None, "p95_ms": None, "count": 0}
    if last_change is not None:
        delays = sorted(
            (acked_at - last_change).total_seconds() * 1000
            for acked_at in devices.filter(acked_at__gte=last_change).values_list(
                "acked_at", flat=True
            )
            if acked_at is not None
        )
        propagation = {
            "p50_ms": _percentile(delays, 0.50),
            "p95_ms": _percentile(delays, 0.95),
            "count": len(delays),
        }
    return {
        "devices": total,
        "online": devices.online(now).count(),
        "versions": [
            {
                "version": number,
                "role": "candidate"
                if number == assignment.candidate
                else ("stable" if number == assignment.stable else "other"),
                "assigned": assigned.get(number, 0),
                "acked": acked.get(number, 0),
                "acked_online": online_acked.get(number, 0),
            }
            for number in versions
        ],
        "last_change_at": last_change,
        "propagation": propagation,
    }


def _last_change_at(fleet: Fleet) -> datetime | None:
    """When the fleet's assignment last changed: a stage, a rollback, a switch, a first publish.

    Not `FleetRouting.updated_at`: completing a rollout, a cloud-pressure nudge or a new
    enrolment key also touch that row without sending any device a new version, and would
    reset the propagation clock to a moment no device was told anything.
    """
    event = (
        RolloutEvent.objects.filter(rollout__fleet=fleet)
        .exclude(action__in=["paused", "resumed", "completed"])
        .order_by("-at")
        .values_list("at", flat=True)
        .first()
    )
    switch = (
        AuditEntry.objects.filter(fleet=fleet)
        .filter(
            Q(action="fleet.switched")
            # The first published version becomes stable at once (`before` has no version).
            | Q(action="policy_version.published", before__version=None)
        )
        .order_by("-created_at")
        .values_list("created_at", flat=True)
        .first()
    )
    candidates = [t for t in (event, switch) if t is not None]
    return max(candidates) if candidates else None


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
        "convergence": fleet_convergence(fleet),
        # Set after an automatic rollback until a publisher acknowledges it (docs/governance.md).
        "freeze": freeze_out(fleet_freeze_open(fleet_id=fleet.pk)),
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
