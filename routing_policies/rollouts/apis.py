"""REST API of rollouts for operators: status, start / advance / pause / resume / complete /
rollback, an immediate switch, cloud pressure. Transitions need the publisher role and are
idempotent: repeating one does nothing.
"""

import functools
from collections.abc import Callable
from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.api import require_object
from controlplane.openapi import ApiAutoSchema, error_responses
from controlplane.permissions import IsPublisher, IsViewer

from ..extensions import rollout_guard_status, rollout_guards, rollout_start_guarded
from ..policies.models import Fleet
from ..policies.selectors import fleet_get
from . import schemas, selectors, services


def _status_response(slug: str) -> Response:
    status = selectors.rollout_status(fleet_get(slug=slug))
    rollout = status["rollout"]
    # The guards' evidence (intervals, states, why they acted) beside the rollout they judge.
    status["guards"] = rollout_guard_status(rollout_id=rollout["id"]) if rollout else None
    return Response(status)


class RolloutStatusApi(APIView):
    """Stable version, the rollout (stage, since when, what next) and fleet convergence."""

    permission_classes = [IsViewer]

    @extend_schema(responses=schemas.RolloutStatusSerializer, operation_id="rollout_status")
    def get(self, request: Request, slug: str) -> Response:
        return _status_response(slug)


class _RolloutActionApi(APIView):
    """A publisher's change of the fleet's rollout: the body validated by the action's input
    serializer (the one its schema shows), one service call, the rollout status back."""

    permission_classes = [IsPublisher]
    input_serializer: type[serializers.Serializer[Any]] = schemas.EmptyInputSerializer

    def input_class(self) -> type[serializers.Serializer[Any]]:
        return self.input_serializer

    def perform(self, request: Request, fleet: Fleet, data: dict[str, Any]) -> None:
        raise NotImplementedError

    def post(self, request: Request, slug: str) -> Response:
        fleet = fleet_get(slug=slug)
        # An empty body is an empty object; `[]`, `null` or `"x"` are refused, not read as `{}`.
        serializer = self.input_class()(data=require_object(request.data))
        serializer.is_valid(raise_exception=True)
        self.perform(request, fleet, serializer.validated_data)
        return _status_response(slug)


Action = type[_RolloutActionApi]


def _rollout_action(input_serializer: type[serializers.Serializer[Any]]) -> Any:
    """A rollout action validating with `input_serializer`, and its schema: that body, the
    rollout status back, 409 on a clash."""

    def decorate(view_class: Action) -> Action:
        view_class.input_serializer = input_serializer
        return extend_schema_view(
            post=extend_schema(
                request=input_serializer,
                responses={200: schemas.RolloutStatusSerializer, **error_responses(409)},
            )
        )(view_class)

    return decorate


@functools.cache
def _start_input(guard_fields: type[serializers.Serializer[Any]] | None) -> Any:
    if guard_fields is None:
        return schemas.RolloutStartBaseSerializer

    class RolloutStartInputSerializer(schemas.RolloutStartBaseSerializer, guard_fields):  # type: ignore[misc,valid-type]
        """The version to roll out at 5%, and optionally its guards (docs/alerts.md)."""

        class Meta:
            ref_name = "RolloutStartInput"

    return RolloutStartInputSerializer


def _installed_start_input() -> type[serializers.Serializer[Any]]:
    """The start body: the version, and the guard fields of the installed guard extension."""
    guards = rollout_guards()
    return _start_input(guards.start_fields if guards is not None else None)  # type: ignore[no-any-return]


class _RolloutStartSchema(ApiAutoSchema):
    def get_request_serializer(self) -> Any:
        return _installed_start_input()


@extend_schema(responses={200: schemas.RolloutStatusSerializer, **error_responses(409)})
class RolloutStartApi(_RolloutActionApi):
    """Start rolling a published version out at 5%."""

    schema = _RolloutStartSchema()
    # The version and holdback run through the start's own serializer, the base of the one the
    # schema shows; the guard fields beside them are the guard extension's input, which it
    # checks itself (`options_of` and its start service, as for its PUT …/rollout/guards).
    input_serializer = schemas.RolloutStartBaseSerializer

    def perform(self, request: Request, fleet: Fleet, data: dict[str, Any]) -> None:
        # Optional guards (docs/alerts.md), set in the same transaction as the start.
        guards = rollout_guards()
        rollout_start_guarded(
            actor=request.user,
            fleet=fleet,
            version=data["version"],
            guard_options=guards.options_of(require_object(request.data)) if guards else {},
            holdback=data.get("holdback", 0),
            segment=data.get("segment"),
        )


@_rollout_action(schemas.RolloutAdvanceInputSerializer)
class RolloutAdvanceApi(_RolloutActionApi):
    """Advance to the next stage (or `to_stage`; naming a stage already reached is a no-op)."""

    def perform(self, request: Request, fleet: Fleet, data: dict[str, Any]) -> None:
        services.rollout_advance(actor=request.user, fleet=fleet, to_stage=data.get("to_stage"))


def _transition_api(service: Callable[..., Any], doc: str) -> Action:
    """The API of a rollout transition without input (pause, resume, complete)."""

    @_rollout_action(schemas.EmptyInputSerializer)
    class TransitionApi(_RolloutActionApi):
        __doc__ = doc

        def perform(self, request: Request, fleet: Fleet, data: dict[str, Any]) -> None:
            service(actor=request.user, fleet=fleet)

    TransitionApi.__name__ = TransitionApi.__qualname__ = f"{service.__name__}_api"
    return TransitionApi


RolloutPauseApi = _transition_api(services.rollout_pause, "Pause at the current stage.")
RolloutResumeApi = _transition_api(services.rollout_resume, "Resume a paused rollout.")


@_rollout_action(schemas.RolloutCompleteInputSerializer)
class RolloutCompleteApi(_RolloutActionApi):
    """At 100%, make the candidate stable (a scoped rollout: with `fleet_wide: true`)."""

    def perform(self, request: Request, fleet: Fleet, data: dict[str, Any]) -> None:
        services.rollout_complete(
            actor=request.user, fleet=fleet, fleet_wide=data.get("fleet_wide", False)
        )


@_rollout_action(schemas.RolloutRollbackInputSerializer)
class RolloutRollbackApi(_RolloutActionApi):
    """Return every device to the stable version."""

    def perform(self, request: Request, fleet: Fleet, data: dict[str, Any]) -> None:
        services.rollout_rollback(actor=request.user, fleet=fleet, reason=data["reason"])


@_rollout_action(schemas.RolloutVersionInputSerializer)
class FleetSwitchApi(_RolloutActionApi):
    """Switch the whole fleet to a published version at once."""

    def perform(self, request: Request, fleet: Fleet, data: dict[str, Any]) -> None:
        services.fleet_switch_version(actor=request.user, fleet=fleet, version=data["version"])


class CloudPressureApi(_RolloutActionApi):
    """A fleet-wide θ nudge with a TTL, pushed to connected devices and to those that connect."""

    input_serializer = schemas.CloudPressureInputSerializer

    @extend_schema(
        request=schemas.CloudPressureInputSerializer,
        responses=schemas.RolloutStatusSerializer,
        operation_id="cloud_pressure",
    )
    def post(self, request: Request, slug: str) -> Response:
        return super().post(request, slug)

    def perform(self, request: Request, fleet: Fleet, data: dict[str, Any]) -> None:
        services.cloud_pressure_set(actor=request.user, fleet=fleet, **data)
