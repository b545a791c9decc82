"""Celery (controlplane/celery.py reads the CELERY_ names): broker, delivery, the one beat."""

from typing import Any

from controlplane.settings.alerts import ALERT_EVALUATE_INTERVAL_S
from controlplane.settings.env import REDIS_URL, env
from controlplane.settings.telemetry import (
    DASHBOARD_REFRESH_INTERVAL_S,
    TELEMETRY_COMPACT_INTERVAL_S,
    TELEMETRY_SWEEP_INTERVAL_S,
)

# Embedded: a hostname in the in-memory URL, or kombu warns "No hostname was supplied" at start.
CELERY_BROKER_URL = REDIS_URL or "memory://localhost/"
CELERY_RESULT_BACKEND = None
CELERY_TASK_ALWAYS_EAGER = not REDIS_URL
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TIMEZONE = "UTC"


def periodic(task: str, every_s: float) -> dict[str, Any]:
    """A beat entry that expires after its own interval: a late run is dropped, never stacked."""
    return {"task": task, "schedule": every_s, "options": {"expires": every_s}}


# How often the beat carries out due scheduled changes (routing_policies/schedules/).
SCHEDULE_RUN_INTERVAL_S = env.float("SCHEDULE_RUN_INTERVAL_S", default=10.0)

# How often each fleet's autopilot is looked at (a cycle starts at its own cadence; this only
# moves open cycles on and notices a due one).
AUTOPILOT_TICK_INTERVAL_S = env.float("AUTOPILOT_TICK_INTERVAL_S", default=60.0)

# Every periodic task of the project, here and nowhere else.
CELERY_BEAT_SCHEDULE = {
    "telemetry-sweep-landed": periodic("telemetry.sweep_landed", TELEMETRY_SWEEP_INTERVAL_S),
    # Late quality feedback held while its event was being folded (telemetry/feedback/).
    "telemetry-sweep-feedback": periodic("telemetry.sweep_feedback", TELEMETRY_SWEEP_INTERVAL_S),
    "telemetry-compact-rollups": periodic(
        "telemetry.compact_rollups", TELEMETRY_COMPACT_INTERVAL_S
    ),
    # Partitions and retention (telemetry/partitions.py).
    "telemetry-maintain-storage": periodic("telemetry.maintain_storage", 3600.0),
    "telemetry-dashboard-refresh": periodic(
        "telemetry.dashboard_refresh", DASHBOARD_REFRESH_INTERVAL_S
    ),
    # Judge every fleet's rules and rollout guards (telemetry/alert_tasks.py).
    "alerts-evaluate-all": periodic("telemetry.evaluate_all_alerts", ALERT_EVALUATE_INTERVAL_S),
    "schedules-run-due": periodic("routing_policies.run_due_schedules", SCHEDULE_RUN_INTERVAL_S),
    "autopilot-tick-all": periodic("autopilot.tick_all", AUTOPILOT_TICK_INTERVAL_S),
}
