"""App config."""

from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    """Telemetry: ingest, rollups, alerts, dashboards."""

    name = "telemetry"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Register the tasks; connect the live dashboard feed and alert evaluation to rollups."""
        # Every task of telemetry in Celery's registry, in web processes too: services start
        # them by name (controlplane/queue.py), never by importing them.
        from . import tasks  # noqa: F401
        from .alerts.tasks import on_rollups_stored as alerts_on_rollups_stored
        from .dashboards.tasks import on_rollups_stored as dashboards_on_rollups_stored
        from .signals import rollups_stored

        rollups_stored.connect(
            dashboards_on_rollups_stored, dispatch_uid="telemetry.dashboard_feed"
        )
        # Alert rules and rollout guards are judged as rollups arrive (coalesced per fleet).
        rollups_stored.connect(alerts_on_rollups_stored, dispatch_uid="telemetry.alerts")
        # Rollout guards and the demo's alert rules, plugged into routing_policies (which never
        # imports telemetry): routing_policies/extensions.py.
        from routing_policies.extensions import (
            RolloutGuards,
            demo_seeder_register,
            rollout_guards_register,
        )

        # Change requests and freezes (routing_policies/reviews) notify through this.
        from routing_policies.services import review_notifier_register

        from .alerts.apis import guard_options
        from .alerts.schemas import RolloutGuardsInputSerializer
        from .alerts.selectors import guard_status
        from .alerts.services import alert_rules_seed, rollout_start_guarded
        from .alerts.services.webhooks import governance_deliveries_create

        rollout_guards_register(
            RolloutGuards(
                start=rollout_start_guarded,
                status=guard_status,
                options_of=guard_options,
                start_fields=RolloutGuardsInputSerializer,
            )
        )
        demo_seeder_register(
            "telemetry.alert_rules", lambda fleet: alert_rules_seed(actor=None, fleet=fleet)
        )
        # Change requests and freezes (routing_policies/reviews) go to the fleet's webhooks.
        review_notifier_register("telemetry.webhooks", governance_deliveries_create)
