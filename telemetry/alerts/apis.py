"""REST API of alerts and rollout guards, under /api/v1/ (docs/alerts.md).

Viewers read; editors change rules; publishers manage webhooks and rollout guards. Each body
is checked by the input serializer its `extend_schema` documents (`alerts.schemas`; types
included: `"10"` is not a number), then by the service for what needs several fields or the
database.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.api import ViewerReadsApi, input_validate, require_object
from controlplane.exceptions import Conflict, NotFound
from controlplane.openapi import error_responses, query_params_validate
from controlplane.permissions import IsEditor, IsPublisher, IsViewer
from routing_policies import selectors as policy_selectors
from routing_policies.models import Fleet, Rollout

from . import additions, schemas, selectors, services
from .additions import Addition
from .models import AlertRule
from .services.guards import guard_options_validate, rollout_guards_set

_RULE_EXAMPLE = services.SEED_RULES[0]


def _fleet(slug: str) -> Fleet:
    return policy_selectors.fleet_get(slug=slug)


def _shown(
    answer: type[serializers.Serializer[Any]], shown: Any, *, status_code: int = status.HTTP_200_OK
) -> Response:
    """`shown` (a row, or `{"results": rows}`) as the output serializer the schema documents
    for the answer shows it."""
    return Response(answer(shown).data, status=status_code)


def _limit_query(ref_name: str, *, maximum: int, default: int) -> type[serializers.Serializer[Any]]:
    """The query of a log read: how many of the newest rows, at most `maximum`."""
    meta = type("Meta", (), {"ref_name": ref_name})
    limit = serializers.IntegerField(min_value=1, max_value=maximum, default=default)
    return type(f"{ref_name}Serializer", (serializers.Serializer,), {"limit": limit, "Meta": meta})


HistoryQuerySerializer = _limit_query(
    "AlertHistoryQuery", maximum=1000, default=selectors.HISTORY_LIMIT
)
DeliveryQuerySerializer = _limit_query(
    "WebhookDeliveryQuery", maximum=500, default=selectors.DELIVERY_LIMIT
)


def _fleet_collection_api(
    doc: str,
    *,
    noun: str,
    change_permission: type[BasePermission],
    listed: type[serializers.Serializer[Any]],
    read: Callable[..., Iterable[Any]],
    addition: Addition,
    description: str | None = None,
) -> type[APIView]:
    """A fleet's collection (operations `<noun>_list`, `<noun>_create`): viewers read it, as
    `listed` shows what `read` (a selector) finds; POST (`change_permission`) adds one as
    `addition` takes it and answers 201 with it."""

    class FleetCollectionApi(ViewerReadsApi):
        @extend_schema(responses=listed, operation_id=f"{noun}_list")
        def get(self, request: Request, slug: str) -> Response:
            return _shown(listed, {"results": read(fleet_id=_fleet(slug).pk)})

        @extend_schema(
            request=addition.body,
            responses={201: addition.shown, **error_responses(409)},
            operation_id=f"{noun}_create",
            description=description,
        )
        def post(self, request: Request, slug: str) -> Response:
            made = addition.from_api(request, _fleet(slug))
            return _shown(addition.shown, made, status_code=status.HTTP_201_CREATED)

    FleetCollectionApi.__doc__ = doc
    FleetCollectionApi.change_permission = change_permission
    return FleetCollectionApi


AlertRuleListApi = _fleet_collection_api(
    "A fleet's rules with their states; POST adds one (editor).",
    noun="alert_rule",
    change_permission=IsEditor,
    listed=schemas.AlertRuleListSerializer,
    read=selectors.rule_list,
    addition=additions.RULE,
    description=f"Example: {_RULE_EXAMPLE}. Shares are fractions (0.2 is 20%); latency "
    "metrics are ratios to each cell's budget (1.0 is the budget).",
)


class AlertRuleDetailApi(ViewerReadsApi):
    """One rule; PATCH changes fields (send `revision`), DELETE removes it (editor)."""

    change_permission = IsEditor

    @extend_schema(responses=schemas.AlertRuleSerializer, operation_id="alert_rule_get")
    def get(self, request: Request, slug: str, rule_id: int) -> Response:
        fleet = _fleet(slug)
        rule = AlertRule.objects.filter(fleet=fleet, pk=rule_id).first()
        if rule is None:
            raise NotFound(f"Fleet {slug!r} has no alert rule {rule_id}.")
        return _shown(schemas.AlertRuleSerializer, rule)

    @extend_schema(
        request=schemas.AlertRuleUpdateSerializer,
        responses={200: schemas.AlertRuleSerializer, **error_responses(409)},
        operation_id="alert_rule_update",
    )
    def patch(self, request: Request, slug: str, rule_id: int) -> Response:
        fleet = _fleet(slug)
        data = input_validate(
            schemas.AlertRuleUpdateSerializer,
            require_object(request.data),
            message=services.RULE_INVALID,
        )
        rule = services.alert_rule_update(actor=request.user, fleet=fleet, rule_id=rule_id, **data)
        return _shown(schemas.AlertRuleSerializer, rule)

    @extend_schema(responses={204: None}, operation_id="alert_rule_delete")
    def delete(self, request: Request, slug: str, rule_id: int) -> Response:
        services.alert_rule_delete(actor=request.user, fleet=_fleet(slug), rule_id=rule_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


def _fleet_log_api(
    doc: str,
    *,
    query: type[serializers.Serializer[Any]],
    responses: type[serializers.Serializer[Any]],
    operation_id: str,
    read: Callable[..., Iterable[Any]],
) -> type[APIView]:
    """A viewer's read of a fleet's log, newest first, as many rows as the query's `limit`."""

    class FleetLogApi(APIView):
        permission_classes = [IsViewer]

        @extend_schema(parameters=[query], responses=responses, operation_id=operation_id)
        def get(self, request: Request, slug: str) -> Response:
            limit = query_params_validate(query, request)["limit"]
            rows = read(fleet_id=_fleet(slug).pk, limit=limit)
            return _shown(responses, {"results": rows})

    FleetLogApi.__doc__ = doc
    return FleetLogApi


AlertHistoryApi = _fleet_log_api(
    "State changes of the fleet's rules and guard actions, newest first.",
    query=HistoryQuerySerializer,
    responses=schemas.AlertEventListSerializer,
    operation_id="alert_history",
    read=selectors.alert_history,
)


class FiringAlertsApi(APIView):
    """What fires now, in every fleet (the banner's first paint)."""

    permission_classes = [IsViewer]

    @extend_schema(responses=schemas.FiringAlertListSerializer, operation_id="alerts_firing")
    def get(self, request: Request) -> Response:
        return Response({"results": selectors.firing_alerts()})


AlertWebhookListApi = _fleet_collection_api(
    """The fleet's webhooks; POST adds one (publisher): `{"url", "format": "json"|"slack",
    "rule_id": null}`.""",
    noun="alert_webhook",
    change_permission=IsPublisher,
    listed=schemas.AlertWebhookListSerializer,
    read=selectors.webhook_list,
    addition=additions.WEBHOOK,
)


class AlertWebhookDetailApi(APIView):
    """DELETE stops posting to a webhook (publisher)."""

    permission_classes = [IsPublisher]

    @extend_schema(responses={204: None}, operation_id="alert_webhook_delete")
    def delete(self, request: Request, slug: str, webhook_id: int) -> Response:
        services.alert_webhook_delete(actor=request.user, fleet=_fleet(slug), webhook_id=webhook_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


WebhookDeliveryListApi = _fleet_log_api(
    "The delivery log: each notification, its attempts, status codes, errors and back-off.",
    query=DeliveryQuerySerializer,
    responses=schemas.WebhookDeliveryListSerializer,
    operation_id="alert_webhook_deliveries",
    read=selectors.delivery_list,
)


def guard_options(data: dict[str, Any]) -> dict[str, Any]:
    """The guard options of a rollout start's body (the fields of
    `RolloutGuardsInputSerializer`), which `rollout_start_guarded` checks with it."""
    fields = schemas.RolloutGuardsInputSerializer().fields
    return {name: value for name, value in data.items() if name in fields}


class RolloutGuardsApi(ViewerReadsApi):
    """The open rollout's guards and verdicts; PUT sets them (publisher):
    `{"guards": "default" | "statistical" | "quality" | [{"metric", "comparison", "threshold",
    "min_samples"} | {"kind": "sequential", "metric", "tolerance", "confidence", "per_cell"}],
    "bake_minutes": 10 | {"5": 10, "25": 20, "100": 30}, "auto_advance": true,
    "window_minutes": 10, "min_samples": 50, "min_devices": 0, "min_events": 0,
    "stage_limit_minutes": 0, "max_extensions": 1, "on_expiry": "rollback" | "hold"}`."""

    change_permission = IsPublisher

    def _rollout(self, fleet: Fleet) -> Rollout | None:
        return (
            policy_selectors.open_rollout(fleet.pk) or Rollout.objects.filter(fleet=fleet).first()
        )

    @extend_schema(responses=schemas.RolloutGuardsSerializer, operation_id="rollout_guards_get")
    def get(self, request: Request, slug: str) -> Response:
        rollout = self._rollout(_fleet(slug))
        guards = selectors.guard_status(rollout_id=rollout.pk) if rollout else None
        return Response({"rollout": rollout.pk if rollout else None, "guards": guards})

    @extend_schema(
        request=schemas.RolloutGuardsInputSerializer,
        responses={200: schemas.RolloutGuardsSerializer, **error_responses(409)},
        operation_id="rollout_guards_set",
    )
    def put(self, request: Request, slug: str) -> Response:
        fleet = _fleet(slug)
        options = guard_options_validate(require_object(request.data))
        rollout = policy_selectors.open_rollout(fleet.pk)
        if rollout is None:
            raise Conflict(f"Fleet {slug!r} has no rollout in progress.", code="no_rollout")
        rollout_guards_set(actor=request.user, rollout=rollout, **options)
        return Response(
            {"rollout": rollout.pk, "guards": selectors.guard_status(rollout_id=rollout.pk)}
        )
