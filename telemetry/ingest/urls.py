"""API routes of ingest, mounted under /api/v1/ (telemetry.urls)."""

from django.urls import path

from . import apis

urlpatterns = [
    path("telemetry", apis.TelemetryIngestApi.as_view(), name="api-telemetry-ingest"),
    path("metrics/ingest", apis.IngestStatusApi.as_view(), name="api-telemetry-ingest-status"),
]
