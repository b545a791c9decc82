"""A change scheduled for a time: what, when (UTC, with the time zone it was entered in), and
what became of it."""

from django.conf import settings
from django.db import models
from django.db.models import Q

from ..policies.models import Fleet


class ScheduledChange(models.Model):
    """One change to carry out at `run_at`. The row is its own claim: the runner locks it
    (`select_for_update(skip_locked=True)`), re-checks it is pending, carries the change out
    and marks it done or skipped in the same transaction, so two beats or a restart cannot run
    it twice, and a runner that dies mid-way leaves it pending."""

    class Kind(models.TextChoices):
        PUBLISH = "publish"
        ROLLOUT_START = "rollout_start"
        ROLLOUT_ADVANCE = "rollout_advance"
        SWITCH = "switch"
        CLOUD_PRESSURE = "cloud_pressure"

    class State(models.TextChoices):
        PENDING = "pending"
        DONE = "done"
        SKIPPED = "skipped"  # its preconditions no longer held: `outcome` says why
        CANCELLED = "cancelled"

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="scheduled_changes")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    run_at = models.DateTimeField(db_index=True)
    time_zone = models.CharField(max_length=64, default="UTC")
    # publish: {revision, note}; rollout_start / switch: {version}; rollout_advance:
    # {to_stage, require_healthy_guards}; cloud_pressure: {theta_offset, ttl_s}
    params = models.JSONField(default=dict)
    plan = models.CharField(max_length=32, blank=True, help_text="steps of one stage plan")
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    outcome = models.CharField(max_length=500, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_by_name = models.CharField(max_length=150)
    created_at = models.DateTimeField(auto_now_add=True)
    ran_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run_at", "id"]
        indexes = [
            models.Index(
                fields=["run_at"], condition=Q(state="pending"), name="scheduled_change_due"
            )
        ]

    def __str__(self) -> str:
        return f"{self.kind} at {self.run_at:%Y-%m-%d %H:%M} UTC ({self.state})"
