"""Enqueueing a Celery task by its registered name: how a service starts work after its commit.

Tasks sit above services (a task calls a service), so a service that must start a task cannot
import it. It names it instead (`telemetry.drain_landed`); Celery's registry finds the task
(each app's `ready()` imports its tasks module). Embedded mode (`CELERY_TASK_ALWAYS_EAGER`)
runs it in process, exactly as `task.apply_async` would.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from django.db import DatabaseError

from .celery import app

# A task that fails on the database (a failover, a lock timeout) retries with back-off up to
# 30 s: `@shared_task(name=..., **DATABASE_RETRY, max_retries=...)`.
DATABASE_RETRY: Final[dict[str, Any]] = {
    "autoretry_for": (DatabaseError,),
    "retry_backoff": True,
    "retry_backoff_max": 30,
}


def task_send(
    name: str,
    *,
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    **options: Any,
) -> None:
    """Enqueue the task registered as `name`; raises as `apply_async` does if the broker fails."""
    app.tasks[name].apply_async(args=list(args), kwargs=kwargs or {}, **options)
