"""API routes of ingest, mounted under /api/v1/ (telemetry.urls)."""

from django.urls import path

from ..feedback.apis import TelemetryFeedbackApi
from . import apis

urlpatterns = [
    path("telemetry", apis.TelemetryIngestApi.as_view(), name="api-telemetry-ingest"),
    path("telemetry/feedback", TelemetryFeedbackApi.as_view(), name="api-telemetry-feedback"),
    path("metrics/ingest", apis.IngestStatusApi.as_view(), name="api-telemetry-ingest-status"),
]
