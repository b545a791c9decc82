"""Reads of the rollout and device pages that the API does not need: history, choices, key."""

from typing import Any

from django.db.models import Max
from django.utils import timezone

from ..models import Device, Fleet, FleetRouting, PolicyVersion, RolloutEvent
from .rollout import live_devices, online_q, open_rollout, rollout_out

ROLLOUT_HISTORY_LIMIT = 50


def rollout_history(*, fleet: Fleet, limit: int = ROLLOUT_HISTORY_LIMIT) -> list[RolloutEvent]:
    """The fleet's rollout transitions, newest first, each with its rollout's versions."""
    return list(
        RolloutEvent.objects.filter(rollout__fleet=fleet)
        .select_related("rollout__candidate", "rollout__stable")
        .order_by("-at", "-id")[:limit]
    )


def published_versions(*, fleet: Fleet) -> list[dict[str, Any]]:
    """Every published version, newest first: what a rollout or a switch can name."""
    return [
        {"number": number, "note": note, "published_at": published_at}
        for number, note, published_at in PolicyVersion.objects.filter(
            fleet=fleet, number__isnull=False
        )
        .order_by("-number")
        .values_list("number", "note", "published_at")
    ]


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


def device_counts(*, fleet: Fleet) -> dict[str, int]:
    """Enrolled devices (not revoked), how many are online now, how many were revoked."""
    live = live_devices(fleet)
    return {
        "devices": live.count(),
        "online": live.filter(online_q(timezone.now())).count(),
        "revoked": Device.objects.filter(fleet=fleet, revoked_at__isnull=False).count(),
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
        "stable_share": 100 - rollout.stage if rollout else 100,
        "latest": latest,
        "idle": latest if latest is not None and latest not in running else None,
    }
