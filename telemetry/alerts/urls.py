"""API routes of alerts and rollout guards, mounted under /api/v1/ (telemetry.urls)."""

from django.urls import path

from ..routes import fleet_routes
from . import apis

urlpatterns = [
    path("alerts/firing", apis.FiringAlertsApi.as_view(), name="api-alerts-firing"),
    *fleet_routes(
        ("alerts/rules/", apis.AlertRuleListApi, "api-alert-rules"),
        ("alerts/rules/<int:rule_id>/", apis.AlertRuleDetailApi, "api-alert-rule"),
        ("alerts/history/", apis.AlertHistoryApi, "api-alert-history"),
        ("alerts/webhooks/", apis.AlertWebhookListApi, "api-alert-webhooks"),
        ("alerts/webhooks/<int:webhook_id>/", apis.AlertWebhookDetailApi, "api-alert-webhook"),
        ("alerts/deliveries/", apis.WebhookDeliveryListApi, "api-alert-deliveries"),
        ("rollout/guards", apis.RolloutGuardsApi, "api-rollout-guards"),
    ),
]
