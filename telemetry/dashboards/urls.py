"""API routes of the dashboards and routing figures, mounted under /api/v1/ (telemetry.urls)."""

from django.urls import path

from . import apis, views

urlpatterns = [
    path("metrics/fleets/<slug:slug>/", apis.FleetMetricsApi.as_view(), name="api-fleet-metrics"),
    path(
        "fleets/<slug:slug>/dashboard",
        views.FleetDashboardApi.as_view(),
        name="api-fleet-dashboard",
    ),
]
