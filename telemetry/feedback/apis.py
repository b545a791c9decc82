"""HTTP of late feedback: `POST /api/v1/telemetry/feedback`, a device's quality readings."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_view

from controlplane.exceptions import ApplicationError, error_body
from controlplane.openapi import error_responses
from routing_policies.models import Device

from ..api_schemas import TelemetryAcceptedSerializer
from ..device_api import DeviceBatchApi
from ..ratelimit import Outcome, device_batch_gate
from ..structs import request_body
from .messages import MAX_ITEMS, FeedbackTooLarge, TelemetryFeedbackBatch
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


@extend_schema_view(
    post=extend_schema(
        request={"application/json": request_body(TelemetryFeedbackBatch)},
        responses={202: TelemetryAcceptedSerializer, **error_responses(429)},
        operation_id="telemetry_feedback",
        description=(
            f"At most {MAX_ITEMS} items and 1 MiB. The first quality sent for an event wins; "
            "a resend counts as a duplicate. See PROTOCOL.md (extensions)."
        ),
    )
)
class TelemetryFeedbackApi(DeviceBatchApi):
    """`POST /api/v1/telemetry/feedback`: quality readings of events sent before; 202 once
    durable. Each joins its event in the rollups once, whenever the event arrives."""

    def outcome(self, device: Device, body: bytes | None) -> Outcome:
        return feedback_outcome(device, body)
