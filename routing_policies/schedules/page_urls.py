"""Page routes of scheduled changes."""

from django.urls import path

from . import views

urlpatterns = [
    path("fleets/<slug:slug>/schedules/", views.schedule_page, name="fleet-schedules"),
    path("fleets/<slug:slug>/schedules/new/", views.schedule_create, name="schedule-create"),
    path(
        "fleets/<slug:slug>/schedules/<int:schedule_id>/cancel/",
        views.schedule_cancel,
        name="schedule-cancel",
    ),
]
