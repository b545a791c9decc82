"""API routes of telemetry, mounted under /api/v1/: each part's."""

from django.urls import include, path

urlpatterns = [
    path("", include("telemetry.ingest.urls")),
    path("", include("telemetry.feedback.urls")),
    path("", include("telemetry.dashboards.urls")),
    path("", include("telemetry.alerts.urls")),
]
