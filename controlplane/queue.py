"""Enqueueing a Celery task by its registered name: how a service starts work after its commit.

Tasks sit above services (a task calls a service), so a service that must start a task cannot
import it. It names it instead (`telemetry.drain_landed`); Celery's registry, filled by
`autodiscover_tasks`, finds the task. Embedded mode (`CELERY_TASK_ALWAYS_EAGER`) runs it in
process, exactly as `task.apply_async` would.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from celery.exceptions import NotRegistered

from .celery import app


def task_send(
    name: str,
    *,
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    **options: Any,
) -> None:
    """Enqueue the task registered as `name`; raises as `apply_async` does if the broker fails."""
    try:
        task = app.tasks[name]
    except NotRegistered:
        # A web process has not imported the tasks modules yet (a worker does at start):
        # `autodiscover_tasks` imports them on this signal.
        app.loader.import_default_modules()
        task = app.tasks[name]
    task.apply_async(args=list(args), kwargs=kwargs or {}, **options)
