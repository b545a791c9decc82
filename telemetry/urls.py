"""API routes of telemetry, mounted under /api/v1/."""

from django.urls import path

from . import apis

urlpatterns = [
    path("telemetry", apis.TelemetryIngestApi.as_view(), name="api-telemetry-ingest"),
    path("metrics/fleets/<slug:slug>/", apis.FleetMetricsApi.as_view(), name="api-fleet-metrics"),
    path("metrics/ingest", apis.IngestStatusApi.as_view(), name="api-telemetry-ingest-status"),
]
