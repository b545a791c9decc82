"""Reads of scheduled changes: a fleet's upcoming and past ones, as the API and page show them."""

from typing import Any

from ..policies.models import Fleet
from .models import ScheduledChange
from .times import describe_what, in_zone

PAST_LIMIT = 50


def scheduled_change_out(schedule: ScheduledChange) -> dict[str, Any]:
    """One scheduled change, its time in UTC and in the zone it was entered in."""
    return {
        "id": schedule.pk,
        "fleet": schedule.fleet.slug,
        "kind": schedule.kind,
        "what": describe_what(schedule),
        "run_at": schedule.run_at,
        "run_at_local": in_zone(schedule.run_at, schedule.time_zone),
        "time_zone": schedule.time_zone,
        "params": schedule.params,
        "plan": schedule.plan or None,
        "state": schedule.state,
        "outcome": schedule.outcome,
        "created_by": schedule.created_by_name,
        "created_at": schedule.created_at,
        "ran_at": schedule.ran_at,
    }


def scheduled_changes(*, fleet: Fleet) -> dict[str, list[dict[str, Any]]]:
    """`{"upcoming": [...] soonest first, "past": [...] latest first}` (two queries)."""
    rows = ScheduledChange.objects.select_related("fleet").filter(fleet=fleet)
    upcoming = rows.filter(state=ScheduledChange.State.PENDING).order_by("run_at", "id")
    past = rows.exclude(state=ScheduledChange.State.PENDING).order_by("-run_at", "-id")
    return {
        "upcoming": [scheduled_change_out(s) for s in upcoming],
        "past": [scheduled_change_out(s) for s in past[:PAST_LIMIT]],
    }


def scheduled_change_get(*, fleet: Fleet, schedule_id: int) -> ScheduledChange | None:
    """One of the fleet's scheduled changes."""
    return (
        ScheduledChange.objects.select_related("fleet").filter(fleet=fleet, pk=schedule_id).first()
    )
