"""The routes of a fleet, as the URL modules of telemetry's parts list them: one row a route."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.urls import URLPattern, path
from rest_framework.views import APIView

FLEET_PREFIX = "fleets/<slug:slug>/"

Route = tuple[str, type[APIView] | Callable[..., Any], str]


def fleet_routes(*rows: Route) -> list[URLPattern]:
    """Each row (the path below `fleets/<slug>/`, an API view class or a page's view function,
    the route's name) as a URL pattern."""
    return [path(f"{FLEET_PREFIX}{route}", _view(view), name=name) for route, view, name in rows]


def _view(view: type[APIView] | Callable[..., Any]) -> Callable[..., Any]:
    if isinstance(view, type) and issubclass(view, APIView):
        return view.as_view()
    return view
