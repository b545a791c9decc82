"""App config."""

from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    """Telemetry: ingest, rollups, alerts, dashboards."""

    name = "telemetry"
    default_auto_field = "django.db.models.BigAutoField"
