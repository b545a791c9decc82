"""The lab page `/fleets/<slug>/lab/`: the playground. It paints the first answer of the
explain API server-side, then static/js/lab.js asks the API again as the sliders move.
Publishers set the fleet's cloud price here too (the figure every cost is priced by)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from controlplane.exceptions import ApplicationError
from controlplane.pages import form_input, posted_values
from controlplane.roles import Role
from edge_sdk.decision import DeviceState, TaskSignals
from routing_policies.cell_schema import MODES
from routing_policies.models import Fleet
from routing_policies.pages import FleetCloudPriceInputSerializer
from routing_policies.pricing import CloudPrice
from routing_policies.services import fleet_cloud_price_set

from ..pages import fleet_action, fleet_page
from ..schemas import version_ref_text
from .explain import CellOverride
from .selectors import lab_table, lab_versions, playground_explain
from .sliders import DEVICE_SLIDERS, START_CELL, START_DEVICE, START_TASK, TASK_SLIDERS

# The price form's inputs as the page names them (its input is the API's: a blank part keeps it).
PRICE_LABELS = {"cloud_price_per_1k_tokens": "Per 1,000 tokens", "cloud_price_per_call": "Per call"}


def _lab_page(
    request: HttpRequest,
    fleet: Fleet,
    *,
    status: int = 200,
    price_error: str = "",
    price_values: dict[str, str] | None = None,
) -> HttpResponse:
    """The playground on `?version=` (a number or `draft`; default the draft, else what
    devices run, else the latest)."""
    requested = request.GET.get("version") or None
    try:
        table = lab_table(fleet=fleet, ref=version_ref_text(requested) if requested else None)
    except ApplicationError:
        if requested is None:
            return render(request, "telemetry/lab.html", {"fleet": fleet, "empty": True})
        raise Http404(f"Fleet {fleet.slug!r} has no version {requested!r}.") from None
    # Start on the seed's own case (text, interactive, normal) or else the first cell that
    # scores the task, where every slider matters.
    key = (
        START_CELL
        if START_CELL in table.cells
        else next(
            (k for k, c in table.cells.items() if c.mode == "auto" and not c.keeps_data_on_device),
            next(iter(table.cells)),
        )
    )
    first = playground_explain(
        fleet=fleet,
        ref=table.version.number if table.version.number is not None else "draft",
        key=key,
        override=CellOverride(),
        task=TaskSignals(**START_TASK),
        device=DeviceState(**START_DEVICE),
        with_matrix=True,
        samples="seed",
    )
    rows = [
        {
            "task_type": task_type,
            "latency_budget": budget,
            "cells": [(task_type, budget, tier) for tier in table.dimensions["privacy_tier"]],
        }
        for task_type in table.dimensions["task_type"]
        for budget in table.dimensions["latency_budget"]
    ]
    price = CloudPrice.of_fleet(fleet)
    context: dict[str, Any] = {
        "fleet": fleet,
        "table": table,
        **lab_versions(fleet=fleet, shown=table.version),
        "rows": rows,
        "tiers": table.dimensions["privacy_tier"],
        "key": key,
        "modes": MODES,
        "task_sliders": [(slider, START_TASK[slider.name]) for slider in TASK_SLIDERS],
        "device_sliders": [(slider, START_DEVICE[slider.name]) for slider in DEVICE_SLIDERS],
        "first": first,
        "price": price,
        "price_error": price_error,
        "price_values": price_values
        or {
            "cloud_price_per_1k_tokens": f"{price.per_1k_tokens:g}",
            "cloud_price_per_call": f"{price.per_call:g}",
        },
    }
    return render(request, "telemetry/lab.html", context, status=status)


lab_page = fleet_page(_lab_page)


@fleet_action(Role.PUBLISHER)
def lab_cloud_price(request: HttpRequest, fleet: Fleet) -> HttpResponse:
    """Set the fleet's cloud price from the lab page; a refusal shows the page again (400)."""
    try:
        values = form_input(FleetCloudPriceInputSerializer, request.POST)
        fleet_cloud_price_set(
            actor=request.user,
            fleet=fleet,
            per_1k_tokens=values.get("cloud_price_per_1k_tokens"),
            per_call=values.get("cloud_price_per_call"),
        )
    except ApplicationError as exc:
        # Each bad part by the name the page gives it, with the API's words for what is wrong.
        reasons = [
            f"{PRICE_LABELS[d['field']]}: {d['message']}"
            for d in exc.details
            if d.get("field") in PRICE_LABELS
        ]
        return _lab_page(
            request,
            fleet,
            status=exc.status_code,
            price_error="Not saved: " + ("; ".join(reasons) + "." if reasons else exc.message),
            price_values=posted_values(request),
        )
    messages.success(request, "Saved the fleet's cloud price: every cost figure uses it now.")
    return redirect("fleet-lab", slug=fleet.slug)
