"""HTTP of the routing figures: a fleet's metrics over a window, and the Prometheus scrape."""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane import wire
from controlplane.exceptions import NotFound, error_body
from controlplane.openapi import query_params_validate
from routing_policies.models import Fleet
from routing_policies.selectors import broker_access_failures

from ..ingest.selectors import ingest_gauges
from ..rollups import prometheus
from . import metrics, schemas

_FILTERS = ("version", "cohort", "route", "task_type", "latency_budget", "privacy_tier")


class FleetMetricsApi(APIView):
    """Routing figures of a fleet over a window, grouped and filtered (reads rollups only)."""

    @extend_schema(
        parameters=[schemas.FleetMetricsQuerySerializer],
        responses=schemas.FleetMetricsSerializer,
        operation_id="fleet_metrics",
    )
    def get(self, request: Request, slug: str) -> Response:
        query = query_params_validate(schemas.FleetMetricsQuerySerializer, request)
        fleet = Fleet.objects.filter(slug=slug).first()
        if fleet is None:
            raise NotFound(f"No fleet {slug!r}.")
        result = metrics.fleet_metrics(
            fleet_id=fleet.pk,
            window=query["window"],
            group_by=query["group_by"],
            filters={name: query.get(name) for name in _FILTERS},
            with_scores=query["scores"],
            segment=query.get("segment"),
        )
        return Response({"fleet": fleet.slug, **result})


def prometheus_metrics(request: HttpRequest) -> HttpResponse:
    """`/metrics` in the Prometheus text format; a bearer token when METRICS_TOKEN is set."""
    token: str = settings.METRICS_TOKEN
    if token:
        offered = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(offered.encode(), token.encode()):
            return JsonResponse(error_body("not_authenticated", "Bearer token needed."), status=401)
    failures = broker_access_failures() if settings.MQTT_ACCESS == "dynsec" else None
    text = prometheus.render(metrics.route_totals(), ingest_gauges(), failures)
    text += wire.refused_metrics()
    return HttpResponse(text, content_type=prometheus.CONTENT_TYPE)
