"""What the lab's pages share: the views of a fleet's page (GET) and of a change made on it
(POST: routing_policies.pages, the one maker of every part's fleet pages), and the page drawn
with the refusal it shows (a refused change is shown on the page it came from, with the HTTP
status of the refusal: controlplane.pages.refusal)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from controlplane.exceptions import ApplicationError
from controlplane.pages import refusal
from routing_policies.models import Fleet
from routing_policies.pages import fleet_action, fleet_page

__all__ = ["fleet_action", "fleet_page", "refused", "render_page", "shown_refused"]


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
