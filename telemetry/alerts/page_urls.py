"""Page routes of alerts (telemetry.page_urls; the API is in `alerts.urls`)."""

from django.urls import path

from . import views

urlpatterns = [
    path("fleets/<slug:slug>/alerts/", views.alerts_page, name="fleet-alerts"),
    path("fleets/<slug:slug>/alerts/rules/new/", views.alert_rule_create, name="alert-rule-create"),
    path(
        "fleets/<slug:slug>/alerts/rules/<int:rule_id>/edit/",
        views.alert_rule_edit,
        name="alert-rule-edit",
    ),
    path(
        "fleets/<slug:slug>/alerts/rules/<int:rule_id>/delete/",
        views.alert_rule_delete,
        name="alert-rule-delete",
    ),
    path(
        "fleets/<slug:slug>/alerts/webhooks/new/",
        views.alert_webhook_create,
        name="alert-webhook-create",
    ),
    path(
        "fleets/<slug:slug>/alerts/webhooks/<int:webhook_id>/delete/",
        views.alert_webhook_delete,
        name="alert-webhook-delete",
    ),
]
