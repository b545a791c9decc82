"""Reads of devices: authentication by token, the registry (filters, pages, assigned versions),
the device page's counts and choices, and what the push tier re-reads to reconcile."""

import math
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from ..assignment import FleetAssignment
from ..cell_schema import DIMENSIONS, cell_key_label, document_cell, flatten
from ..policies.models import AuditEntry, Fleet
from ..policies.selectors import published_version_get, version_document
from ..rollouts.models import FleetRouting, RolloutEvent
from ..rollouts.selectors import NOT_ACKED_LIMIT, cloud_pressure_live, fleet_assignment
from ..segments.rules import (
    ATTRIBUTES,
    cell_winners,
    device_attributes,
    matching_overrides,
    resolve_cells,
    segments_of,
)
from .models import Device, DeviceQuerySet, device_online, online_q
from .tokens import hash_secret, looks_like_device_token

# A bounded IN list, however many sockets a process holds.
_IN_LIST_LIMIT = 5000


def device_authenticate(token: str) -> Device | None:
    """The live (not revoked) device owning this token."""
    if not looks_like_device_token(token):
        return None
    return (
        Device.objects.select_related("fleet")
        .filter(token_hash=hash_secret(token), revoked_at__isnull=True)
        .first()
    )


def device_get(*, fleet: Fleet, device_id: str) -> Device | None:
    """The fleet's device with this id (revoked or not)."""
    return Device.objects.filter(fleet=fleet, device_id=device_id).first()


def _assigned_q(fleet: Fleet, assignment: FleetAssignment, version: int) -> Q:
    """Live devices that PROTOCOL.md's bucket assigns `version` to, as a filter (in SQL on
    PostgreSQL, so a page of a large fleet is counted and sliced by the database)."""
    live = Q(revoked_at__isnull=True)
    nothing = Q(pk__in=[])
    if not assignment.splits:
        return live if version == assignment.version_at(0) else nothing
    if version not in (assignment.stable, assignment.candidate):
        return nothing
    cohort = Q(
        pk__in=Device.objects.filter(fleet=fleet).in_candidate_cohort(assignment).values("pk")
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
        devices = devices.online(now)
    elif online is False:
        devices = devices.exclude(online_q(now))
    if version is not None:
        devices = devices.filter(Q(acked_version=version) | _assigned_q(fleet, assignment, version))
    return devices


def attributes_of(device: Device) -> dict[str, Any]:
    """The device's attributes as rules read them (edge_sdk.segments.device_attributes)."""
    return device_attributes(
        platform=device.platform, model=device.model, reported=device.attributes
    )


def device_table(*, fleet: Fleet, device: Device, number: int | None = None) -> dict[str, Any]:
    """Which cell values a device runs: a published version (`number`; else the one it last
    acknowledged, else the one it is assigned) resolved with its attributes by the one
    resolution the SDK runs (edge_sdk.overrides). Each cell says the segment whose override
    it takes (None: the base cell) and the fields that override sets. `version` is None when
    the fleet has no such version."""
    assignment = fleet_assignment(fleet.pk)
    if number is None:
        number = device.acked_version or assignment.version_for(device.device_id)
    version = published_version_get(fleet_id=fleet.pk, number=number) if number else None
    attributes = attributes_of(device)
    out: dict[str, Any] = {
        "device_id": device.device_id,
        "version": None,
        "etag": None,
        "attributes": {name: attributes.get(name) for name in ATTRIBUTES},
        "overrides": [],
        "cells": [],
    }
    if version is None:
        return out
    document = version_document(version=version)
    matched = matching_overrides(document, attributes)
    winners = cell_winners(document, matched)
    overrides = document.get("overrides", [])
    cells = []
    for cell in resolve_cells(document, attributes, matched=matched):
        key, values = document_cell(cell)
        index = winners.get(key)
        own = (
            next(f for f in overrides[index]["cells"] if document_cell(f)[0] == key)
            if index is not None
            else {}
        )
        cells.append(
            {
                "cell": cell_key_label(key),
                "values": values,
                "segment": overrides[index]["segment"] if index is not None else None,
                "overridden": sorted(
                    flatten({k: v for k, v in own.items() if k not in DIMENSIONS})
                ),
            }
        )
    out.update(
        version=version.number,
        etag=version.etag,
        overrides=[overrides[index]["segment"] for index in matched],
        cells=cells,
    )
    return out


def device_rows(
    devices: Iterable[Device],
    *,
    assignment: FleetAssignment,
    segments: dict[str, dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Devices with their assigned version (computed), acked version and presence, their
    attributes (every one named, None when unknown) and the `segments` (name -> rule) each is
    in."""
    now = timezone.now()
    rows = []
    for device in devices:
        attributes = attributes_of(device)
        rows.append(
            {
                **_device_row(device, now, assignment),
                "attributes": {name: attributes.get(name) for name in ATTRIBUTES},
                "segments": segments_of(segments or {}, attributes),
            }
        )
    return rows


def _device_row(device: Device, now: datetime, assignment: FleetAssignment) -> dict[str, Any]:
    return {
        "device_id": device.device_id,
        "platform": device.platform,
        "model": device.model,
        "sdk": device.sdk,
        "last_seen_at": device.last_seen_at,
        "online": device_online(device, now),
        "transport": device.transport,
        "assigned_version": None
        if device.revoked_at
        else assignment.version_for(device.device_id, attributes_of(device)),
        "acked_version": device.acked_version,
        "revoked": device.revoked_at is not None,
    }


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


def enrollment_key_prefix(*, fleet: Fleet) -> str:
    """The first characters of the fleet's enrolment key ("" when none was issued)."""
    prefix = (
        FleetRouting.objects.filter(fleet=fleet)
        .values_list("enrollment_key_prefix", flat=True)
        .first()
    )
    return prefix or ""


def device_platforms(*, fleet: Fleet) -> list[str]:
    """The platforms the fleet's devices reported, for the device list's filter."""
    return list(
        Device.objects.filter(fleet=fleet)
        .exclude(platform="")
        .order_by("platform")
        .values_list("platform", flat=True)
        .distinct()
    )


def attribute_census(fleet: Fleet) -> list[tuple[dict[str, Any], int]]:
    """The fleet's enrolled (not revoked) devices grouped by their attributes as rules read
    them, with how many have each set: one GROUP BY, however large the fleet (segments'
    preview evaluates each distinct set once)."""
    groups = (
        Device.objects.live()
        .filter(fleet=fleet)
        .values("platform", "model", "attributes")
        .annotate(devices=Count("id"))
        .order_by()
    )
    census: dict[tuple[tuple[str, Any], ...], int] = {}
    for group in groups:
        attributes = device_attributes(
            platform=group["platform"], model=group["model"], reported=group["attributes"]
        )
        key = tuple(sorted(attributes.items()))
        census[key] = census.get(key, 0) + group["devices"]
    return [(dict(key), count) for key, count in census.items()]


def device_counts(*, fleet: Fleet) -> dict[str, int]:
    """Enrolled devices (not revoked), how many are online now, how many were revoked."""
    devices = Device.objects.filter(fleet=fleet)
    return {
        "devices": devices.live().count(),
        "online": devices.live().online(timezone.now()).count(),
        "revoked": devices.filter(revoked_at__isnull=False).count(),
    }


def live_token_hashes(*, device_pks: list[int]) -> dict[int, str]:
    """The current token hash of each of these devices that is not revoked."""
    tokens: dict[int, str] = {}
    for start in range(0, len(device_pks), _IN_LIST_LIMIT):
        tokens.update(
            Device.objects.filter(pk__in=device_pks[start : start + _IN_LIST_LIMIT])
            .live()
            .values_list("pk", "token_hash")
        )
    return tokens


def fleet_sockets_state(
    *, fleet_id: int, device_pks: list[int]
) -> tuple[FleetAssignment, dict[int, str], dict[str, float] | None]:
    """What a process re-reads to reconcile its sockets of a fleet: the fleet's assignment, each
    device's live token hash (see `live_token_hashes`) and the cloud-pressure nudge in force."""
    return (
        fleet_assignment(fleet_id),
        live_token_hashes(device_pks=device_pks),
        cloud_pressure_live(fleet_id),
    )


# --- convergence: what the fleet runs against what it was told (the rollout status) ---------


def candidate_cohort_count(
    fleet: Fleet, assignment: FleetAssignment, rule: dict[str, Any] | None = None
) -> int:
    """How many live devices are assigned the candidate right now (of those a segment's
    `rule` matches now, when given)."""
    return _on_candidate(_live(fleet).in_scope(rule), assignment)


def _on_candidate(devices: DeviceQuerySet, assignment: FleetAssignment) -> int:
    if assignment.candidate_share <= 0:
        return 0
    if assignment.candidate_share >= 100 and assignment.scope is None:
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


def version_convergence(
    fleet: Fleet,
    assignment: FleetAssignment,
    now: datetime | None = None,
    *,
    rule: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Per version: live devices assigned, acked, and acked and online `now`, in one grouped
    query (the rollout status and the dashboard both read this); with a segment's `rule`,
    only the devices it matches now (their attributes as the registry holds them, the one
    evaluation: one more query)."""
    devices = _live(fleet).in_scope(rule)
    rows = list(
        devices.values("acked_version")
        .annotate(n=Count("id"), online=Count("id", filter=online_q(now or timezone.now())))
        .order_by()
    )
    total = sum(row["n"] for row in rows)
    on_candidate = _on_candidate(devices, assignment)
    assigned = assignment.assigned(devices=total, on_candidate=on_candidate)
    acked = {row["acked_version"]: row for row in rows if row["acked_version"] is not None}
    return {
        "devices": total,
        "online": sum(row["online"] for row in rows),
        "versions": [
            {
                "version": number,
                "role": assignment.role(number),
                "assigned": assigned.get(number, 0),
                "acked": acked[number]["n"] if number in acked else 0,
                "acked_online": acked[number]["online"] if number in acked else 0,
            }
            for number in sorted(set(assigned) | set(acked), reverse=True)
        ],
    }


def not_acked(
    fleet: Fleet, assignment: FleetAssignment, *, limit: int = NOT_ACKED_LIMIT
) -> dict[str, Any]:
    """Live devices that have not acked the version they are assigned (not yet, or never
    connected): how many, and the first `limit` by device id with what each is assigned, what
    it last acked and whether it is online now. In two queries, whatever the fleet's size."""
    behind = Q(pk__in=[])
    for version in {assignment.stable, assignment.candidate} - {None}:
        assert version is not None
        behind |= _assigned_q(fleet, assignment, version) & ~Q(acked_version=version)
    devices = Device.objects.filter(fleet=fleet).filter(behind).order_by("device_id")
    now = timezone.now()
    return {
        "count": devices.count(),
        "devices": [
            {
                "device_id": device.device_id,
                "assigned_version": assignment.version_for(device.device_id, attributes_of(device)),
                "acked_version": device.acked_version,
                "online": device_online(device, now),
            }
            for device in devices.only(
                "device_id",
                "acked_version",
                "connected",
                "revoked_at",
                "transport",
                "last_seen_at",
                "platform",
                "model",
                "attributes",
            )[:limit]
        ],
    }


def fleet_convergence(fleet: Fleet) -> dict[str, Any]:
    """Per version: devices assigned, acked and online; propagation since the last change; the
    devices that have not acked their version."""
    assignment = fleet_assignment(fleet.pk)
    convergence = version_convergence(fleet, assignment)
    last_change = _last_change_at(fleet)
    propagation: dict[str, float | None] = {
        "p50_ms": None,
        "p95_ms": None,
        "p99_ms": None,
        "last_ms": None,
        "count": 0,
    }
    if last_change is not None:
        delays = sorted(
            (acked_at - last_change).total_seconds() * 1000
            for acked_at in _live(fleet)
            .filter(acked_at__gte=last_change)
            .values_list("acked_at", flat=True)
            if acked_at is not None
        )
        propagation = {
            "p50_ms": _percentile(delays, 0.50),
            "p95_ms": _percentile(delays, 0.95),
            "p99_ms": _percentile(delays, 0.99),
            # The last device to apply the change so far (its time to reach the whole fleet
            # once every assigned device acked it).
            "last_ms": delays[-1] if delays else None,
            "count": len(delays),
        }
    return {
        **convergence,
        "last_change_at": last_change,
        "propagation": propagation,
        "not_acked": not_acked(fleet, assignment),
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
