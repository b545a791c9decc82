"""What the lab's pages share: the GET view of a page of a fleet, and the page drawn with the
refusal it shows (a POST refused is shown on the page it came from, controlplane.pages)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from controlplane.pages import role_required
from controlplane.roles import Role
from routing_policies.models import Fleet
from routing_policies.pages import fleet_or_404

Page = Callable[[HttpRequest, Fleet], HttpResponse]


def fleet_page(page: Page) -> Callable[[HttpRequest, str], HttpResponse]:
    """The GET view that draws `page` for the fleet the URL names: any role that reads it."""

    @role_required(Role.VIEWER)
    @require_GET
    @functools.wraps(page)
    def view(request: HttpRequest, slug: str) -> HttpResponse:
        return page(request, fleet_or_404(slug))

    return view


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
