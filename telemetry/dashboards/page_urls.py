"""Page routes of the dashboards, and the Prometheus scrape (telemetry.page_urls)."""

from django.urls import path

from ..routes import fleet_routes
from . import apis, views

urlpatterns = [
    *fleet_routes(("dashboard/", views.dashboard_page, "fleet-dashboard")),
    path("metrics", apis.prometheus_metrics, name="prometheus-metrics"),
]
