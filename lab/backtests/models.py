"""A backtest and its result, kept per (subject at its revision, window, filters)."""

from django.conf import settings
from django.db import models

from routing_policies.models import Fleet, PolicyVersion


class BacktestStatus(models.TextChoices):
    """Where a backtest is: waiting for a worker, replaying, done, or failed."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class Backtest(models.Model):
    """One replay of a version or the draft over a window of recorded events (docs/lab.md).

    The subject's cells are kept as they were when it was asked for (`subject_table`), so a
    draft edited meanwhile does not change what this backtest answers; `key` identifies the
    (subject, revision, window, filters) it was computed for, so asking again returns it.
    """

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=64, db_index=True)
    # "draft" or "version"; the version's number, or the draft's revision.
    subject = models.CharField(max_length=7)
    # The version row replayed: a draft keeps its row when published, so the rollout page
    # finds the prediction made for the draft that became its candidate.
    policy_version = models.ForeignKey(
        PolicyVersion, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    version = models.PositiveIntegerField(null=True)
    revision = models.PositiveIntegerField()
    subject_table = models.JSONField()  # [[[task_type, latency_budget, privacy_tier], values]]
    stable_version = models.PositiveIntegerField()
    start = models.DateTimeField()
    end = models.DateTimeField()
    filters = models.JSONField(default=dict)  # {"versions": [..], "cohort": .., "cells": [..]}
    status = models.CharField(
        max_length=8, choices=BacktestStatus.choices, default=BacktestStatus.QUEUED
    )
    events_total = models.BigIntegerField(default=0)
    events_done = models.BigIntegerField(default=0)
    result = models.JSONField(null=True)
    error = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True)
    finished_at = models.DateTimeField(null=True)

    class Meta:
        # The table it had under the app label `telemetry`, before the lab was its own app
        # (lab/migrations/0001_initial.py): its rows stay where they are.
        db_table = "telemetry_backtest"
        indexes = [models.Index(fields=["fleet", "-created_at"], name="backtest_fleet_time")]

    def __str__(self) -> str:
        return f"backtest {self.pk} of {self.label}"

    @property
    def label(self) -> str:
        """`v4` or `draft r7`."""
        return f"v{self.version}" if self.subject == "version" else f"draft r{self.revision}"

    @property
    def progress(self) -> float:
        """Share of the window's events replayed so far (1.0 once done)."""
        if self.status == BacktestStatus.DONE:
            return 1.0
        if not self.events_total:
            return 0.0
        return min(1.0, self.events_done / self.events_total)
