"""Where Celery finds telemetry's tasks (`autodiscover_tasks` imports `<app>.tasks`).

Each part keeps its own (`ingest/tasks.py`, `feedback/tasks.py`, `dashboards/tasks.py`,
`alerts/tasks.py`); they are registered under `telemetry.<task>` names, which Celery beat and
queued messages use, so a task's module can move without a deployed beat or worker noticing.
"""

from .alerts.tasks import deliver_webhook, evaluate_alerts, evaluate_all_alerts
from .dashboards.tasks import dashboard_push, dashboard_refresh
from .feedback.tasks import join_feedback, sweep_feedback
from .ingest.tasks import (
    compact_rollups,
    drain_landed,
    maintain_storage,
    process_landed,
    sweep_landed,
)

__all__ = [
    "compact_rollups",
    "dashboard_push",
    "dashboard_refresh",
    "deliver_webhook",
    "drain_landed",
    "evaluate_alerts",
    "evaluate_all_alerts",
    "join_feedback",
    "maintain_storage",
    "process_landed",
    "sweep_feedback",
    "sweep_landed",
]
