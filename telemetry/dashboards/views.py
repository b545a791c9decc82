"""The fleet dashboard: the page (`/fleets/<slug>/dashboard/`) and its JSON API
(`GET /api/v1/fleets/<slug>/dashboard`). Both return what `selectors.fleet_dashboard` computes
for the view named by the query (window and filters); the page paints it at once and then
follows the live feed (dashboards.consumers.DashboardConsumer)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.exceptions import ApplicationError
from controlplane.openapi import query_params_validate
from controlplane.pages import role_required
from controlplane.roles import Role
from routing_policies.pages import fleet_or_404
from routing_policies.selectors import fleet_get

from ..models import Cohort
from ..rollups.segments import segment_names
from .schemas import (
    FleetDashboardQuerySerializer,
    FleetDashboardSerializer,
    parse_view,
    refuse_unknown,
)
from .selectors import ROUTES, WINDOWS, DashboardView, fleet_dashboard


class FleetDashboardApi(APIView):
    """Everything a fleet's dashboard draws for one window and filters, from rollups only."""

    @extend_schema(
        parameters=[FleetDashboardQuerySerializer],
        responses=FleetDashboardSerializer,
        operation_id="fleet_dashboard",
        description=(
            "Headline figures (α, cloud share, P95, fallback rate), series per time bucket "
            "(shares, fallback by kind, cache, errors, privacy violations), latency P50/P95/P99 "
            "per route with the policy's latency budgets, the policy grid (cloud share and P95 "
            "per cell), stable and candidate cohorts, time-axis markers (publishes, switches, "
            "rollout stages) and fleet convergence. Unknown parameters are refused (400)."
        ),
    )
    def get(self, request: Request, slug: str) -> Response:
        query = query_params_validate(FleetDashboardQuerySerializer, request)
        fleet = fleet_get(slug=slug)
        refuse_unknown(request.query_params)
        return Response(fleet_dashboard(fleet=fleet, view=DashboardView(**query)))


@role_required(Role.VIEWER)
@require_GET
def dashboard_page(request: HttpRequest, slug: str) -> HttpResponse:
    """The fleet's live dashboard; a bad query shows the default view with the reason (400)."""
    fleet = fleet_or_404(slug)
    error = ""
    status = 200
    try:
        view = parse_view(request.GET)
        payload = fleet_dashboard(fleet=fleet, view=view)  # an unknown segment is refused
    except ApplicationError as exc:
        view, error, status = DashboardView(), exc.message, 400
        payload = fleet_dashboard(fleet=fleet, view=view)
    context: dict[str, Any] = {
        "fleet": fleet,
        "view": view,
        "payload": payload,
        "error": error,
        "windows": list(WINDOWS),
        "routes": ROUTES,
        "cohorts": [c.value for c in Cohort],
        "segments": segment_names(fleet.pk),
    }
    return render(request, "telemetry/dashboard.html", context, status=status)
