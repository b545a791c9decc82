"""Page routes of the lab (controlplane/urls.py): each part's; the API is in `lab.urls`."""

from django.urls import include, path

urlpatterns = [
    path("", include("lab.playground.page_urls")),
    path("", include("lab.calibration.page_urls")),
    path("", include("lab.backtests.page_urls")),
]
