"""App config."""

from django.apps import AppConfig


class RoutingPoliciesConfig(AppConfig):
    """Routing policies: fleets, policy versions and cells, audit log."""

    name = "routing_policies"
    default_auto_field = "django.db.models.BigAutoField"
