"""Page routes of gray release: the rollout page and its actions."""

from django.urls import path

from . import views

urlpatterns = [
    path("fleets/<slug:slug>/rollout/", views.rollout_page, name="fleet-rollout"),
    path("fleets/<slug:slug>/rollout/start/", views.rollout_start, name="rollout-start"),
    path("fleets/<slug:slug>/rollout/advance/", views.rollout_advance, name="rollout-advance"),
    path("fleets/<slug:slug>/rollout/pause/", views.rollout_pause, name="rollout-pause"),
    path("fleets/<slug:slug>/rollout/resume/", views.rollout_resume, name="rollout-resume"),
    path("fleets/<slug:slug>/rollout/complete/", views.rollout_complete, name="rollout-complete"),
    path("fleets/<slug:slug>/rollout/rollback/", views.rollout_rollback, name="rollout-rollback"),
    path("fleets/<slug:slug>/switch/", views.fleet_switch, name="fleet-switch"),
    path("fleets/<slug:slug>/cloud-pressure/", views.cloud_pressure, name="fleet-cloud-pressure"),
]
