"""API routes of the dashboards and routing figures, mounted under /api/v1/ (telemetry.urls)."""

from django.urls import path

from ..routes import fleet_routes
from . import apis, views

urlpatterns = [
    path("metrics/fleets/<slug:slug>/", apis.FleetMetricsApi.as_view(), name="api-fleet-metrics"),
    *fleet_routes(("dashboard", views.FleetDashboardApi, "api-fleet-dashboard")),
]
