"""The lab page `/fleets/<slug>/lab/`: the playground. It paints the first answer of the
explain API server-side, then static/js/lab.js asks the API again as the sliders move."""

from __future__ import annotations

from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from controlplane.exceptions import ApplicationError
from controlplane.pages import fleet_or_404, role_required
from edge_sdk.decision import DeviceState, TaskSignals
from routing_policies.cell_schema import MODES
from routing_policies.pricing import CloudPrice
from routing_policies.roles import Role

from .explain import SEED_DEVICE_MS, CellOverride
from .selectors import lab_table, lab_versions, playground_explain
from .sliders import DEVICE_SLIDERS, START_CELL, START_DEVICE, START_TASK, TASK_SLIDERS


@role_required(Role.VIEWER)
@require_GET
def lab_page(request: HttpRequest, slug: str) -> HttpResponse:
    """The playground on `?version=` (a number or `draft`; default the draft, else latest)."""
    fleet = fleet_or_404(slug)
    requested = request.GET.get("version") or None
    ref: int | str | None = requested
    if requested is not None and requested.isascii() and requested.isdigit():
        ref = int(requested)
    try:
        table = lab_table(fleet=fleet, ref=ref)
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
        device_ms=SEED_DEVICE_MS,
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
    context: dict[str, Any] = {
        "fleet": fleet,
        "table": table,
        **lab_versions(fleet=fleet),
        "rows": rows,
        "tiers": table.dimensions["privacy_tier"],
        "key": key,
        "modes": MODES,
        "task_sliders": [(slider, START_TASK[slider.name]) for slider in TASK_SLIDERS],
        "device_sliders": [(slider, START_DEVICE[slider.name]) for slider in DEVICE_SLIDERS],
        "first": first,
        "price": CloudPrice.of_fleet(fleet),
    }
    return render(request, "telemetry/lab.html", context)
