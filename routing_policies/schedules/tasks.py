"""The beat's round of scheduled changes (the embedded mode runs it in process instead)."""

from celery import shared_task

from .services import scheduled_changes_run_due


@shared_task(name="routing_policies.run_due_schedules", ignore_result=True)  # type: ignore[untyped-decorator]
def run_due_schedules() -> int:
    """Carry out every due scheduled change exactly once (two beats are harmless)."""
    return scheduled_changes_run_due()
