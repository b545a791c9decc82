"""REST API for devices (enrolment, polling) and for operators (rollouts, switch, devices).

Devices authenticate with `Authorization: Bearer <device token>`; operators as elsewhere.
Rollout transitions need the publisher role and are idempotent: repeating one does nothing.
"""

import re
from typing import Any

from django.contrib.auth.models import AnonymousUser
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import serializers, status
from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.permissions import AllowAny, BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.exceptions import NotFound, ValidationFailed
from controlplane.openapi import error_response, error_responses, query_params_validate
from controlplane.pagination import BoundedLimitOffsetPagination
from telemetry.api_schemas import RolloutGuardsInputSerializer

from .. import selectors, services
from ..models import Device, PolicyVersion, Rollout
from ..permissions import IsPublisher, IsViewer
from . import schemas
from .policy import IF_NONE_MATCH, NOT_MODIFIED, _require_object
from .schemas import (
    JsonChoiceField,
    JsonIntegerField,
    JsonRegexField,
    TidyJsonStringField,
)

MAX_VERSION = 2**31 - 1
DEVICE_ID_RE = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}\Z")


class DeviceTokenAuthentication(BaseAuthentication):
    """`Authorization: Bearer <device token>` → request.auth is the Device."""

    def authenticate(self, request: Request) -> tuple[Any, Device] | None:
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        device = services.device_authenticate(token.strip())
        if device is None:
            raise AuthenticationFailed("Unknown or revoked device token.")
        return AnonymousUser(), device

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="devices"'


class IsDevice(BasePermission):
    """The request carries a live device token."""

    message = "A device token is required (Authorization: Bearer <token>)."

    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.auth, Device)


class EnrollApi(APIView):
    """Enrol a device with its fleet's key; the device token is shown once."""

    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]

    class InputSerializer(serializers.Serializer[Any]):
        fleet_key = TidyJsonStringField(max_length=200)
        device_id = JsonRegexField(
            DEVICE_ID_RE,
            max_length=128,
            error_messages={
                "invalid": "1 to 128 letters, digits and . _ : @ -, starting with a letter or "
                "digit (no spaces, nothing trimmed)."
            },
        )
        platform = TidyJsonStringField(max_length=64, required=False, allow_blank=True, default="")
        model = TidyJsonStringField(max_length=128, required=False, allow_blank=True, default="")
        sdk = TidyJsonStringField(max_length=64, required=False, allow_blank=True, default="")

        class Meta:
            ref_name = "DeviceEnrollInput"

    @extend_schema(
        request=InputSerializer,
        responses={
            201: schemas.EnrollmentSerializer,
            401: OpenApiResponse(
                error_response(401).response,
                description="Unknown fleet key (`bad_fleet_key`).",
            ),
            **error_responses(409),
        },
        operation_id="device_enroll",
    )
    def post(self, request: Request) -> Response:
        serializer = self.InputSerializer(data=_require_object(request.data))
        serializer.is_valid(raise_exception=True)
        device, token = services.device_enroll(**serializer.validated_data)
        return Response(
            {"device_token": token, "device_id": device.device_id, "fleet": device.fleet.slug},
            status=status.HTTP_201_CREATED,
        )


class DevicePolicyApi(APIView):
    """The polling path: the device's assigned policy document, with ETag / If-None-Match."""

    authentication_classes = [DeviceTokenAuthentication]
    permission_classes = [IsDevice]

    @extend_schema(
        parameters=[IF_NONE_MATCH],
        responses={
            200: schemas.PolicyDocumentSerializer,
            304: NOT_MODIFIED,
            404: OpenApiResponse(
                error_response(404).response,
                description="The fleet has no published policy yet (`no_policy`).",
            ),
        },
        operation_id="device_policy",
    )
    def get(self, request: Request) -> Response:
        device = request.auth
        assert isinstance(device, Device)
        services.device_seen(device_pk=device.pk)
        number = selectors.fleet_assignment(device.fleet_id).version_for(device.device_id)
        if number is None:
            raise NotFound("The fleet has no published policy yet.", code="no_policy")
        version = PolicyVersion.objects.select_related("fleet").get(
            fleet_id=device.fleet_id, number=number
        )
        tags = [t.strip() for t in request.headers.get("If-None-Match", "").split(",")]
        if version.etag in tags or f"W/{version.etag}" in tags:
            response = Response(status=status.HTTP_304_NOT_MODIFIED)
        else:
            response = Response(selectors.version_document(version=version))
        response["ETag"] = version.etag
        response["Cache-Control"] = "no-cache"
        return response


def _fleet(slug: str) -> Any:
    return selectors.fleet_get(slug=slug)


def _status_response(slug: str, code: int = 200) -> Response:
    return Response(selectors.rollout_status(_fleet(slug)), status=code)


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
        serializer = self.InputSerializer(data=_require_object(request.data))
        serializer.is_valid(raise_exception=True)
        self.perform(request, fleet, serializer.validated_data)
        return _status_response(slug)


class RolloutVersionInputSerializer(serializers.Serializer[Any]):
    version = serializers.IntegerField(min_value=1, max_value=MAX_VERSION, help_text="published")

    class Meta:
        ref_name = "RolloutVersionInput"


class RolloutStartInputSerializer(RolloutVersionInputSerializer, RolloutGuardsInputSerializer):
    """The version to roll out at 5%, and optionally its guards (docs/alerts.md)."""

    class Meta:
        ref_name = "RolloutStartInput"


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


@_rollout_action(RolloutStartInputSerializer)
class RolloutStartApi(_RolloutActionApi):
    """Start rolling a published version out at 5%."""

    def perform(self, request: Request, fleet: Any, data: dict[str, Any]) -> None:
        # Optional guards (telemetry/alert_apis.py, docs/alerts.md): guards, bake_minutes,
        # auto_advance, window_minutes, min_samples; set in the same transaction as the start.
        from telemetry.alerts.apis import guard_options
        from telemetry.alerts.services import rollout_start_guarded

        rollout_start_guarded(
            actor=request.user,
            fleet=fleet,
            version=_need_version(data),
            guard_options=guard_options(_require_object(request.data)),
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
        data = _require_object(request.data)
        services.cloud_pressure_set(
            actor=request.user,
            fleet=fleet,
            theta_offset=data.get("theta_offset"),
            ttl_s=data.get("ttl_s"),
        )
        return _status_response(slug)


class EnrollmentKeyApi(APIView):
    """Issue a new enrolment key for the fleet (shown once)."""

    permission_classes = [IsPublisher]

    @extend_schema(
        request=None,
        responses={201: schemas.EnrollmentKeySerializer},
        operation_id="enrollment_key_rotate",
    )
    def post(self, request: Request, slug: str) -> Response:
        key = services.fleet_enrollment_key_rotate(actor=request.user, fleet=_fleet(slug))
        return Response({"fleet_key": key}, status=status.HTTP_201_CREATED)


class DeviceListApi(APIView):
    """The fleet's devices, a page at a time: `?version=`, `?online=true|false`, `?platform=`
    filter them; `?limit=` (1–1000, default 200) and `?offset=` page through them."""

    permission_classes = [IsViewer]
    pagination_class = BoundedLimitOffsetPagination

    class OutputSerializer(serializers.Serializer[Any]):
        device_id = serializers.CharField()
        platform = serializers.CharField()
        model = serializers.CharField()
        sdk = serializers.CharField()
        last_seen_at = serializers.DateTimeField(allow_null=True)
        online = serializers.BooleanField()
        assigned_version = serializers.IntegerField(allow_null=True)
        acked_version = serializers.IntegerField(allow_null=True)
        revoked = serializers.BooleanField()

        class Meta:
            ref_name = "Device"

    class QuerySerializer(serializers.Serializer[Any]):
        version = serializers.IntegerField(
            min_value=1, max_value=MAX_VERSION, required=False, help_text="assigned or acked"
        )
        # Absent means either; an empty `online=` is refused, not read as absent.
        online = serializers.BooleanField(required=False)
        platform = serializers.CharField(trim_whitespace=False, max_length=64, required=False)

        class Meta:
            ref_name = "DeviceListQuery"

    @extend_schema(
        parameters=[QuerySerializer],
        responses=OutputSerializer(many=True),
        operation_id="device_list",
    )
    def get(self, request: Request, slug: str) -> Response:
        query = query_params_validate(self.QuerySerializer, request)
        fleet = _fleet(slug)
        assignment = selectors.fleet_assignment(fleet.pk)
        devices = selectors.device_query(
            fleet=fleet,
            assignment=assignment,
            version=query.get("version"),
            online=query.get("online"),
            platform=query.get("platform"),
        )
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(devices, request, view=self)
        assert page is not None  # this paginator always pages
        return paginator.get_paginated_response(selectors.device_rows(page, assignment=assignment))


class DeviceRevokeApi(APIView):
    """Revoke a device's token; its open socket is closed with 4401."""

    permission_classes = [IsPublisher]

    @extend_schema(
        request=None, responses=schemas.DeviceRevokedSerializer, operation_id="device_revoke"
    )
    def post(self, request: Request, slug: str, device_id: str) -> Response:
        fleet = _fleet(slug)
        device = Device.objects.filter(fleet=fleet, device_id=device_id).first()
        if device is None:
            raise NotFound(f"Fleet {slug!r} has no device {device_id!r}.")
        device = services.device_revoke(actor=request.user, device=device)
        return Response({"device_id": device.device_id, "revoked_at": device.revoked_at})
