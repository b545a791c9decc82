"""API routes of rollouts, switches and cloud pressure (under /api/v1/)."""

from django.urls import path
from rest_framework.views import APIView

from . import apis

ROLLOUT_ACTIONS: dict[str, type[APIView]] = {
    "start": apis.RolloutStartApi,
    "advance": apis.RolloutAdvanceApi,
    "pause": apis.RolloutPauseApi,
    "resume": apis.RolloutResumeApi,
    "complete": apis.RolloutCompleteApi,
    "rollback": apis.RolloutRollbackApi,
}

urlpatterns = [
    path("fleets/<slug:slug>/rollout/", apis.RolloutStatusApi.as_view(), name="api-rollout"),
    *(
        path(f"fleets/<slug:slug>/rollout/{action}", api.as_view(), name=f"api-rollout-{action}")
        for action, api in ROLLOUT_ACTIONS.items()
    ),
    path("fleets/<slug:slug>/switch", apis.FleetSwitchApi.as_view(), name="api-fleet-switch"),
    path(
        "fleets/<slug:slug>/cloud-pressure",
        apis.CloudPressureApi.as_view(),
        name="api-cloud-pressure",
    ),
]
