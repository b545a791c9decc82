"""The autopilot page `/fleets/<slug>/lab/autopilot/` (the lab's section of the fleet's
navigation): the objective and its state, the next run, the cycles with predicted beside
realized per cell, and the publisher's controls (set, pause, resume, run now).

Thin: the figures are `selectors.autopilot_out` (the API's answer), every change one service
call; a refusal is shown on the page with its status."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, QueryDict
from django.urls import reverse

from controlplane.exceptions import ApplicationError, ValidationFailed
from controlplane.pages import form_input
from controlplane.roles import Role, has_role
from lab.pages import fleet_action, fleet_page, render_page, shown_refused
from routing_policies.cell_schema import cell_key_label
from routing_policies.models import Fleet
from routing_policies.selectors import table_cells, version_table
from telemetry.rollups.segments import segment_names

from .schemas import ObjectiveInputSerializer
from .selectors import autopilot_out, stable_version
from .services import autopilot_pause, autopilot_resume, autopilot_tick, objective_set


def _page(request: HttpRequest, fleet: Fleet, **why: Any) -> HttpResponse:
    out = autopilot_out(fleet)
    stable = stable_version(fleet=fleet)
    labels = (
        [cell_key_label(key) for key in table_cells(version_table(version=stable))]
        if stable is not None
        else []
    )
    chosen, excluded = set(out["objective"]["cells"]), set(out["objective"]["excluded_cells"])
    return render_page(
        request,
        "autopilot/autopilot.html",
        {
            "fleet": fleet,
            "autopilot": out,
            "objective": out["objective"],
            "cycles": out["cycles"],
            "cell_choices": [
                {"label": label, "chosen": label in chosen, "excluded": label in excluded}
                for label in labels
            ],
            "segment_choices": segment_names(fleet.pk),
            "can_publish": has_role(request.user, Role.PUBLISHER),
        },
        status=why.pop("status", 200),
        **why,
    )


autopilot_page = fleet_page(_page, "The fleet's θ autopilot: objective, cycles, controls.")


def _back(fleet: Fleet) -> HttpResponseRedirect:
    return HttpResponseRedirect(reverse("fleet-autopilot", args=[fleet.slug]))


def _form_lists(posted: QueryDict) -> QueryDict:
    """The form's lists as the API takes them: the ticked cells (each group posts a blank as
    well, so none ticked is an empty list: every cell, or none excluded) and the quiet periods'
    text, one period a line."""
    lists = posted.copy()
    for name in ("cells", "excluded_cells"):
        if name in lists:
            lists.setlist(name, [label for label in lists.getlist(name) if label.strip()])
    if "quiet_periods" in lists:
        lines = [line for text in lists.getlist("quiet_periods") for line in text.splitlines()]
        lists.setlist("quiet_periods", [line for line in lines if line.strip()])
    return lists


@fleet_action(Role.PUBLISHER)
def autopilot_set(request: HttpRequest, fleet: Fleet) -> HttpResponse:
    """Set the objective from the page's form (the API's input serializer checks it)."""
    try:
        values = form_input(ObjectiveInputSerializer, _form_lists(request.POST))
        for name in ("cost_ceiling_per_day", "segment"):
            if not request.POST.get(name, "x").strip():
                values[name] = None  # blank: no ceiling, the whole fleet
        objective_set(actor=request.user, fleet=fleet, values=values)
    except ApplicationError as exc:
        return shown_refused(_page, request, fleet, exc, nothing="The objective was not changed.")
    messages.success(request, "Objective saved.")
    return _back(fleet)


@fleet_action(Role.PUBLISHER)
def autopilot_control(request: HttpRequest, fleet: Fleet) -> HttpResponse:
    """Pause, resume or run a cycle now."""
    action = request.POST.get("action", "")
    try:
        if action == "pause":
            autopilot_pause(actor=request.user, fleet=fleet)
        elif action == "resume":
            autopilot_resume(actor=request.user, fleet=fleet)
        elif action == "run":
            cycle = autopilot_tick(fleet=fleet, force=True)
            if cycle is not None:
                messages.success(request, f"Cycle {cycle.number}: {cycle.state}.")
        else:
            raise ValidationFailed(
                "Choose pause, resume or run.",
                details=[{"field": "action", "message": "pause, resume or run"}],
            )
    except ApplicationError as exc:
        return shown_refused(_page, request, fleet, exc, nothing="Nothing was changed.")
    return _back(fleet)
