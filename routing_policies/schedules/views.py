"""The page of a fleet's scheduled changes: upcoming and past, schedule one, cancel one.

Times are typed in the user's time zone (the page fills in the browser's) and stored in UTC.
"""

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from controlplane.pages import form_input, posted_change
from controlplane.roles import Role

from ..policies.fleet_api import by_kind
from ..policies.models import Fleet
from ..policies.pages import fleet_action, fleet_page
from ..policies.selectors import published_versions
from ..reviews.schemas import kind_fields
from . import schemas, selectors, services
from .models import ScheduledChange
from .times import describe, with_offset

Kind = ScheduledChange.Kind

# The fields of some kinds only (a kind's input serializer in `schemas` says which): the page
# shows only the chosen kind's (static/js/kind_fields.js) and, without JavaScript, the kind's
# serializer takes only its own, so a value typed for another kind is neither checked nor kept.
KIND_FIELDS = kind_fields(schemas.SCHEDULE_INPUTS)
KIND_LABELS = {
    Kind.PUBLISH: "Publish the draft",
    Kind.ROLLOUT_START: "Start a rollout (5%)",
    Kind.ROLLOUT_ADVANCE: "Advance the rollout (a stage)",
    Kind.SWITCH: "Switch the fleet",
    Kind.CLOUD_PRESSURE: "Cloud-pressure window",
}


def _page(request: HttpRequest, fleet: Fleet, *, status: int = 200, **extra: Any) -> HttpResponse:
    context = {
        "fleet": fleet,
        **selectors.scheduled_changes(fleet=fleet),
        "kinds": [(kind.value, KIND_LABELS[kind]) for kind in Kind],
        "field_kinds": KIND_FIELDS,
        "versions": published_versions(fleet=fleet),
        "posted": {},
        **extra,
    }
    return render(request, "routing_policies/schedules.html", context, status=status)


schedule_page = fleet_page(_page, "Upcoming and past scheduled changes of the fleet.")


@fleet_action(Role.PUBLISHER)
def schedule_create(request: HttpRequest, fleet: Fleet) -> HttpResponse:
    """Schedule one change at a local time."""

    def change() -> tuple[str, str]:
        posted = request.POST.copy()  # the time as typed in its zone, with that zone's offset
        posted["run_at"] = with_offset(posted.get("run_at", ""), posted.get("time_zone", "UTC"))
        data = form_input(by_kind(schemas.SCHEDULE_INPUTS, posted), posted)
        schedule = services.scheduled_change_create(
            actor=request.user, fleet=fleet, **schemas.schedule_arguments(data)
        )
        return f"Scheduled: {describe(schedule)}.", reverse("fleet-schedules", args=[fleet.slug])

    return posted_change(request, lambda **page: _page(request, fleet, **page), change)


@fleet_action(Role.PUBLISHER)
def schedule_cancel(request: HttpRequest, fleet: Fleet, schedule_id: int) -> HttpResponse:
    """Cancel a pending change."""

    def change() -> tuple[str, str]:
        services.scheduled_change_cancel(actor=request.user, fleet=fleet, schedule_id=schedule_id)
        return "Cancelled.", reverse("fleet-schedules", args=[fleet.slug])

    return posted_change(request, lambda **page: _page(request, fleet, **page), change)
