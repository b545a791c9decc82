"""Reads of the rollout and device pages that the API does not need: history, choices, key."""

from typing import Any

from django.utils import timezone

from ..models import Device, Fleet, FleetRouting, PolicyVersion, RolloutEvent
from .rollout import live_devices, online_q

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
