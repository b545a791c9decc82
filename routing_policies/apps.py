"""App config."""

from importlib import import_module

from django.apps import AppConfig


class RoutingPoliciesConfig(AppConfig):
    """Routing policies: fleets, policy versions and cells, audit log."""

    name = "routing_policies"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Receivers import models, so they load once the models have (Django's autodiscover way).
        import_module(f"{self.name}.receivers").connect()
