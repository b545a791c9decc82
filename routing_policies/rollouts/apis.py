"""REST API of rollouts for operators: status, start / advance / pause / resume / complete /
rollback, an immediate switch, cloud pressure. Transitions need the publisher role and are
idempotent: repeating one does nothing.
"""

import functools
from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.api import JsonChoiceField, JsonIntegerField, TidyJsonStringField, require_object
from controlplane.exceptions import ValidationFailed
from controlplane.openapi import ApiAutoSchema, error_responses
from controlplane.permissions import IsPublisher, IsViewer

from ..extensions import rollout_guard_status, rollout_guards, rollout_start_guarded
from ..policies.models import Fleet
from ..policies.selectors import fleet_get
from ..validation import MAX_VERSION
from . import schemas, selectors, services
from .models import Rollout


def _fleet(slug: str) -> Fleet:
    return fleet_get(slug=slug)


def _status_response(slug: str, code: int = 200) -> Response:
    status = selectors.rollout_status(_fleet(slug))
    rollout = status["rollout"]
    # The guards' evidence (intervals, states, why they acted) beside the rollout they judge.
    status["guards"] = rollout_guard_status(rollout_id=rollout["id"]) if rollout else None
    return Response(status, status=code)


class RolloutStatusApi(APIView):
    """Stable version, the rollout (stage, since when, what next) and fleet convergence."""

    permission_classes = [IsViewer]

    @extend_schema(responses=schemas.RolloutStatusSerializer, operation_id="rollout_status")
    def get(self, request: Request, slug: str) -> Response:
        return _status_response(slug)


class _RolloutActionApi(APIView):
    permission_classes = [IsPublisher]

    class InputSerializer(serializers.Serializer[Any]):
        version = JsonIntegerField(min_value=1, max_value=MAX_VERSION, required=False)
        to_stage = JsonChoiceField(choices=[5, 25, 100], required=False)
        reason = TidyJsonStringField(max_length=500, required=False, allow_blank=True, default="")

        class Meta:
            ref_name = "RolloutActionInput"

    def perform(self, request: Request, fleet: Any, data: dict[str, Any]) -> None:
        raise NotImplementedError

    def post(self, request: Request, slug: str) -> Response:
        fleet = _fleet(slug)
        # An empty body is an empty object; `[]`, `null` or `"x"` are refused, not read as `{}`.
        serializer = self.InputSerializer(data=require_object(request.data))
        serializer.is_valid(raise_exception=True)
        self.perform(request, fleet, serializer.validated_data)
        return _status_response(slug)


class RolloutVersionInputSerializer(serializers.Serializer[Any]):
    version = serializers.IntegerField(min_value=1, max_value=MAX_VERSION, help_text="published")

    class Meta:
        ref_name = "RolloutVersionInput"


def _holdback_field() -> Any:
    return JsonIntegerField(
        min_value=0,
        max_value=Rollout.MAX_HOLDBACK,
        required=False,
        help_text="percent of the fleet kept on the stable version at 100% until the rollout "
        "completes, so the guards keep a comparison group; default 0",
    )


class RolloutStartBaseSerializer(RolloutVersionInputSerializer):
    holdback = _holdback_field()

    class Meta:
        ref_name = "RolloutStartBase"


class RolloutAdvanceInputSerializer(serializers.Serializer[Any]):
    to_stage = serializers.ChoiceField(
        choices=list(Rollout.STAGES), required=False, help_text="default: the next stage"
    )

    class Meta:
        ref_name = "RolloutAdvanceInput"


class RolloutRollbackInputSerializer(serializers.Serializer[Any]):
    reason = TidyJsonStringField(max_length=500, required=False, allow_blank=True)

    class Meta:
        ref_name = "RolloutRollbackInput"


class EmptyInputSerializer(serializers.Serializer[Any]):
    """An empty JSON object (or no body at all)."""

    class Meta:
        ref_name = "EmptyInput"


def _rollout_action(request: type[serializers.Serializer[Any]]) -> Any:
    """The schema of a rollout action: its own body, the rollout status back, 409 on a clash."""
    return extend_schema_view(
        post=extend_schema(
            request=request,
            responses={200: schemas.RolloutStatusSerializer, **error_responses(409)},
        )
    )


def _need_version(data: dict[str, Any]) -> int:
    if "version" not in data:
        raise ValidationFailed(
            'Name the version: {"version": 2}.',
            details=[{"field": "version", "message": "is required"}],
        )
    return int(data["version"])


@functools.cache
def _start_input(guard_fields: type[serializers.Serializer[Any]] | None) -> Any:
    if guard_fields is None:
        return RolloutStartBaseSerializer

    class RolloutStartInputSerializer(RolloutStartBaseSerializer, guard_fields):  # type: ignore[misc,valid-type]
        """The version to roll out at 5%, and optionally its guards (docs/alerts.md)."""

        class Meta:
            ref_name = "RolloutStartInput"

    return RolloutStartInputSerializer


class _RolloutStartSchema(ApiAutoSchema):
    """The start body: the version, and the guard fields of the installed guard extension."""

    def get_request_serializer(self) -> Any:
        guards = rollout_guards()
        return _start_input(guards.start_fields if guards is not None else None)


@extend_schema(responses={200: schemas.RolloutStatusSerializer, **error_responses(409)})
class RolloutStartApi(_RolloutActionApi):
    """Start rolling a published version out at 5%."""

    schema = _RolloutStartSchema()

    class InputSerializer(_RolloutActionApi.InputSerializer):
        holdback = _holdback_field()

        class Meta:
            ref_name = "RolloutStartActionInput"

    def perform(self, request: Request, fleet: Any, data: dict[str, Any]) -> None:
        # Optional guards (docs/alerts.md), set in the same transaction as the start.
        guards = rollout_guards()
        body = require_object(request.data)
        rollout_start_guarded(
            actor=request.user,
            fleet=fleet,
            version=_need_version(data),
            guard_options=guards.options_of(body) if guards is not None else {},
            holdback=data.get("holdback", 0),
        )


@_rollout_action(RolloutAdvanceInputSerializer)
class RolloutAdvanceApi(_RolloutActionApi):
    """Advance to the next stage (or `to_stage`; naming a stage already reached is a no-op)."""

    def perform(self, request: Request, fleet: Any, data: dict[str, Any]) -> None:
        services.rollout_advance(actor=request.user, fleet=fleet, to_stage=data.get("to_stage"))


@_rollout_action(EmptyInputSerializer)
class RolloutPauseApi(_RolloutActionApi):
    """Pause at the current stage."""

    def perform(self, request: Request, fleet: Any, data: dict[str, Any]) -> None:
        services.rollout_pause(actor=request.user, fleet=fleet)


@_rollout_action(EmptyInputSerializer)
class RolloutResumeApi(_RolloutActionApi):
    """Resume a paused rollout."""

    def perform(self, request: Request, fleet: Any, data: dict[str, Any]) -> None:
        services.rollout_resume(actor=request.user, fleet=fleet)


@_rollout_action(EmptyInputSerializer)
class RolloutCompleteApi(_RolloutActionApi):
    """At 100%, make the candidate stable."""

    def perform(self, request: Request, fleet: Any, data: dict[str, Any]) -> None:
        services.rollout_complete(actor=request.user, fleet=fleet)


@_rollout_action(RolloutRollbackInputSerializer)
class RolloutRollbackApi(_RolloutActionApi):
    """Return every device to the stable version."""

    def perform(self, request: Request, fleet: Any, data: dict[str, Any]) -> None:
        services.rollout_rollback(actor=request.user, fleet=fleet, reason=data.get("reason", ""))


@_rollout_action(RolloutVersionInputSerializer)
class FleetSwitchApi(_RolloutActionApi):
    """Switch the whole fleet to a published version at once."""

    def perform(self, request: Request, fleet: Any, data: dict[str, Any]) -> None:
        services.fleet_switch_version(actor=request.user, fleet=fleet, version=_need_version(data))


class CloudPressureApi(APIView):
    """A fleet-wide θ nudge with a TTL, pushed to connected devices and to those that connect."""

    permission_classes = [IsPublisher]

    @extend_schema(
        request=schemas.CloudPressureInputSerializer,
        responses=schemas.RolloutStatusSerializer,
        operation_id="cloud_pressure",
    )
    def post(self, request: Request, slug: str) -> Response:
        fleet = _fleet(slug)
        data = require_object(request.data)
        services.cloud_pressure_set(
            actor=request.user,
            fleet=fleet,
            theta_offset=data.get("theta_offset"),
            ttl_s=data.get("ttl_s"),
        )
        return _status_response(slug)
