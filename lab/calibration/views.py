"""The calibration page `/fleets/<slug>/lab/calibrate/`: pick cells and a target, see the θ
curve of each cell with its chosen point, write the chosen θs into the draft.

Thin: the query is a page form, the figures come from `selectors.calibration_compute`, the
write is one `services.calibration_apply` (a refusal, e.g. a stale revision, is shown here
with its status; success goes to the draft, where the backtest sits beside Publish).
"""

from __future__ import annotations

from typing import Any, Final

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse

from controlplane.exceptions import ApplicationError
from controlplane.pages import form_input
from controlplane.roles import Role, has_role
from routing_policies.cell_schema import cell_key_label
from routing_policies.models import Fleet, PolicyVersion
from routing_policies.pricing import CloudPrice
from routing_policies.selectors import draft_get, table_cells, version_get, version_table

from ..backtests.view_models import cost_sentence
from ..pages import fleet_action, fleet_page, refused, render_page, shown_refused
from ..playground.selectors import lab_versions
from ..running import lab_version_default
from ..schemas import version_ref_text
from ..segments import segment_names
from .schemas import HOURS_CHOICES, ApplyPageSerializer, CalibratePageSerializer
from .selectors import DEFAULT_HOURS, calibration_compute, calibration_out, why_fixed
from .services import calibration_apply_cells
from .targets import Target

KIND_LABELS: Final = {
    "alpha": "Device share α (%)",
    "alpha_within_budget": "Device share α (%) within the P95 budget",
    "cloud_share": "Cloud share (%)",
    "p95_within_budget": "Highest α with P95 within budget",
    "cost_ceiling": "Cloud cost ceiling (per hour, per cell)",
    "quality": "Highest α with device quality at or above (%)",
}


def _chart_cells(out: dict[str, Any]) -> list[dict[str, Any] | None]:
    """What calibrate.js draws: per cell its θ curve, current and chosen points, and its curve
    score → draft kept; None for a cell not calibrated, so that the list's index is the
    template's loop index over every cell."""
    return [
        {
            "label": "/".join((c["task_type"], c["latency_budget"], c["privacy_tier"])),
            "budget_ms": c["latency_budget_ms"],
            "curve": c["curve"],
            "kept": (c["quality"] or {}).get("curve", []),
            "current": c["current"],
            "chosen": c["chosen"],
        }
        if c["calibrated"]
        else None
        for c in out["cells"]
    ]


def _describe_costs(result: dict[str, Any]) -> None:
    """Each cost report of the result in words (`cost_text`), for the page."""
    stable = result["stable_version"]
    for holder in [result, *result["cells"]]:
        if holder.get("cost") is not None:
            holder["cost_text"] = cost_sentence(holder["cost"], stable_version=stable)


def _page(request: HttpRequest, fleet: Fleet, **why: Any) -> HttpResponse:
    """The form, and with a query the curve of every cell asked for."""
    draft = draft_get(fleet=fleet)
    chosen = request.GET
    # What the page opens on: the draft, else what devices run (stable); `?version=` another.
    requested = chosen.get("version") or None
    ref: int | str | None = None
    if requested is not None:
        ref = version_ref_text(requested)
        try:
            base: PolicyVersion | None = version_get(fleet=fleet, ref=ref)
        except ApplicationError:
            raise Http404(f"Fleet {fleet.slug!r} has no version {requested!r}.") from None
    else:
        base = lab_version_default(fleet=fleet)
    cells = table_cells(version_table(version=base)) if base else {}
    cell_rows = [
        {"label": cell_key_label(key), "fixed": why_fixed(cell), "mode": cell.mode}
        for key, cell in cells.items()
    ]
    result = None
    if base is not None and "kind" in chosen and not why:
        try:
            query = form_input(CalibratePageSerializer, chosen)
            result = calibration_out(
                calibration_compute(
                    fleet=fleet,
                    target=Target(kind=query["kind"], value=query.get("value")),
                    cells=query.get("cells") or None,
                    hours=query["hours"],
                    version=ref,
                    segment=query.get("segment"),
                )
            )
        except ApplicationError as exc:
            why = refused(exc)
    if result is not None:
        _describe_costs(result)
    ticked = set(chosen.getlist("cells"))
    context = {
        "fleet": fleet,
        "base": base,
        "draft": draft,
        # θs are written into the draft only from a calibration of the draft's own cells.
        "on_draft": base is not None and base.is_draft,
        **lab_versions(fleet=fleet, shown=base),
        "cell_rows": cell_rows,
        "ticked": ticked,
        "kinds": KIND_LABELS,
        "hours_choices": HOURS_CHOICES,
        "query": {
            "kind": chosen.get("kind", "alpha"),
            "value": chosen.get("value", "70"),
            "hours": str(chosen.get("hours", DEFAULT_HOURS)),
            "segment": chosen.get("segment", ""),
        },
        "segments": segment_names(fleet=fleet),
        "result": result,
        "chart_cells": _chart_cells(result) if result else [],
        "can_edit": has_role(request.user, Role.EDITOR),
        "currency": CloudPrice.of_fleet(fleet).currency,
    }
    return render_page(request, "lab/calibrate.html", context, **why)


calibrate_page = fleet_page(_page)


@fleet_action(Role.EDITOR)
def calibrate_apply(request: HttpRequest, fleet: Fleet) -> HttpResponse:
    """Write the ticked cells' chosen θs into the draft; then show the backtest of the result
    (the draft page when none could start)."""
    try:
        values = form_input(ApplyPageSerializer, request.POST)
        draft, backtest = calibration_apply_cells(
            actor=request.user,
            fleet=fleet,
            revision=values["revision"],
            cells=values["theta"],
            segment=values.get("segment"),
        )
    except ApplicationError as exc:
        return shown_refused(_page, request, fleet, exc, nothing="The draft was not changed.")
    into = f"the draft's override for {values['segment']}" if values.get("segment") else "the draft"
    written = f"Wrote θ of {len(values['theta'])} cell(s) into {into} (revision {draft.revision})."
    if backtest is None:
        messages.success(request, f"{written} Backtest it beside Publish before publishing.")
        return HttpResponseRedirect(reverse("fleet-detail", args=[fleet.slug]))
    messages.success(
        request,
        f"{written} Its backtest on the last 24 h is below; the draft page shows it beside "
        "Publish.",
    )
    return HttpResponseRedirect(f"{reverse('fleet-backtests', args=[fleet.slug])}?id={backtest.pk}")
