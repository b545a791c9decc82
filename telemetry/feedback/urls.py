"""API routes of late feedback, mounted under /api/v1/ (telemetry.urls)."""

from django.urls import path

from . import apis

urlpatterns = [
    path("telemetry/feedback", apis.TelemetryFeedbackApi.as_view(), name="api-telemetry-feedback"),
]
