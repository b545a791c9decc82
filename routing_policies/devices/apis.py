"""REST API of devices: enrolment and the polling path (device token), and for operators the
registry, revoking a device and issuing a new enrolment key.

Devices authenticate with `Authorization: Bearer <device token>`; operators as elsewhere.
"""

import re
from typing import Any

from django.contrib.auth.models import AnonymousUser
from django.http import HttpResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.permissions import AllowAny, BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane import wire
from controlplane.api import JsonRegexField, TidyJsonStringField, require_object
from controlplane.exceptions import NotFound
from controlplane.openapi import (
    ApiSerializer,
    error_response,
    error_responses,
    json_or_protobuf,
)
from controlplane.pagination import BoundedLimitOffsetPagination
from controlplane.permissions import IsPublisher, IsViewer

from ..policies import delta_api
from ..policies.apis import IF_NONE_MATCH, NOT_MODIFIED
from ..policies.deltas import published_delta_json
from ..policies.fleet_api import query_input
from ..policies.schemas import PolicyDocumentSerializer
from ..policies.selectors import fleet_get, published_version_get, version_document
from ..rollouts.selectors import fleet_assignment
from ..segments.selectors import segment_rules
from . import schemas, selectors, services
from .models import TRANSPORT_MQTT, TRANSPORT_WS, Device

DEVICE_ID_RE = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}\Z")


class DeviceTokenAuthentication(BaseAuthentication):
    """`Authorization: Bearer <device token>` → request.auth is the Device."""

    def authenticate(self, request: Request) -> tuple[Any, Device] | None:
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        device = selectors.device_authenticate(token.strip())
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

    class InputSerializer(ApiSerializer):
        component_name = "DeviceEnrollInput"
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
        attributes = schemas.DeviceAttributesField(required=False, default=dict)

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
        serializer = self.InputSerializer(data=require_object(request.data))
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
    content_negotiation_class = wire.JsonWhateverAccepted

    @extend_schema(
        parameters=[delta_api.DeltaQuerySerializer, IF_NONE_MATCH, delta_api.A_IM],
        responses={
            **json_or_protobuf(200, PolicyDocumentSerializer, "`PolicyDocument`"),
            **json_or_protobuf(
                226,
                delta_api.PolicyDeltaSerializer,
                "`PolicyDelta`",
                "IM Used (`IM: policy-delta`): the delta from the version `since` or "
                '`If-None-Match` names to the assigned one (docs/PROTOCOL.md, "Policy deltas").',
            ),
            304: NOT_MODIFIED,
            404: OpenApiResponse(
                error_response(404).response,
                description="The fleet has no published policy yet (`no_policy`).",
            ),
        },
        operation_id="device_policy",
    )
    def get(self, request: Request) -> HttpResponse:
        device = request.auth
        assert isinstance(device, Device)
        base, base_etag = delta_api.base_named(request, a_im=True)  # a bad `since`: 400
        services.device_seen(device_pk=device.pk)
        number = fleet_assignment(device.fleet_id).version_for(
            device.device_id, selectors.attributes_of(device)
        )
        if number is None:
            raise NotFound("The fleet has no published policy yet.", code="no_policy")
        version = published_version_get(fleet_id=device.fleet_id, number=number)
        if version is None:
            raise NotFound("The fleet has no published policy yet.", code="no_policy")
        tags = [t.strip() for t in request.headers.get("If-None-Match", "").split(",")]
        response: HttpResponse
        if version.etag in tags or f"W/{version.etag}" in tags:
            response = Response(status=status.HTTP_304_NOT_MODIFIED)
        elif (
            base is not None
            and base != number
            and (
                # Policy deltas (policies/delta_api.py): 226 with the delta from the version the
                # device holds, when the control plane makes one; RFC 3229: the ETag stays the
                # assigned version's.
                delta := published_delta_json(
                    fleet_id=device.fleet_id, base=base, target=number, base_etag=base_etag
                )
            )
        ):
            # Protobuf and compression when asked for, as for the document.
            response = wire.delta_response(request, delta, status=226)
            response["IM"] = delta_api.DELTA_IM
        else:
            document = version_document(version=version)
            # Protobuf and compression when asked for (docs/PROTOCOL.md, "Binary frames").
            response = wire.document_response(request, document) or Response(document)
        response["Cache-Control"] = "no-cache"
        response["Vary"] = "A-IM"
        # The delta too is tagged as the assigned version (RFC 3229), weakly in protobuf.
        return wire.negotiated_document(request, response, etag=version.etag)


class EnrollmentKeyApi(APIView):
    """Issue a new enrolment key for the fleet (shown once)."""

    permission_classes = [IsPublisher]

    @extend_schema(
        request=None,
        responses={201: schemas.EnrollmentKeySerializer},
        operation_id="enrollment_key_rotate",
    )
    def post(self, request: Request, slug: str) -> Response:
        key = services.fleet_enrollment_key_rotate(actor=request.user, fleet=fleet_get(slug=slug))
        return Response({"fleet_key": key}, status=status.HTTP_201_CREATED)


class DeviceListApi(APIView):
    """The fleet's devices, a page at a time: `?version=`, `?online=true|false`, `?platform=`
    filter them; `?limit=` (1–1000, default 200) and `?offset=` page through them."""

    permission_classes = [IsViewer]
    pagination_class = BoundedLimitOffsetPagination

    class OutputSerializer(ApiSerializer):
        component_name = "Device"
        device_id = serializers.CharField()
        platform = serializers.CharField()
        model = serializers.CharField()
        sdk = serializers.CharField()
        last_seen_at = serializers.DateTimeField(allow_null=True)
        online = serializers.BooleanField()
        transport = serializers.ChoiceField(
            choices=[TRANSPORT_WS, TRANSPORT_MQTT],
            help_text="the channel it last connected over: ws (the WebSocket) or mqtt "
            "(docs/PROTOCOL.md, MQTT); online follows that channel's rule",
        )
        assigned_version = serializers.IntegerField(allow_null=True)
        acked_version = serializers.IntegerField(allow_null=True)
        revoked = serializers.BooleanField()
        attributes = schemas.AttributesOutSerializer(
            help_text="every attribute rules read (platform and model too); null: unknown"
        )
        segments = serializers.ListField(
            child=serializers.CharField(), help_text="the fleet's segments it is in, by name"
        )

    @query_input(
        schemas.DeviceListQuerySerializer,
        responses=OutputSerializer(many=True),
        operation_id="device_list",
    )
    def get(self, request: Request, slug: str, query: dict[str, Any]) -> Response:
        fleet = fleet_get(slug=slug)
        assignment = fleet_assignment(fleet.pk)
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
        rows = selectors.device_rows(
            page, assignment=assignment, segments=segment_rules(fleet=fleet)
        )
        return paginator.get_paginated_response(rows)


class DeviceTableApi(APIView):
    """Which cell values a device runs: a version resolved with its attributes (the SDK's own
    resolution, edge_sdk.overrides)."""

    permission_classes = [IsViewer]

    @query_input(
        schemas.DeviceTableQuerySerializer,
        responses={200: schemas.DeviceTableSerializer, **error_responses(404)},
        operation_id="device_table",
    )
    def get(self, request: Request, slug: str, device_id: str, query: dict[str, Any]) -> Response:
        fleet = fleet_get(slug=slug)
        device = selectors.device_get(fleet=fleet, device_id=device_id)
        if device is None:
            raise NotFound(f"Fleet {slug!r} has no device {device_id!r}.")
        table = selectors.device_table(fleet=fleet, device=device, number=query.get("version"))
        if table["version"] is None and query.get("version") is not None:
            raise NotFound(f"Fleet {slug!r} has no published version {query['version']}.")
        return Response(table)


class DeviceRevokeApi(APIView):
    """Revoke a device's token; its open socket is closed with 4401."""

    permission_classes = [IsPublisher]

    @extend_schema(
        request=None, responses=schemas.DeviceRevokedSerializer, operation_id="device_revoke"
    )
    def post(self, request: Request, slug: str, device_id: str) -> Response:
        fleet = fleet_get(slug=slug)
        device = selectors.device_get(fleet=fleet, device_id=device_id)
        if device is None:
            raise NotFound(f"Fleet {slug!r} has no device {device_id!r}.")
        device = services.device_revoke(actor=request.user, device=device)
        return Response({"device_id": device.device_id, "revoked_at": device.revoked_at})
