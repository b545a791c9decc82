"""API routes of alerts and rollout guards, mounted under /api/v1/ (telemetry.urls)."""

from django.urls import path

from . import apis

urlpatterns = [
    path("alerts/firing", apis.FiringAlertsApi.as_view(), name="api-alerts-firing"),
    path(
        "fleets/<slug:slug>/alerts/rules/", apis.AlertRuleListApi.as_view(), name="api-alert-rules"
    ),
    path(
        "fleets/<slug:slug>/alerts/rules/<int:rule_id>/",
        apis.AlertRuleDetailApi.as_view(),
        name="api-alert-rule",
    ),
    path(
        "fleets/<slug:slug>/alerts/history/",
        apis.AlertHistoryApi.as_view(),
        name="api-alert-history",
    ),
    path(
        "fleets/<slug:slug>/alerts/webhooks/",
        apis.AlertWebhookListApi.as_view(),
        name="api-alert-webhooks",
    ),
    path(
        "fleets/<slug:slug>/alerts/webhooks/<int:webhook_id>/",
        apis.AlertWebhookDetailApi.as_view(),
        name="api-alert-webhook",
    ),
    path(
        "fleets/<slug:slug>/alerts/deliveries/",
        apis.WebhookDeliveryListApi.as_view(),
        name="api-alert-deliveries",
    ),
    path(
        "fleets/<slug:slug>/rollout/guards",
        apis.RolloutGuardsApi.as_view(),
        name="api-rollout-guards",
    ),
]
