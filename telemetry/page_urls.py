"""Page routes of telemetry: the fleet dashboard."""

from django.urls import path

from . import dashboard_views

urlpatterns = [
    path("fleets/<slug:slug>/dashboard/", dashboard_views.dashboard_page, name="fleet-dashboard"),
]
