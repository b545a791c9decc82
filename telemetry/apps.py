"""App config."""

from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    """Telemetry: ingest, rollups, alerts, dashboards."""

    name = "telemetry"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Connect the live dashboard feed and the alert evaluation to new rollups."""
        from .alerts.tasks import on_rollups_stored as alerts_on_rollups_stored
        from .dashboards.tasks import on_rollups_stored as dashboards_on_rollups_stored
        from .signals import rollups_stored

        rollups_stored.connect(
            dashboards_on_rollups_stored, dispatch_uid="telemetry.dashboard_feed"
        )
        # Alert rules and rollout guards are judged as rollups arrive (coalesced per fleet).
        rollups_stored.connect(alerts_on_rollups_stored, dispatch_uid="telemetry.alerts")
