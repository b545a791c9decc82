"""API routes of the autopilot, mounted under /api/v1/ (controlplane/urls.py)."""

from django.urls import path

from . import apis

BASE = "fleets/<slug:slug>/autopilot"

urlpatterns = [
    path(BASE, apis.AutopilotApi.as_view(), name="api-autopilot"),
    *(
        path(f"{BASE}/{name}", api.as_view(), name=f"api-autopilot-{name}")
        for name, api in apis.ACTIONS.items()
    ),
    path(
        f"{BASE}/cycles/<int:number>",
        apis.AutopilotCycleApi.as_view(),
        name="api-autopilot-cycle",
    ),
]
