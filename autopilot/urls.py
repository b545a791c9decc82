"""API routes of the autopilot, mounted under /api/v1/ (controlplane/urls.py)."""

from django.urls import path

from . import apis

BASE = "fleets/<slug:slug>/autopilot"

urlpatterns = [
    path(BASE, apis.AutopilotApi.as_view(), name="api-autopilot"),
    path(f"{BASE}/pause", apis.AutopilotPauseApi.as_view(), name="api-autopilot-pause"),
    path(f"{BASE}/resume", apis.AutopilotResumeApi.as_view(), name="api-autopilot-resume"),
    path(f"{BASE}/run", apis.AutopilotRunApi.as_view(), name="api-autopilot-run"),
    path(
        f"{BASE}/cycles/<int:number>",
        apis.AutopilotCycleApi.as_view(),
        name="api-autopilot-cycle",
    ),
]
