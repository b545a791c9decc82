"""Page routes of alerts (telemetry.page_urls; the API is in `alerts.urls`)."""

from ..routes import fleet_routes
from . import views

urlpatterns = fleet_routes(
    ("alerts/", views.alerts_page, "fleet-alerts"),
    ("alerts/rules/new/", views.alert_rule_create, "alert-rule-create"),
    ("alerts/rules/<int:rule_id>/edit/", views.alert_rule_edit, "alert-rule-edit"),
    ("alerts/rules/<int:rule_id>/delete/", views.alert_rule_delete, "alert-rule-delete"),
    ("alerts/webhooks/new/", views.alert_webhook_create, "alert-webhook-create"),
    (
        "alerts/webhooks/<int:webhook_id>/delete/",
        views.alert_webhook_delete,
        "alert-webhook-delete",
    ),
)
