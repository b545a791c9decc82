"""API routes of calibration, mounted under /api/v1/ (lab.urls)."""

from django.urls import path

from . import apis

urlpatterns = [
    path(
        "fleets/<slug:slug>/lab/calibrations",
        apis.CalibrationApi.as_view(),
        name="api-lab-calibrations",
    ),
    path(
        "fleets/<slug:slug>/lab/calibrations/apply",
        apis.CalibrationApplyApi.as_view(),
        name="api-lab-calibrations-apply",
    ),
]
