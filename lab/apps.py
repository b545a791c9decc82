"""App config."""

from django.apps import AppConfig


class LabConfig(AppConfig):
    """The policy lab: playground, backtest and calibration (docs/lab.md). Nothing imports it."""

    name = "lab"
    label = "lab"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Register the backtest task, and plug the lab's panels into the policy pages."""
        # Importing backtests.tasks puts the backtest task in Celery's registry, in web processes
        # too (its name stays `telemetry.backtest_run`, which beat and queued messages use).
        from routing_policies.extensions import LabPanels, lab_panels_register

        from .backtests.panels import draft_headline, rollout_prediction
        from .backtests.services import backtest_queue_register
        from .backtests.tasks import backtest_enqueue

        # Backtests run as a Celery task, and show on the policy pages
        # (routing_policies/extensions.py: routing_policies never imports the lab).
        backtest_queue_register(backtest_enqueue)
        lab_panels_register(
            LabPanels(draft_headline=draft_headline, rollout_prediction=rollout_prediction)
        )
