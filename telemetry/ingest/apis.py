"""HTTP for telemetry: device ingest, routing figures for operators, Prometheus scrape."""

from __future__ import annotations

import hmac
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.exceptions import NotFound, error_body
from controlplane.openapi import error_responses, query_params_validate
from routing_policies.apis.rollout import MAX_VERSION, DeviceTokenAuthentication, IsDevice
from routing_policies.models import Device, Fleet
from routing_policies.validation import DIMENSION_VALUE_RE

from . import api_schemas, prometheus, selectors
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
        # The body is read raw (no DRF parser), so its media type is named here.
        request={"application/json": api_schemas.TelemetryBatchSerializer},
        responses={202: api_schemas.TelemetryAcceptedSerializer, **error_responses(429)},
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
# 1 to 99999 minutes, 9600 hours or 400 days (the longest window the rollups keep).
_WINDOW_RE = (
    r"\A(?:[1-9][0-9]{0,4}m|(?:[1-9][0-9]{0,2}|[1-8][0-9]{3}|9[0-5][0-9]{2}|9600)h"
    r"|(?:[1-9][0-9]?|[1-3][0-9]{2}|400)d)\Z"
)
_GROUP_NAME = "(?:version|cohort|cell|route|task_type|latency_budget|privacy_tier)"


class FleetMetricsApi(APIView):
    """Routing figures of a fleet over a window, grouped and filtered (reads rollups only)."""

    class QuerySerializer(serializers.Serializer[Any]):
        window = serializers.RegexField(
            _WINDOW_RE,
            trim_whitespace=False,
            default="1h",
            help_text="15m, 1h, 24h, 7d, … up to 400d",
        )
        group_by = serializers.RegexField(
            rf"\A{_GROUP_NAME}(?:,{_GROUP_NAME})*\Z",
            trim_whitespace=False,
            required=False,
            help_text="comma-separated: version, cohort, cell, route, task_type, "
            "latency_budget, privacy_tier",
        )
        version = serializers.IntegerField(min_value=1, max_value=MAX_VERSION, required=False)
        cohort = serializers.ChoiceField(choices=["stable", "candidate"], required=False)
        route = serializers.ChoiceField(choices=["device", "cloud", "draft_refine"], required=False)
        task_type = serializers.RegexField(
            DIMENSION_VALUE_RE, trim_whitespace=False, required=False
        )
        latency_budget = serializers.RegexField(
            DIMENSION_VALUE_RE, trim_whitespace=False, required=False
        )
        privacy_tier = serializers.RegexField(
            DIMENSION_VALUE_RE, trim_whitespace=False, required=False
        )
        scores = serializers.BooleanField(
            default=False, help_text="add the complexity-score histogram"
        )

        class Meta:
            ref_name = "FleetMetricsQuery"

    @extend_schema(
        parameters=[QuerySerializer],
        responses=api_schemas.FleetMetricsSerializer,
        operation_id="fleet_metrics",
    )
    def get(self, request: Request, slug: str) -> Response:
        query = query_params_validate(self.QuerySerializer, request)
        fleet = Fleet.objects.filter(slug=slug).first()
        if fleet is None:
            raise NotFound(f"No fleet {slug!r}.")
        result = selectors.fleet_metrics(
            fleet_id=fleet.pk,
            window=selectors.parse_window(query["window"]),
            group_by=selectors.parse_group_by(query.get("group_by", "")),
            filters={name: query.get(name) for name in _FILTERS},
            with_scores=query["scores"],
        )
        return Response({"fleet": fleet.slug, **result})


class IngestStatusApi(APIView):
    """Accepted batches and events waiting for a worker, and the age of the oldest."""

    @extend_schema(
        responses=api_schemas.IngestStatusSerializer, operation_id="telemetry_ingest_status"
    )
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
