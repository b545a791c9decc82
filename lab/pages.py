"""What the lab's pages share: the views of a fleet's page (GET) and of a change made on it
(POST), and the page drawn with the refusal it shows (a refused change is shown on the page it
came from, with the HTTP status of the refusal: controlplane.pages.refusal)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_POST

from controlplane.exceptions import ApplicationError
from controlplane.pages import refusal, role_required
from controlplane.roles import Role
from routing_policies.models import Fleet
from routing_policies.pages import fleet_or_404

FleetHandler = Callable[[HttpRequest, Fleet], HttpResponse]
FleetView = Callable[[HttpRequest, str], HttpResponse]


def _fleet_view(role: Role, method: Callable[[Any], Any], handler: FleetHandler) -> FleetView:
    @functools.wraps(handler)
    def view(request: HttpRequest, slug: str) -> HttpResponse:
        return handler(request, fleet_or_404(slug))

    allowed: FleetView = method(view)  # require_GET / require_POST: 405 for another method
    return role_required(role)(allowed)


def fleet_page(page: FleetHandler) -> FleetView:
    """The GET view that draws `page` for the fleet the URL names: any role that reads it."""
    return _fleet_view(Role.VIEWER, require_GET, page)


def fleet_action(role: Role) -> Callable[[FleetHandler], FleetView]:
    """The POST view of a change made on a page of the fleet the URL names, by `role` and up."""
    return functools.partial(_fleet_view, role, require_POST)


def render_page(
    request: HttpRequest,
    template: str,
    context: dict[str, Any],
    *,
    status: int = 200,
    error: str = "",
    problems: list[dict[str, Any]] | None = None,
) -> HttpResponse:
    """`template` with `context`, and the refusal (`error`, its `problems`) when there is one."""
    return render(
        request, template, {**context, "error": error, "problems": problems or []}, status=status
    )


def refused(exc: ApplicationError) -> dict[str, Any]:
    """What `render_page` shows of a refusal met while drawing the page itself."""
    return {"status": exc.status_code, "error": exc.message, "problems": exc.details}


def shown_refused(
    page: Callable[..., HttpResponse],
    request: HttpRequest,
    fleet: Fleet,
    exc: ApplicationError,
    *,
    nothing: str,
    **shown: Any,
) -> HttpResponse:
    """The page (`page(request, fleet, **shown)`) again, saying why the change was refused and
    that `nothing` happened."""
    return refusal(lambda **why: page(request, fleet, **shown, **why), exc, nothing=nothing)
