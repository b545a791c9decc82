"""Reads for devices and rollouts: assignment counts, convergence, propagation, device lists."""

import math
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from ..assignment import BUCKETS, FleetAssignment
from ..models import AuditEntry, Device, Fleet, FleetRouting, Rollout, RolloutEvent

ONLINE_WINDOW = timedelta(minutes=2)
# PROTOCOL.md's bucket, in SQL, so counting a million devices never leaves PostgreSQL.
_PG_BUCKET_SQL = (
    "(('x' || substr(encode(sha256(convert_to(%s || ':' || device_id, 'UTF8')), 'hex'), 1, 8))"
    "::bit(32)::bigint %% 10000)"
)


def open_rollout(fleet_id: int) -> Rollout | None:
    """The fleet's active or paused rollout."""
    return (
        Rollout.objects.filter(
            fleet_id=fleet_id, state__in=[Rollout.State.ACTIVE, Rollout.State.PAUSED]
        )
        .select_related("candidate", "stable")
        .first()
    )


def fleet_assignment(fleet_id: int) -> FleetAssignment:
    """What each device of the fleet must run now (stable, candidate, salt, stage)."""
    routing = (
        FleetRouting.objects.select_related("stable_version").filter(fleet_id=fleet_id).first()
    )
    stable = routing.stable_version.number if routing and routing.stable_version else None
    rollout = open_rollout(fleet_id)
    if rollout is None:
        return FleetAssignment(stable=stable)
    return FleetAssignment(
        stable=rollout.stable.number,
        candidate=rollout.candidate.number,
        salt=rollout.salt,
        percent=rollout.stage,
        rollout_id=rollout.pk,
    )


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


def online_q(now: datetime | None = None) -> Q:
    """Online devices: a live socket that said `hello` with the device's current token.

    `connected` is set by that socket's `hello` (and its heartbeat), cleared when it closes,
    when a new socket of the device connects (until that one says hello), when the device
    re-enrols (its old token's socket is being closed) and when it is revoked. A killed server
    leaves stale flags: those count only while seen within ONLINE_WINDOW.
    """
    now = now or timezone.now()
    return Q(connected=True, last_seen_at__gte=now - ONLINE_WINDOW, revoked_at__isnull=True)


def live_devices(fleet: Fleet) -> QuerySet[Device]:
    """Enrolled devices whose token is not revoked."""
    return Device.objects.filter(fleet=fleet, revoked_at__isnull=True)


def candidate_cohort_count(fleet: Fleet, assignment: FleetAssignment) -> int:
    """How many live devices are assigned the candidate right now."""
    if assignment.candidate is None or assignment.percent <= 0:
        return 0
    devices = live_devices(fleet)
    if assignment.percent >= 100:
        return devices.count()
    limit = assignment.percent * BUCKETS // 100
    if connection.vendor == "postgresql":
        return devices.extra(  # noqa: S610  # salt is a parameter, not interpolated
            where=[f"{_PG_BUCKET_SQL} < %s"], params=[assignment.salt, limit]
        ).count()
    return sum(
        1
        for device_id in devices.values_list("device_id", flat=True)
        if assignment.version_for(device_id) == assignment.candidate
    )


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
    devices = live_devices(fleet)
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
        for row in devices.filter(online_q(now))
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
        "online": devices.filter(online_q(now)).count(),
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


def _assigned_q(fleet: Fleet, assignment: FleetAssignment, version: int) -> Q:
    """Live devices that PROTOCOL.md's bucket assigns `version` to, as a filter (in SQL on
    PostgreSQL, so a page of a large fleet is counted and sliced by the database)."""
    live = Q(revoked_at__isnull=True)
    nothing = Q(pk__in=[])
    if assignment.candidate is None or assignment.percent <= 0:
        return live if version == assignment.stable else nothing
    if assignment.percent >= 100:
        return live if version == assignment.candidate else nothing
    if version not in (assignment.stable, assignment.candidate):
        return nothing
    limit = assignment.percent * BUCKETS // 100
    if connection.vendor == "postgresql":
        cohort = Q(
            pk__in=Device.objects.filter(fleet=fleet)
            .extra(  # noqa: S610  # salt is a parameter, not interpolated
                where=[f"{_PG_BUCKET_SQL} < %s"], params=[assignment.salt, limit]
            )
            .values("pk")
        )
    else:
        cohort = Q(
            pk__in=[
                pk
                for pk, device_id in live_devices(fleet).values_list("pk", "device_id")
                if assignment.version_for(device_id) == assignment.candidate
            ]
        )
    return live & (cohort if version == assignment.candidate else ~cohort)


def device_query(
    *,
    fleet: Fleet,
    assignment: FleetAssignment,
    version: int | None = None,
    online: bool | None = None,
    platform: str | None = None,
) -> QuerySet[Device]:
    """The fleet's devices matching the filters, by device id: what the registry pages through.

    A version matches devices assigned it (under `assignment`) or running it (acked).
    """
    now = timezone.now()
    devices = Device.objects.filter(fleet=fleet).order_by("device_id")
    if platform:
        devices = devices.filter(platform=platform)
    if online is True:
        devices = devices.filter(online_q(now))
    elif online is False:
        devices = devices.exclude(online_q(now))
    if version is not None:
        devices = devices.filter(Q(acked_version=version) | _assigned_q(fleet, assignment, version))
    return devices


def device_rows(devices: Iterable[Device], *, assignment: FleetAssignment) -> list[dict[str, Any]]:
    """Devices with their assigned version (computed), acked version and presence."""
    now = timezone.now()
    return [
        {
            "device_id": device.device_id,
            "platform": device.platform,
            "model": device.model,
            "sdk": device.sdk,
            "last_seen_at": device.last_seen_at,
            "online": bool(
                device.connected
                and not device.revoked_at
                and device.last_seen_at
                and device.last_seen_at >= now - ONLINE_WINDOW
            ),
            "assigned_version": None
            if device.revoked_at
            else assignment.version_for(device.device_id),
            "acked_version": device.acked_version,
            "revoked": device.revoked_at is not None,
        }
        for device in devices
    ]


def device_list(
    *,
    fleet: Fleet,
    version: int | None = None,
    online: bool | None = None,
    platform: str | None = None,
    limit: int = 200,
) -> list[dict[str, Any]]:
    """The first `limit` matching devices as rows (the registry pages through `device_query`)."""
    assignment = fleet_assignment(fleet.pk)
    devices = device_query(
        fleet=fleet, assignment=assignment, version=version, online=online, platform=platform
    )
    return device_rows(devices[:limit], assignment=assignment)
