"""HTTP of ingest: a device's batch of events (`POST /api/v1/telemetry`), the landing backlog."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import RequestDataTooBig
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.openapi import error_responses
from routing_policies.apis import DeviceTokenAuthentication, IsDevice
from routing_policies.models import Device

from ..api_schemas import TelemetryAcceptedSerializer
from . import schemas, selectors
from .events import MAX_EVENTS
from .fastpath import ingest_outcome


class TelemetryIngestApi(APIView):
    """`POST /api/v1/telemetry`: a device's batch of events; 202 once it is durable.

    Under the ASGI server `telemetry.ingest.fastpath` answers this path before Django; this view
    documents it in the schema and serves it elsewhere (test client, runserver), alike.
    """

    authentication_classes = [DeviceTokenAuthentication]
    permission_classes = [IsDevice]
    parser_classes: list[Any] = []  # the body is read raw and decoded by msgspec

    @extend_schema(
        # The body is read raw (no DRF parser), so its media type is named here.
        request={"application/json": schemas.TelemetryBatchSerializer},
        responses={202: TelemetryAcceptedSerializer, **error_responses(429)},
        operation_id="telemetry_ingest",
        description=f"At most {MAX_EVENTS} events and 1 MiB. See PROTOCOL.md.",
    )
    def post(self, request: Request) -> Response:
        device = request.auth
        assert isinstance(device, Device)
        try:
            body: bytes | None = request.body
        except RequestDataTooBig:
            body = None
        status_code, data, headers = ingest_outcome(device, body)
        return Response(data, status=status_code, headers=headers)


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
