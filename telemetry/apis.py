"""HTTP for telemetry: device ingest, routing figures for operators, Prometheus scrape."""

from __future__ import annotations

import hmac
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.exceptions import NotFound, ValidationFailed, error_body
from routing_policies.apis.rollout import DeviceTokenAuthentication, IsDevice
from routing_policies.models import Device, Fleet

from . import prometheus, selectors
from .events import MAX_EVENTS
from .fastpath import ingest_outcome


class TelemetryIngestApi(APIView):
    """`POST /api/v1/telemetry`: a device's batch of events; 202 once it is durable.

    Under the ASGI server `telemetry.fastpath` answers this path before Django; this view
    documents it in the schema and serves it elsewhere (test client, runserver), alike.
    """

    authentication_classes = [DeviceTokenAuthentication]
    permission_classes = [IsDevice]
    parser_classes: list[Any] = []  # the body is read raw and decoded by msgspec

    @extend_schema(
        request=OpenApiTypes.OBJECT,
        responses={202: OpenApiTypes.OBJECT, 400: None, 401: None, 413: None, 429: None},
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


_FILTERS = ("version", "cohort", "route", "task_type", "latency_budget", "privacy_tier")


class FleetMetricsApi(APIView):
    """Routing figures of a fleet over a window, grouped and filtered (reads rollups only)."""

    @extend_schema(
        parameters=[
            OpenApiParameter("window", str, description="15m, 1h, 24h, 7d, … (default 1h)"),
            OpenApiParameter(
                "group_by", str, description="comma-separated: version, cohort, cell, route"
            ),
            *(OpenApiParameter(name, str, description=f"only this {name}") for name in _FILTERS),
            OpenApiParameter("scores", bool, description="add the complexity-score histogram"),
        ],
        responses=OpenApiTypes.OBJECT,
        operation_id="fleet_metrics",
    )
    def get(self, request: Request, slug: str) -> Response:
        fleet = Fleet.objects.filter(slug=slug).first()
        if fleet is None:
            raise NotFound(f"No fleet {slug!r}.")
        params = request.query_params
        filters: dict[str, Any] = {name: params.get(name) or None for name in _FILTERS}
        if filters["version"] is not None:
            try:
                filters["version"] = int(filters["version"])
            except ValueError:
                raise ValidationFailed(
                    "`version` must be a whole number.", details=[{"field": "version"}]
                ) from None
        result = selectors.fleet_metrics(
            fleet_id=fleet.pk,
            window=selectors.parse_window(params.get("window") or "1h"),
            group_by=selectors.parse_group_by(params.get("group_by") or ""),
            filters=filters,
            with_scores=(params.get("scores") or "").lower() in ("1", "true", "yes"),
        )
        return Response({"fleet": fleet.slug, **result})


class IngestStatusApi(APIView):
    """Accepted batches and events waiting for a worker, and the age of the oldest."""

    @extend_schema(responses=OpenApiTypes.OBJECT, operation_id="telemetry_ingest_status")
    def get(self, request: Request) -> Response:
        gauges = selectors.ingest_gauges()
        return Response(
            {
                "landed_batches": gauges.landed_batches,
                "landed_events": gauges.landed_events,
                "lag_seconds": gauges.lag_seconds,
            }
        )


def prometheus_metrics(request: HttpRequest) -> HttpResponse:
    """`/metrics` in the Prometheus text format; a bearer token when METRICS_TOKEN is set."""
    token: str = settings.METRICS_TOKEN
    if token:
        offered = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(offered.encode(), token.encode()):
            return JsonResponse(error_body("not_authenticated", "Bearer token needed."), status=401)
    text = prometheus.render(selectors.route_totals(), selectors.ingest_gauges())
    return HttpResponse(text, content_type=prometheus.CONTENT_TYPE)
