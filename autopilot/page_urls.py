"""Page routes of the autopilot (controlplane/urls.py), in the lab's section."""

from django.urls import path

from . import views

BASE = "fleets/<slug:slug>/lab/autopilot/"

urlpatterns = [
    path(BASE, views.autopilot_page, name="fleet-autopilot"),
    path(f"{BASE}objective/", views.autopilot_set, name="fleet-autopilot-set"),
    path(f"{BASE}control/", views.autopilot_control, name="fleet-autopilot-control"),
]
