"""HTTP of the routing figures: a fleet's metrics over a window, and the Prometheus scrape."""

from __future__ import annotations

import hmac
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.exceptions import NotFound, error_body
from controlplane.openapi import query_params_validate
from routing_policies.models import Fleet
from routing_policies.validation import DIMENSION_VALUE_RE, MAX_VERSION

from ..ingest.selectors import ingest_gauges
from ..rollups import prometheus
from . import metrics, schemas

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
        responses=schemas.FleetMetricsSerializer,
        operation_id="fleet_metrics",
    )
    def get(self, request: Request, slug: str) -> Response:
        query = query_params_validate(self.QuerySerializer, request)
        fleet = Fleet.objects.filter(slug=slug).first()
        if fleet is None:
            raise NotFound(f"No fleet {slug!r}.")
        result = metrics.fleet_metrics(
            fleet_id=fleet.pk,
            window=metrics.parse_window(query["window"]),
            group_by=metrics.parse_group_by(query.get("group_by", "")),
            filters={name: query.get(name) for name in _FILTERS},
            with_scores=query["scores"],
        )
        return Response({"fleet": fleet.slug, **result})


def prometheus_metrics(request: HttpRequest) -> HttpResponse:
    """`/metrics` in the Prometheus text format; a bearer token when METRICS_TOKEN is set."""
    token: str = settings.METRICS_TOKEN
    if token:
        offered = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(offered.encode(), token.encode()):
            return JsonResponse(error_body("not_authenticated", "Bearer token needed."), status=401)
    text = prometheus.render(metrics.route_totals(), ingest_gauges())
    return HttpResponse(text, content_type=prometheus.CONTENT_TYPE)
