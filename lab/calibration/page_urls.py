"""Page routes of calibration (lab.page_urls; the API is in `calibration.urls`)."""

from django.urls import path

from . import views

urlpatterns = [
    path("fleets/<slug:slug>/lab/calibrate/", views.calibrate_page, name="lab-calibrate"),
    path(
        "fleets/<slug:slug>/lab/calibrate/apply/",
        views.calibrate_apply,
        name="lab-calibrate-apply",
    ),
]
