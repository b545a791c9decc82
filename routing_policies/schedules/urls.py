"""API routes of scheduled changes (under /api/v1/)."""

from django.urls import path

from . import apis

urlpatterns = [
    path("fleets/<slug:slug>/schedules/", apis.ScheduleListApi.as_view(), name="api-schedules"),
    path(
        "fleets/<slug:slug>/schedules/stage-plan",
        apis.StagePlanApi.as_view(),
        name="api-schedule-plan",
    ),
    path(
        "fleets/<slug:slug>/schedules/<int:schedule_id>",
        apis.ScheduleDetailApi.as_view(),
        name="api-schedule",
    ),
]
