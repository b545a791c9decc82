"""A fleet's autopilot objective and the cycles it ran (docs/lab.md, "The autopilot")."""

from __future__ import annotations

from django.db import models

from routing_policies.models import Fleet


class AutopilotObjective(models.Model):
    """What the autopilot keeps a fleet's cells at, its bounds and cadence; off by default.

    `state`: `off` (never enabled or switched off), `active`, `paused` (by a person),
    `stopped` (by the autopilot itself: a miss, a guard's rollback, a freeze; it waits for a
    person to resume it). Scope: `cells` (labels `task/budget/tier`; empty: every cell) and
    `segment` (a segment's name: the cells as its devices run them, calibrated on its events,
    moved in the draft's override for it, rolled out to it alone; blank: the whole fleet).
    """

    class State(models.TextChoices):
        OFF = "off"
        ACTIVE = "active"
        PAUSED = "paused"
        STOPPED = "stopped"

    fleet = models.OneToOneField(Fleet, on_delete=models.CASCADE, related_name="autopilot")
    state = models.CharField(max_length=8, choices=State.choices, default=State.OFF)
    state_reason = models.CharField(max_length=500, blank=True)
    # The target: the highest α with the lower (1 − δ) bound of the device quality ≥ floor,
    # P95 within each cell's budget (when asked), cloud cost ≤ ceiling per day (when set).
    quality_floor = models.FloatField(default=0.85)
    delta = models.FloatField(default=0.05)
    quality_resolution = models.FloatField(default=0.02)
    p95_within_budget = models.BooleanField(default=True)
    cost_ceiling_per_day = models.FloatField(null=True, blank=True)
    # Bounds.
    max_step = models.FloatField(default=0.05)
    margin = models.FloatField(default=0.01)
    cells = models.JSONField(default=list, blank=True)
    segment = models.CharField(max_length=64, blank=True)
    excluded_cells = models.JSONField(default=list, blank=True)
    run_at = models.TimeField(default="03:00")
    time_zone = models.CharField(max_length=64, default="UTC")
    quiet_periods = models.JSONField(default=list, blank=True)
    window_hours = models.PositiveSmallIntegerField(default=24)
    # The rollout and the check after it.
    holdback = models.PositiveSmallIntegerField(default=10)
    bake_minutes = models.PositiveSmallIntegerField(default=30)
    measure_minutes = models.PositiveIntegerField(default=60)
    share_tolerance = models.FloatField(default=0.05)
    next_run_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"autopilot of {self.fleet_id} ({self.state})"


class AutopilotCycle(models.Model):
    """One cycle: calibrate, propose, draft, request, guarded rollout, predicted vs realized."""

    class State(models.TextChoices):
        NO_CHANGE = "no_change"
        AWAITING_APPROVAL = "awaiting_approval"
        ROLLING_OUT = "rolling_out"
        MEASURING = "measuring"
        COMPLETED = "completed"
        STOPPED = "stopped"

    OPEN_STATES = (State.AWAITING_APPROVAL, State.ROLLING_OUT, State.MEASURING)

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="autopilot_cycles")
    number = models.PositiveIntegerField()
    state = models.CharField(max_length=20, choices=State.choices)
    reason = models.CharField(max_length=1000, blank=True)
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    segment = models.CharField(max_length=64, blank=True)  # the objective's, as the cycle began
    window_start = models.DateTimeField()
    window_end = models.DateTimeField()
    base_version = models.PositiveIntegerField(null=True)
    draft_revision = models.PositiveIntegerField(null=True)
    version = models.PositiveIntegerField(null=True)  # the published candidate
    change_request = models.PositiveIntegerField(null=True)  # its id, while kept
    rollout = models.PositiveIntegerField(null=True)
    rollout_completed_at = models.DateTimeField(null=True, blank=True)
    # Realized figures are of the candidate's events from its 100% stage on (with the holdback
    # beside it), through completion and `measure_minutes` after.
    measure_from = models.DateTimeField(null=True, blank=True)
    # Per cell: {"cell", "threshold_from", "threshold_to", "reason", "current", "predicted",
    # "quality_low", "gain_low", "budget_ms", "realized", "misses"}.
    cells = models.JSONField(default=list)

    class Meta:
        ordering = ["-number"]
        constraints = [
            models.UniqueConstraint(fields=["fleet", "number"], name="autopilot_cycle_number"),
            models.UniqueConstraint(
                fields=["fleet"],
                condition=models.Q(state__in=["awaiting_approval", "rolling_out", "measuring"]),
                name="autopilot_cycle_one_open",
            ),
        ]

    def __str__(self) -> str:
        return f"cycle {self.number} of {self.fleet_id} ({self.state})"
