"""Page routes of the dashboards, and the Prometheus scrape (telemetry.page_urls)."""

from django.urls import path

from . import apis, views

urlpatterns = [
    path("fleets/<slug:slug>/dashboard/", views.dashboard_page, name="fleet-dashboard"),
    path("metrics", apis.prometheus_metrics, name="prometheus-metrics"),
]
