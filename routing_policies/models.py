"""Fleets, policy versions (drafts and immutable published versions), cells and the audit log."""

from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q

from .cell_schema import FALLBACKS, FIELD_PATHS, FIELDS_BY_PATH, MODES, CellKey


class Fleet(models.Model):
    """A group of devices sharing one policy line (e.g. `voice-assistant-android`)."""

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class PolicyVersion(models.Model):
    """One version of a fleet's policy table.

    A draft has no number and no `published_at`; it is editable and carries a `revision` that
    every edit increments (stale edits are refused). A published version has a number
    (1, 2, 3, ... per fleet), never changes, and carries the ETag of its document.
    """

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField(null=True, blank=True)
    dimensions = models.JSONField()
    revision = models.PositiveIntegerField(default=1)
    note = models.TextField(blank=True)
    based_on = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="derived"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    published_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    published_at = models.DateTimeField(null=True, blank=True)
    etag = models.CharField(max_length=80, blank=True)

    class Meta:
        ordering = ["fleet", "-number"]
        constraints = [
            models.UniqueConstraint(
                fields=["fleet", "number"],
                condition=Q(number__isnull=False),
                name="policy_version_number_unique_per_fleet",
            ),
            models.UniqueConstraint(
                fields=["fleet"],
                condition=Q(published_at__isnull=True),
                name="policy_version_one_draft_per_fleet",
            ),
            models.CheckConstraint(
                condition=(Q(number__isnull=True) & Q(published_at__isnull=True))
                | (Q(number__isnull=False) & Q(published_at__isnull=False)),
                name="policy_version_published_has_number",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.fleet_id}:{'draft' if self.is_draft else f'v{self.number}'}"

    @property
    def is_draft(self) -> bool:
        """A draft is the one editable version of a fleet."""
        return self.published_at is None

    @property
    def label(self) -> str:
        """`v7` or `draft` as shown to people."""
        return "draft" if self.is_draft else f"v{self.number}"


class PolicyCell(models.Model):
    """One row of the table: task type × latency budget × privacy tier → how to route."""

    version = models.ForeignKey(PolicyVersion, on_delete=models.CASCADE, related_name="cells")
    task_type = models.CharField(max_length=32)
    latency_budget = models.CharField(max_length=32)
    privacy_tier = models.CharField(max_length=32)

    mode = models.CharField(max_length=16, choices=[(m, m) for m in MODES])
    threshold = models.FloatField()
    weight_length = models.FloatField()
    weight_intent = models.FloatField()
    weight_lm = models.FloatField()
    length_norm_tokens = models.PositiveIntegerField()
    latency_budget_ms = models.PositiveIntegerField()
    cloud_timeout_ms = models.PositiveIntegerField()
    fallback = models.CharField(max_length=16, choices=[(f, f) for f in FALLBACKS])
    upload_allowed = models.BooleanField()
    upload_deidentify = models.BooleanField()
    upload_max_bytes = models.PositiveIntegerField()
    rtt_high_ms = models.PositiveIntegerField()
    bandwidth_low_kbps = models.PositiveIntegerField()
    theta_raise = models.FloatField()
    load_busy = models.FloatField()
    theta_lower = models.FloatField()
    cache_ttl_s = models.PositiveIntegerField()

    class Meta:
        ordering = ["version", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["version", "task_type", "latency_budget", "privacy_tier"],
                name="policy_cell_unique_key_per_version",
            ),
            models.CheckConstraint(
                condition=Q(threshold__gte=0) & Q(threshold__lte=1),
                name="policy_cell_threshold_0_1",
            ),
            models.CheckConstraint(
                condition=Q(weight_length__gte=0) & Q(weight_intent__gte=0) & Q(weight_lm__gte=0),
                name="policy_cell_weights_non_negative",
            ),
            models.CheckConstraint(
                condition=Q(length_norm_tokens__gt=0)
                & Q(latency_budget_ms__gt=0)
                & Q(cloud_timeout_ms__gt=0),
                name="policy_cell_positive_budgets",
            ),
        ]

    def __str__(self) -> str:
        return "/".join(self.key)

    @property
    def key(self) -> CellKey:
        """(task_type, latency_budget, privacy_tier)."""
        return (self.task_type, self.latency_budget, self.privacy_tier)

    def values(self) -> dict[str, Any]:
        """The cell's fields keyed by document path (`weights.length`)."""
        return {path: getattr(self, FIELDS_BY_PATH[path].attr) for path in FIELD_PATHS}

    def apply_values(self, values: dict[str, Any]) -> None:
        """Set fields from document paths; values must already be validated."""
        for path, value in values.items():
            setattr(self, FIELDS_BY_PATH[path].attr, value)


class AuditEntry(models.Model):
    """Who did what to which object, when, with the state before and after and their diff."""

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_name = models.CharField(max_length=150, blank=True)
    action = models.CharField(max_length=64)
    fleet = models.ForeignKey(
        Fleet, null=True, blank=True, on_delete=models.CASCADE, related_name="audit_entries"
    )
    target = models.CharField(max_length=200)
    summary = models.CharField(max_length=500, blank=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    diff = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["fleet", "-created_at"], name="audit_fleet_time")]

    def __str__(self) -> str:
        return f"{self.action} {self.target}"


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


class Device(models.Model):
    """An enrolled device; its token is stored hashed and shown only once, at enrolment."""

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="devices")
    device_id = models.CharField(max_length=128)
    token_hash = models.CharField(max_length=64, unique=True)
    platform = models.CharField(max_length=64, blank=True)
    model = models.CharField(max_length=128, blank=True)
    sdk = models.CharField(max_length=64, blank=True)
    enrolled_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)
    connected = models.BooleanField(default=False)
    reported_version = models.PositiveIntegerField(null=True, blank=True)
    acked_version = models.PositiveIntegerField(null=True, blank=True)
    acked_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["fleet", "device_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["fleet", "device_id"], name="device_unique_id_per_fleet"
            ),
        ]
        indexes = [models.Index(fields=["fleet", "acked_version"], name="device_fleet_acked")]

    def __str__(self) -> str:
        return f"{self.fleet_id}:{self.device_id}"


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

    class Meta:
        ordering = ["-started_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["fleet"],
                condition=Q(state__in=["active", "paused"]),
                name="rollout_one_open_per_fleet",
            ),
            models.CheckConstraint(condition=Q(stage__in=[5, 25, 100]), name="rollout_stage_known"),
        ]

    def __str__(self) -> str:
        return f"rollout {self.pk} of {self.fleet_id} ({self.state}, {self.stage}%)"

    @property
    def is_open(self) -> bool:
        """Active or paused: it still decides what part of the fleet runs."""
        return self.state in (self.State.ACTIVE, self.State.PAUSED)

    @property
    def next_stage(self) -> int | None:
        """The stage `advance` moves to, or None at 100%."""
        later = [s for s in self.STAGES if s > self.stage]
        return later[0] if later else None


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
