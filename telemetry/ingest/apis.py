"""HTTP of ingest: a device's batch of events (`POST /api/v1/telemetry`), the landing backlog."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.openapi import PROTOBUF, error_responses
from routing_policies.models import Device

from ..api_schemas import TelemetryAcceptedSerializer
from ..device_api import DeviceBatchApi
from ..ratelimit import Outcome
from ..structs import request_body
from . import schemas, selectors
from .events import MAX_EVENTS, TelemetryBatch
from .fastpath import ingest_outcome
from .wire import ACCEPTS, BodyFormat


@extend_schema_view(
    post=extend_schema(
        # The body is read raw (no DRF parser), so its media types are named here: JSON, or a
        # `TelemetryBatch` of edge_sdk/wire/edge_routing.proto (docs/PROTOCOL.md, "Binary
        # frames and compression"), either one also gzip or zstd (`Content-Encoding`).
        request={"application/json": request_body(TelemetryBatch), PROTOBUF: OpenApiTypes.BINARY},
        responses={202: TelemetryAcceptedSerializer, **error_responses(429)},
        operation_id="telemetry_ingest",
        description=f"At most {MAX_EVENTS} events and 1 MiB. See PROTOCOL.md.",
    )
)
class TelemetryIngestApi(DeviceBatchApi):
    """`POST /api/v1/telemetry`: a device's batch of events; 202 once it is durable.

    Under the ASGI server `telemetry.ingest.fastpath` answers this path before Django; this view
    documents it in the schema and serves it elsewhere (test client, runserver), alike.
    """

    def outcome(self, device: Device, body: bytes | None) -> Outcome:
        headers = self.request.headers
        body_format = BodyFormat.of(
            headers.get("Content-Type", ""), headers.get("Content-Encoding", "")
        )
        status, data, extra = ingest_outcome(device, body, body_format)
        return status, data, {**ACCEPTS, **extra}


class IngestStatusApi(APIView):
    """Accepted batches and events waiting for a worker, and the age of the oldest."""

    @extend_schema(responses=schemas.IngestStatusSerializer, operation_id="telemetry_ingest_status")
    def get(self, request: Request) -> Response:
        gauges = selectors.ingest_gauges()
        return Response(
            {
                "landed_batches": gauges.landed_batches,
                "landed_events": gauges.landed_events,
                "lag_seconds": gauges.lag_seconds,
            }
        )
