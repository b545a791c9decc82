"""Celery tasks of the app (autodiscovered here): each lives in its part."""

from .schedules.tasks import run_due_schedules

__all__ = ["run_due_schedules"]
