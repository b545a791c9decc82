"""A fleet's routing state and its rollouts: which versions its devices run, and how that
changed."""

from django.conf import settings
from django.db import models
from django.db.models import Q

from ..policies.models import Fleet, PolicyVersion

# The longest a fleet-wide cloud-pressure nudge lasts (seconds).
MAX_CLOUD_PRESSURE_TTL_S = 24 * 3600


class FleetRouting(models.Model):
    """A fleet's live routing state: the stable version devices run and the enrolment key.

    Kept apart from `Fleet` so the row that every rollout transition locks is small. A
    fleet-wide `cloud_pressure` nudge (θ offset with an expiry) lives here too.
    """

    fleet = models.OneToOneField(Fleet, on_delete=models.CASCADE, related_name="routing")
    stable_version = models.ForeignKey(
        PolicyVersion, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    enrollment_key_hash = models.CharField(max_length=64, blank=True)
    enrollment_key_prefix = models.CharField(max_length=16, blank=True)
    cloud_pressure_offset = models.FloatField(default=0.0)
    cloud_pressure_until = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"routing of {self.fleet_id}"


class Rollout(models.Model):
    """Moving a fleet from its stable version to a candidate in stages 5% → 25% → 100%.

    The salt is random per rollout and fixes every device's bucket for all its stages.
    """

    class State(models.TextChoices):
        ACTIVE = "active"
        PAUSED = "paused"
        COMPLETED = "completed"
        ROLLED_BACK = "rolled_back"

    STAGES = (5, 25, 100)
    # At most this share of the fleet may be held back on stable at the last stage.
    MAX_HOLDBACK = 50

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="rollouts")
    candidate = models.ForeignKey(PolicyVersion, on_delete=models.PROTECT, related_name="+")
    stable = models.ForeignKey(PolicyVersion, on_delete=models.PROTECT, related_name="+")
    salt = models.CharField(max_length=32)
    stage = models.PositiveSmallIntegerField(default=5)
    state = models.CharField(max_length=16, choices=State.choices, default=State.ACTIVE)
    started_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    started_at = models.DateTimeField(auto_now_add=True)
    stage_changed_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    reason = models.CharField(max_length=500, blank=True)
    # The share of the fleet (percent) kept on the stable version at the last stage until the
    # rollout completes, so its guards still have a comparison group (docs/PROTOCOL.md,
    # "Holdback"); 0: none, the last stage is the whole fleet.
    holdback = models.PositiveSmallIntegerField(default=0)
    # A rollout scoped to a segment (docs/segments.md, "Rollouts scoped to a segment"): the
    # segment's name and its rule as they were at the start, a snapshot the rollout keeps
    # whatever becomes of the segment (edited, renamed, deleted). Blank and null: the whole
    # fleet.
    segment_name = models.CharField(max_length=64, blank=True)
    segment_rule = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["fleet"],
                condition=Q(state__in=["active", "paused"]),
                name="rollout_one_open_per_fleet",
            ),
            models.CheckConstraint(condition=Q(stage__in=[5, 25, 100]), name="rollout_stage_known"),
            models.CheckConstraint(condition=Q(holdback__lte=50), name="rollout_holdback_range"),
        ]

    def __str__(self) -> str:
        return f"rollout {self.pk} of {self.fleet_id} ({self.state}, {self.stage}%)"

    @property
    def is_open(self) -> bool:
        """Active or paused: it still decides what part of the fleet runs."""
        return self.state in OPEN_STATES

    @property
    def candidate_share(self) -> int:
        """The percent of buckets on the candidate: the stage, less the holdback at 100%."""
        return self.stage if self.stage < 100 else 100 - self.holdback

    @property
    def scoped(self) -> bool:
        """Scoped to a segment: only the devices its rule matches take part."""
        return self.segment_rule is not None

    @property
    def next_stage(self) -> int | None:
        """The stage `advance` moves to, or None at 100%."""
        later = [s for s in self.STAGES if s > self.stage]
        return later[0] if later else None


# A rollout that still decides what part of the fleet runs (at most one per fleet).
OPEN_STATES = (Rollout.State.ACTIVE, Rollout.State.PAUSED)


class RolloutEvent(models.Model):
    """One transition of a rollout, with when it happened: the basis of propagation times."""

    rollout = models.ForeignKey(Rollout, on_delete=models.CASCADE, related_name="events")
    action = models.CharField(max_length=32)
    stage_before = models.PositiveSmallIntegerField(null=True)
    stage_after = models.PositiveSmallIntegerField(null=True)
    actor_name = models.CharField(max_length=150, blank=True)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["rollout", "at", "id"]

    def __str__(self) -> str:
        return f"{self.action} {self.stage_before}->{self.stage_after}"
