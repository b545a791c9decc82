"""App config."""

from django.apps import AppConfig


class RoutingPoliciesConfig(AppConfig):
    """Routing policies: fleets, policy versions and cells, audit log."""

    name = "routing_policies"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Register the tasks in Celery's registry (services start them by name)."""
        from . import tasks  # noqa: F401
