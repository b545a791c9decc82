"""Routes of telemetry outside /api/v1/: each part's pages, and the Prometheus scrape."""

from django.urls import include, path

urlpatterns = [
    path("", include("telemetry.alerts.page_urls")),
    path("", include("telemetry.dashboards.page_urls")),
]
