"""Celery tasks of late feedback: thin, each calls one service.

`join_feedback` is enqueued (by name) once a batch of feedback is stored; beat runs the sweep of
held feedback whose event has arrived.
"""

from __future__ import annotations

from celery import shared_task

from controlplane.queue import DATABASE_RETRY

from .services import feedback_join, feedback_sweep


@shared_task(  # type: ignore[untyped-decorator]
    name="telemetry.join_feedback",
    ignore_result=True,
    **DATABASE_RETRY,
    max_retries=5,  # the sweep joins what a lost task leaves held
)
def join_feedback(feedback_ids: list[int]) -> int:
    """Join newly stored feedback with its events where they are stored already."""
    return feedback_join(ids=feedback_ids)


@shared_task(name="telemetry.sweep_feedback", ignore_result=True)  # type: ignore[untyped-decorator]
def sweep_feedback() -> int:
    """Join held feedback whose event was received (a race with the fold, or a lost task)."""
    return feedback_sweep()
