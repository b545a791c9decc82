"""App config."""

from django.apps import AppConfig


class RoutingPoliciesConfig(AppConfig):
    """Routing policies: fleets, policy versions and cells, audit log."""

    name = "routing_policies"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The parts above policies plug into its writes and pages (policies/signals.py).
        from .reviews import receivers as review_receivers
        from .rollouts import receivers as rollout_receivers

        review_receivers.connect()
        rollout_receivers.connect()
