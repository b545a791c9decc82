"""API routes of the lab, mounted under /api/v1/ (controlplane/urls.py): each part's."""

from django.urls import include, path

urlpatterns = [
    path("", include("lab.playground.urls")),
    path("", include("lab.calibration.urls")),
    path("", include("lab.backtests.urls")),
]
