"""API routes of rollouts, switches and cloud pressure (under /api/v1/)."""

from django.urls import path

from . import apis

urlpatterns = [
    path("fleets/<slug:slug>/rollout/", apis.RolloutStatusApi.as_view(), name="api-rollout"),
    path(
        "fleets/<slug:slug>/rollout/start",
        apis.RolloutStartApi.as_view(),
        name="api-rollout-start",
    ),
    path(
        "fleets/<slug:slug>/rollout/advance",
        apis.RolloutAdvanceApi.as_view(),
        name="api-rollout-advance",
    ),
    path(
        "fleets/<slug:slug>/rollout/pause",
        apis.RolloutPauseApi.as_view(),
        name="api-rollout-pause",
    ),
    path(
        "fleets/<slug:slug>/rollout/resume",
        apis.RolloutResumeApi.as_view(),
        name="api-rollout-resume",
    ),
    path(
        "fleets/<slug:slug>/rollout/complete",
        apis.RolloutCompleteApi.as_view(),
        name="api-rollout-complete",
    ),
    path(
        "fleets/<slug:slug>/rollout/rollback",
        apis.RolloutRollbackApi.as_view(),
        name="api-rollout-rollback",
    ),
    path("fleets/<slug:slug>/switch", apis.FleetSwitchApi.as_view(), name="api-fleet-switch"),
    path(
        "fleets/<slug:slug>/cloud-pressure",
        apis.CloudPressureApi.as_view(),
        name="api-cloud-pressure",
    ),
]
