"""Page routes of scheduled changes."""

from django.urls import path

from . import views

SCHEDULES = "fleets/<slug:slug>/schedules"

urlpatterns = [
    path(f"{SCHEDULES}/", views.schedule_page, name="fleet-schedules"),
    path(f"{SCHEDULES}/new/", views.schedule_create, name="schedule-create"),
    path(f"{SCHEDULES}/<int:schedule_id>/cancel/", views.schedule_cancel, name="schedule-cancel"),
]
