"""HTTP of late feedback: `POST /api/v1/telemetry/feedback`, a device's quality readings."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import RequestDataTooBig
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.exceptions import ApplicationError, error_body
from controlplane.openapi import error_responses
from routing_policies.apis import DeviceTokenAuthentication, IsDevice
from routing_policies.models import Device

from ..api_schemas import TelemetryAcceptedSerializer
from ..ratelimit import device_batch_gate
from . import schemas
from .messages import MAX_ITEMS, FeedbackTooLarge
from .services import feedback_batch_ingest


def feedback_outcome(
    device: Device, body: bytes | None
) -> tuple[int, dict[str, Any], dict[str, str]]:
    """(status, JSON body, headers) of a device's feedback; `body` None: it was too large.

    As telemetry (ingest.fastpath.ingest_outcome): the rate limit (429, counted apart from
    telemetry's), the size (413), validation (400 naming each bad item and field, or 413 over
    1,000 items), then the store: 202 once committed.
    """
    refused = device_batch_gate(f"feedback:{device.token_hash[:32]}", body)
    if refused is not None:
        return refused
    assert body is not None
    try:
        result = feedback_batch_ingest(device=device, body=body)
    except FeedbackTooLarge as exc:
        return 413, error_body("payload_too_large", str(exc)), {}
    except ApplicationError as exc:
        return exc.status_code, error_body(exc.code, exc.message, exc.details), {}
    return 202, {"accepted": result.accepted, "duplicates": result.duplicates}, {}


class TelemetryFeedbackApi(APIView):
    """`POST /api/v1/telemetry/feedback`: quality readings of events sent before; 202 once
    durable. Each joins its event in the rollups once, whenever the event arrives."""

    authentication_classes = [DeviceTokenAuthentication]
    permission_classes = [IsDevice]
    parser_classes: list[Any] = []  # the body is read raw and decoded by msgspec

    @extend_schema(
        request={"application/json": schemas.TelemetryFeedbackBatchSerializer},
        responses={202: TelemetryAcceptedSerializer, **error_responses(429)},
        operation_id="telemetry_feedback",
        description=(
            f"At most {MAX_ITEMS} items and 1 MiB. The first quality sent for an event wins; "
            "a resend counts as a duplicate. See PROTOCOL.md (extensions)."
        ),
    )
    def post(self, request: Request) -> Response:
        device = request.auth
        assert isinstance(device, Device)
        try:
            body: bytes | None = request.body
        except RequestDataTooBig:
            body = None
        status_code, data, headers = feedback_outcome(device, body)
        return Response(data, status=status_code, headers=headers)
