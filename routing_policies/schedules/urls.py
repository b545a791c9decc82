"""API routes of scheduled changes (under /api/v1/)."""

from django.urls import path

from . import apis

SCHEDULES = "fleets/<slug:slug>/schedules"

urlpatterns = [
    path(f"{SCHEDULES}/", apis.ScheduleListApi.as_view(), name="api-schedules"),
    path(f"{SCHEDULES}/stage-plan", apis.StagePlanApi.as_view(), name="api-schedule-plan"),
    path(f"{SCHEDULES}/<int:schedule_id>", apis.ScheduleDetailApi.as_view(), name="api-schedule"),
]
