"""The page of a fleet's scheduled changes: upcoming and past, schedule one, cancel one.

Times are typed in the user's time zone (the page fills in the browser's) and stored in UTC.
"""

from typing import Any

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from controlplane.exceptions import ApplicationError
from controlplane.pages import (
    NumberField,
    PageForm,
    WholeNumberField,
    posted_values,
    refusal,
    role_required,
)
from controlplane.roles import Role

from ..policies.models import Fleet
from ..policies.pages import fleet_or_404
from ..policies.selectors import published_versions
from . import selectors, services
from .models import ScheduledChange
from .times import describe, local_to_utc, zone

Kind = ScheduledChange.Kind

# The fields each kind of change takes besides its time (what `services._params` reads): the
# page shows only the chosen kind's (static/js/kind_fields.js) and, without JavaScript, takes
# only those from the form, so a value typed for another kind is neither checked nor kept.
KIND_FIELDS: dict[str, tuple[str, ...]] = {
    Kind.PUBLISH: ("note",),
    Kind.ROLLOUT_START: ("version", "holdback"),
    Kind.ROLLOUT_ADVANCE: ("to_stage", "require_healthy_guards"),
    Kind.SWITCH: ("version",),
    Kind.CLOUD_PRESSURE: ("theta_offset", "ttl_s"),
}
KIND_LABELS = {
    Kind.PUBLISH: "Publish the draft",
    Kind.ROLLOUT_START: "Start a rollout (5%)",
    Kind.ROLLOUT_ADVANCE: "Advance the rollout (a stage)",
    Kind.SWITCH: "Switch the fleet",
    Kind.CLOUD_PRESSURE: "Cloud-pressure window",
}


def kinds_of(field: str) -> str:
    """The kinds that take `field`, space-separated (the form's `data-kinds`)."""
    return " ".join(kind for kind, fields in KIND_FIELDS.items() if field in fields)


class ScheduleForm(PageForm):
    """One change at a time typed in `time_zone`."""

    kind = forms.ChoiceField(label="What", choices=ScheduledChange.Kind.choices)
    run_at = forms.CharField(label="When", max_length=40)
    time_zone = forms.CharField(label="The time zone", max_length=64)
    version = WholeNumberField(label="The version", empty=None, minimum=1)
    holdback = WholeNumberField(label="The holdback", empty=None, minimum=0)
    to_stage = WholeNumberField(label="The stage", empty=None, minimum=1)
    require_healthy_guards = forms.BooleanField(required=False)
    theta_offset = NumberField(label="The θ offset", empty=None)
    ttl_s = WholeNumberField(label="The duration", empty=None, minimum=1)
    note = forms.CharField(label="The release note", required=False, max_length=2000)


def _page(request: HttpRequest, fleet: Fleet, *, status: int = 200, **extra: Any) -> HttpResponse:
    context = {
        "fleet": fleet,
        **selectors.scheduled_changes(fleet=fleet),
        "kinds": [(kind.value, KIND_LABELS[kind]) for kind in Kind],
        "field_kinds": {
            field: kinds_of(field) for fields in KIND_FIELDS.values() for field in fields
        },
        "versions": published_versions(fleet=fleet),
        "posted": {},
        **extra,
    }
    return render(request, "routing_policies/schedules.html", context, status=status)


@role_required(Role.VIEWER)
@require_GET
def schedule_page(request: HttpRequest, slug: str) -> HttpResponse:
    """Upcoming and past scheduled changes of the fleet."""
    return _page(request, fleet_or_404(slug))


@role_required(Role.PUBLISHER)
@require_POST
def schedule_create(request: HttpRequest, slug: str) -> HttpResponse:
    """Schedule one change at a local time."""
    fleet = fleet_or_404(slug)
    try:
        kind = request.POST.get("kind", "")
        fields = KIND_FIELDS.get(kind, ())
        posted = {
            name: value
            for name, value in request.POST.items()
            if name in ("kind", "run_at", "time_zone") or name in fields
        }
        data = ScheduleForm(posted).values()
        zone(data["time_zone"])
        params = {name: data[name] for name in fields if data[name] not in (None, "")}
        if "require_healthy_guards" in fields:
            params["require_healthy_guards"] = data["require_healthy_guards"]
        schedule = services.scheduled_change_create(
            actor=request.user,
            fleet=fleet,
            kind=data["kind"],
            run_at=local_to_utc(data["run_at"], data["time_zone"]),
            time_zone=data["time_zone"],
            params=params,
        )
    except ApplicationError as exc:
        return refusal(
            lambda **page: _page(request, fleet, **page), exc, posted=posted_values(request)
        )
    messages.success(request, f"Scheduled: {describe(schedule)}.")
    return HttpResponseRedirect(reverse("fleet-schedules", args=[fleet.slug]))


@role_required(Role.PUBLISHER)
@require_POST
def schedule_cancel(request: HttpRequest, slug: str, schedule_id: int) -> HttpResponse:
    """Cancel a pending change."""
    fleet = fleet_or_404(slug)
    try:
        services.scheduled_change_cancel(actor=request.user, fleet=fleet, schedule_id=schedule_id)
    except ApplicationError as exc:
        return refusal(lambda **page: _page(request, fleet, **page), exc)
    messages.success(request, "Cancelled.")
    return HttpResponseRedirect(reverse("fleet-schedules", args=[fleet.slug]))
