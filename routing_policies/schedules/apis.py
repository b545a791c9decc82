"""REST API of scheduled changes: list, schedule one, schedule a stage plan, move, cancel."""

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.api import require_object
from controlplane.exceptions import NotFound
from controlplane.openapi import error_responses
from controlplane.permissions import IsPublisher, IsViewer

from ..policies.models import Fleet
from ..policies.selectors import fleet_get
from ..reviews import schemas as review_schemas
from ..reviews.apis import request_body
from . import schemas, selectors, services

PARAM_NAMES = (
    *("version", "holdback", "revision", "note", "to_stage", "require_healthy_guards"),
    *("theta_offset", "ttl_s"),
)


def _one(fleet: Fleet, schedule_id: int, code: int = 200) -> Response:
    schedule = selectors.scheduled_change_get(fleet=fleet, schedule_id=schedule_id)
    if schedule is None:
        raise NotFound(f"Fleet {fleet.slug!r} has no scheduled change {schedule_id}.")
    return Response(selectors.scheduled_change_out(schedule), status=code)


class ScheduleListApi(APIView):
    """The fleet's upcoming and past scheduled changes; publishers schedule one."""

    def get_permissions(self) -> list[Any]:
        return [IsViewer()] if self.request.method == "GET" else [IsPublisher()]

    @extend_schema(responses=schemas.ScheduledChangesSerializer, operation_id="schedule_list")
    def get(self, request: Request, slug: str) -> Response:
        return Response(selectors.scheduled_changes(fleet=fleet_get(slug=slug)))

    @extend_schema(
        request=schemas.ScheduleInputSerializer,
        responses={201: schemas.ScheduledChangeSerializer, **error_responses(409)},
        operation_id="schedule_create",
    )
    def post(self, request: Request, slug: str) -> Response:
        fleet = fleet_get(slug=slug)
        data = request_body(
            review_schemas.by_kind(schemas.SCHEDULE_INPUTS, require_object(request.data)), request
        )
        schedule = services.scheduled_change_create(
            actor=request.user,
            fleet=fleet,
            kind=data["kind"],
            run_at=data["run_at"],
            time_zone=data["time_zone"],
            params={name: data[name] for name in PARAM_NAMES if name in data},
        )
        return _one(fleet, schedule.pk, 201)


class StagePlanApi(APIView):
    """A rollout in timed steps ("5% now, 25% at 14:00 if the guards are healthy, 100% …")."""

    permission_classes = [IsPublisher]

    @extend_schema(
        request=schemas.StagePlanInputSerializer,
        responses={201: schemas.ScheduledChangesSerializer, **error_responses(409)},
        operation_id="schedule_stage_plan",
    )
    def post(self, request: Request, slug: str) -> Response:
        fleet = fleet_get(slug=slug)
        data = request_body(schemas.StagePlanInputSerializer, request)
        services.stage_plan_create(
            actor=request.user,
            fleet=fleet,
            version=data["version"],
            steps=[{"to_stage": 5, "run_at": data["start_at"]}, *map(dict, data["steps"])],
            time_zone=data["time_zone"],
            holdback=data.get("holdback", 0),
        )
        return Response(selectors.scheduled_changes(fleet=fleet), status=201)


class ScheduleDetailApi(APIView):
    """One scheduled change; publishers move it (PATCH) or cancel it (DELETE) while pending."""

    def get_permissions(self) -> list[Any]:
        return [IsViewer()] if self.request.method == "GET" else [IsPublisher()]

    @extend_schema(
        responses={200: schemas.ScheduledChangeSerializer, **error_responses(404)},
        operation_id="schedule_detail",
    )
    def get(self, request: Request, slug: str, schedule_id: int) -> Response:
        return _one(fleet_get(slug=slug), schedule_id)

    @extend_schema(
        request=schemas.ScheduleUpdateSerializer,
        responses={200: schemas.ScheduledChangeSerializer, **error_responses(404, 409)},
        operation_id="schedule_update",
    )
    def patch(self, request: Request, slug: str, schedule_id: int) -> Response:
        fleet = fleet_get(slug=slug)
        data = request_body(schemas.ScheduleUpdateSerializer, request)
        services.scheduled_change_update(
            actor=request.user,
            fleet=fleet,
            schedule_id=schedule_id,
            run_at=data["run_at"],
            time_zone=data.get("time_zone"),
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
