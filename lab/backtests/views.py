"""The backtests page of a fleet, `/fleets/{slug}/lab/backtests/`: start one (editors), watch
its progress, read its results beside what happened and the stable version. Thin: the start
is one service call; figures come formatted from `view_models`."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse

from controlplane.exceptions import ApplicationError
from controlplane.pages import form_input, posted_values
from controlplane.roles import Role, has_role
from routing_policies.models import Fleet
from routing_policies.selectors import draft_get, published_numbers

from ..pages import fleet_action, fleet_page, render_page, shown_refused
from ..segments import segment_names
from . import schemas, selectors, services
from .models import Backtest
from .view_models import backtest_view, form_lists


def _page(
    request: HttpRequest, fleet: Fleet, *, form: dict[str, str] | None = None, **why: Any
) -> HttpResponse:
    """The latest backtest (or `?id=`), its progress and results; the start form."""
    recent = list(selectors.backtest_list(fleet=fleet))
    chosen: Backtest | None = None
    wanted = request.GET.get("id", "")
    if wanted.isdigit():
        chosen = next((b for b in recent if b.pk == int(wanted)), None) or (
            Backtest.objects.filter(fleet=fleet, pk=int(wanted)).first()
        )
    if chosen is None and recent:
        chosen = recent[0]
    draft = draft_get(fleet=fleet)
    defaults = {
        "version": request.GET.get("version", "draft" if draft else ""),
        "hours": "24",
        "segment": request.GET.get("segment", ""),
    }
    context = {
        "fleet": fleet,
        "draft": draft,
        "numbers": published_numbers(fleet=fleet),
        "segments": segment_names(fleet=fleet),
        "recent": recent,
        "chosen": backtest_view(chosen, slug=fleet.slug) if chosen else None,
        "form": form if form is not None else defaults,
        "can_start": has_role(request.user, Role.EDITOR),
    }
    return render_page(request, "telemetry/backtests.html", context, **why)


backtests_page = fleet_page(_page)


@fleet_action(Role.EDITOR)
def backtest_start(request: HttpRequest, fleet: Fleet) -> HttpResponse:
    """Start the backtest the form asks for (or show the one kept for it)."""
    try:
        values = form_input(schemas.BacktestStartSerializer, form_lists(request.POST))
        backtest, _ = services.backtest_start(actor=request.user, fleet=fleet, **values)
    except ApplicationError as exc:
        nothing = "No backtest was started."
        return shown_refused(
            _page, request, fleet, exc, nothing=nothing, form=posted_values(request)
        )
    url = reverse("fleet-backtests", args=[fleet.slug])
    return HttpResponseRedirect(f"{url}?id={backtest.pk}")
