"""API routes of telemetry, mounted under /api/v1/."""

from django.urls import path

from . import apis, dashboard_views

urlpatterns = [
    path("telemetry", apis.TelemetryIngestApi.as_view(), name="api-telemetry-ingest"),
    path("metrics/fleets/<slug:slug>/", apis.FleetMetricsApi.as_view(), name="api-fleet-metrics"),
    path("metrics/ingest", apis.IngestStatusApi.as_view(), name="api-telemetry-ingest-status"),
    path(
        "fleets/<slug:slug>/dashboard",
        dashboard_views.FleetDashboardApi.as_view(),
        name="api-fleet-dashboard",
    ),
]
