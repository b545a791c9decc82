"""REST API of scheduled changes: list, schedule one, schedule a stage plan, move, cancel."""

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.api import ViewerReadsApi
from controlplane.exceptions import NotFound
from controlplane.openapi import error_responses
from controlplane.permissions import IsPublisher, IsViewer

from ..policies.fleet_api import Answer, FleetAction, FleetActionApi, fleet_input
from ..policies.models import Fleet
from ..policies.selectors import fleet_get
from ..rollouts.models import Rollout
from . import schemas, selectors, services


def _one(fleet: Fleet, schedule_id: int, code: int = 200) -> Response:
    schedule = selectors.scheduled_change_get(fleet=fleet, schedule_id=schedule_id)
    if schedule is None:
        raise NotFound(f"Fleet {fleet.slug!r} has no scheduled change {schedule_id}.")
    return Response(selectors.scheduled_change_out(schedule), status=code)


class ScheduleListApi(FleetActionApi):
    """The fleet's upcoming and past scheduled changes; publishers schedule one."""

    does = FleetAction(
        IsPublisher, schemas.ScheduleInputSerializer, "schedule_create", reads=IsViewer
    )
    answer = Answer(schemas.ScheduledChangeSerializer, 201, errors=(409,))

    @extend_schema(responses=schemas.ScheduledChangesSerializer, operation_id="schedule_list")
    def get(self, request: Request, slug: str) -> Response:
        return Response(selectors.scheduled_changes(fleet=fleet_get(slug=slug)))

    def act(self, request: Request, fleet: Fleet, data: dict[str, Any]) -> Any:
        schedule = services.scheduled_change_create(
            actor=request.user, fleet=fleet, **schemas.schedule_arguments(data)
        )
        return _one(fleet, schedule.pk, 201)


class StagePlanApi(FleetActionApi):
    """A rollout in timed steps ("5% now, 25% at 14:00 if the guards are healthy, 100% …")."""

    does = FleetAction(IsPublisher, schemas.StagePlanInputSerializer, "schedule_stage_plan")
    answer = Answer(schemas.ScheduledChangesSerializer, 201, errors=(409,))

    def act(self, request: Request, fleet: Fleet, data: dict[str, Any]) -> Any:
        start = {"to_stage": Rollout.STAGES[0], "run_at": data.pop("start_at")}
        steps = [start, *map(dict, data.pop("steps"))]
        services.stage_plan_create(actor=request.user, fleet=fleet, steps=steps, **data)
        return selectors.scheduled_changes(fleet=fleet)


class ScheduleDetailApi(ViewerReadsApi):
    """One scheduled change; publishers move it (PATCH) or cancel it (DELETE) while pending."""

    @extend_schema(
        responses={200: schemas.ScheduledChangeSerializer, **error_responses(404)},
        operation_id="schedule_detail",
    )
    def get(self, request: Request, slug: str, schedule_id: int) -> Response:
        return _one(fleet_get(slug=slug), schedule_id)

    @fleet_input(
        schemas.ScheduleUpdateSerializer,
        responses={200: schemas.ScheduledChangeSerializer, **error_responses(404, 409)},
        operation_id="schedule_update",
    )
    def patch(
        self, request: Request, fleet: Fleet, data: dict[str, Any], schedule_id: int
    ) -> Response:
        services.scheduled_change_update(
            actor=request.user, fleet=fleet, schedule_id=schedule_id, **data
        )
        return _one(fleet, schedule_id)

    @extend_schema(
        request=None,
        responses={200: schemas.ScheduledChangeSerializer, **error_responses(404, 409)},
        operation_id="schedule_cancel",
    )
    def delete(self, request: Request, slug: str, schedule_id: int) -> Response:
        fleet = fleet_get(slug=slug)
        services.scheduled_change_cancel(actor=request.user, fleet=fleet, schedule_id=schedule_id)
        return _one(fleet, schedule_id)
