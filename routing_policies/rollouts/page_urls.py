"""Page routes of gray release: the rollout page and its actions."""

from django.urls import path

from . import views

ROLLOUT_ACTIONS = {
    "start": views.rollout_start,
    "advance": views.rollout_advance,
    "pause": views.rollout_pause,
    "resume": views.rollout_resume,
    "complete": views.rollout_complete,
    "rollback": views.rollout_rollback,
}

urlpatterns = [
    path("fleets/<slug:slug>/rollout/", views.rollout_page, name="fleet-rollout"),
    *(
        path(f"fleets/<slug:slug>/rollout/{action}/", view, name=f"rollout-{action}")
        for action, view in ROLLOUT_ACTIONS.items()
    ),
    path("fleets/<slug:slug>/switch/", views.fleet_switch, name="fleet-switch"),
    path("fleets/<slug:slug>/cloud-pressure/", views.cloud_pressure, name="fleet-cloud-pressure"),
]
