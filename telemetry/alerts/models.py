"""Alert rules, their state history, webhooks and their delivery log; rollout guards.

Imported by `telemetry.models` (Django finds models there). docs/alerts.md says what each
metric, condition and state means.
"""

from django.db import models
from django.db.models import Q

from routing_policies.models import Fleet, Rollout

from .limits import MAX_WEBHOOK_URL_LENGTH


class Metric(models.TextChoices):
    """What a rule or guard watches (telemetry.alerts.judging computes each from rollups)."""

    CLOUD_SHARE = "cloud_share", "cloud share"
    ALPHA = "alpha", "device share α"
    FALLBACK_RATE = "fallback_rate", "fallback rate"
    ERROR_RATE = "error_rate", "error rate"
    CACHE_HIT_RATE = "cache_hit_rate", "cache hit rate"
    PRIVACY_VIOLATIONS = "privacy_violations", "privacy violations"
    P95_BUDGET = "p95_budget", "P95 latency ÷ the cell's budget"
    P99_BUDGET = "p99_budget", "P99 latency ÷ the cell's budget"
    EVENTS = "events", "events reported (silence)"
    # The quality signals (issue #15): judged on the events that report them, never on all.
    DRAFT_KEPT_RATE = "draft_kept_rate", "draft-kept rate"
    MEAN_QUALITY = "mean_quality", "mean app quality"


class Condition(models.TextChoices):
    """How a rule's value is compared with its threshold."""

    ABOVE = "above", "above"
    BELOW = "below", "below"
    RISES_BY = "rises_by", "rises by at least (vs the previous window)"
    FALLS_BY = "falls_by", "falls by at least (vs the previous window)"


class Scope(models.TextChoices):
    """Which events a rule looks at."""

    FLEET = "fleet", "the whole fleet"
    VERSION = "version", "one policy version"
    COHORT = "cohort", "one rollout cohort"
    CELL = "cell", "one cell"


class AlertState(models.TextChoices):
    """Where a rule stands. `no_data` (too few samples to judge) is never healthy."""

    OK = "ok", "ok"
    PENDING = "pending", "pending"
    FIRING = "firing", "firing"
    NO_DATA = "no_data", "too few samples"


class AlertRule(models.Model):
    """One fleet's rule: metric, condition and threshold over a window, on a scope.

    The evaluation state (state, since, last value) lives on the row and is written only by
    the evaluation service, with `update_fields`, so an edit never overwrites it.
    """

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="alert_rules")
    name = models.CharField(max_length=120)
    metric = models.CharField(max_length=24, choices=Metric.choices)
    condition = models.CharField(max_length=12, choices=Condition.choices)
    threshold = models.FloatField()
    window_minutes = models.PositiveIntegerField(default=10)
    min_samples = models.PositiveIntegerField(default=50)
    for_seconds = models.PositiveIntegerField(default=0)
    # Hysteresis, in the threshold's unit: a pending or firing rule clears only once the value
    # is back on the healthy side of the threshold by this much (0: as soon as not breached),
    # so a value hovering at the threshold does not flap between pending and cleared.
    hysteresis = models.FloatField(default=0.0)
    scope = models.CharField(max_length=8, choices=Scope.choices, default=Scope.FLEET)
    # "3" for a version, "candidate" for a cohort, "text/interactive/normal" for a cell.
    scope_value = models.CharField(max_length=120, blank=True)
    # One of the fleet's named segments, by name: the rule is judged on that segment's rollup
    # rows (its devices' events) within its scope; blank: every device. A segment renamed or
    # deleted since leaves the rule without data, saying why (docs/alerts.md).
    segment = models.CharField(max_length=64, blank=True, default="")
    enabled = models.BooleanField(default=True)
    revision = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)

    state = models.CharField(max_length=8, choices=AlertState.choices, default=AlertState.NO_DATA)
    state_since = models.DateTimeField(null=True, blank=True)
    last_value = models.FloatField(null=True, blank=True)
    last_previous = models.FloatField(null=True, blank=True)
    last_samples = models.BigIntegerField(default=0)
    last_message = models.CharField(max_length=300, blank=True)
    last_evaluated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["fleet", "name"]
        constraints = [
            models.UniqueConstraint(fields=["fleet", "name"], name="alert_rule_name_per_fleet"),
            models.CheckConstraint(
                condition=Q(window_minutes__gte=1) & Q(window_minutes__lte=360),
                name="alert_rule_window_1_360",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.fleet_id}:{self.name}"


class AlertEvent(models.Model):
    """One state change of a rule (pending, firing, resolved, no data), or a guard's rollback."""

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="+")
    rule = models.ForeignKey(
        AlertRule, null=True, blank=True, on_delete=models.SET_NULL, related_name="events"
    )
    rollout = models.ForeignKey(
        Rollout, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # pending · firing · resolved · cleared (pending that never fired) · no_data · rolled_back
    # · advanced · completed (the last three by a rollout guard)
    kind = models.CharField(max_length=16)
    rule_name = models.CharField(max_length=120, blank=True)
    state_before = models.CharField(max_length=8, blank=True)
    state_after = models.CharField(max_length=8, blank=True)
    value = models.FloatField(null=True, blank=True)
    previous = models.FloatField(null=True, blank=True)
    samples = models.BigIntegerField(default=0)
    message = models.CharField(max_length=500)
    at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["fleet", "-at"], name="alert_event_fleet_time")]

    def __str__(self) -> str:
        return f"{self.kind} {self.rule_name}"


class WebhookFormat(models.TextChoices):
    """The body a webhook receives."""

    JSON = "json", "JSON"
    SLACK = "slack", "Slack-compatible"


class AlertWebhook(models.Model):
    """Where a fleet's alert notifications are POSTed: every rule's, or one rule's only."""

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="alert_webhooks")
    rule = models.ForeignKey(
        AlertRule, null=True, blank=True, on_delete=models.CASCADE, related_name="webhooks"
    )
    url = models.URLField(max_length=MAX_WEBHOOK_URL_LENGTH)
    format = models.CharField(max_length=8, choices=WebhookFormat.choices, default="json")
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["fleet", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["fleet", "url", "format"], name="alert_webhook_unique_per_fleet"
            )
        ]

    def __str__(self) -> str:
        return self.url


class WebhookDelivery(models.Model):
    """One notification to one webhook, with every attempt (the delivery log)."""

    class Status(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        FAILED = "failed"

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="+")
    webhook = models.ForeignKey(
        AlertWebhook, null=True, on_delete=models.SET_NULL, related_name="deliveries"
    )
    alert_event = models.ForeignKey(
        AlertEvent, null=True, on_delete=models.SET_NULL, related_name="deliveries"
    )
    url = models.URLField(max_length=MAX_WEBHOOK_URL_LENGTH)
    payload = models.JSONField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    # [{"at": iso, "status": 503 | null, "error": "...", "retry_in_s": 2.0 | null}, ...]
    attempt_log = models.JSONField(default=list)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["fleet", "-created_at"], name="webhook_delivery_fleet_time"),
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(status="pending"),
                name="webhook_delivery_pending",
            ),
        ]

    def __str__(self) -> str:
        return f"delivery {self.pk} ({self.status})"


class RolloutGuardSet(models.Model):
    """A rollout's guards: window, bake time per stage, auto-advance and the last verdict."""

    class Verdict(models.TextChoices):
        WATCHING = "watching", "watching"
        INSUFFICIENT = "insufficient", "too few events to judge"
        QUIET = "quiet", "quiet"
        FIRING = "firing", "firing"
        ROLLED_BACK = "rolled_back", "rolled back by a guard"
        FINISHED = "finished", "rollout finished"
        # Statistical guards (docs/alerts.md): too little exposure, intervals straddling a
        # tolerance, a sample ratio mismatch holding the stage, a stage past its limit.
        COLLECTING = "collecting", "collecting exposure"
        INCONCLUSIVE = "inconclusive", "inconclusive: not yet healthy"
        SRM = "srm", "held: sample ratio mismatch"
        EXTENDED = "extended", "stage extended"

    class OnExpiry(models.TextChoices):
        ROLLBACK = "rollback", "roll back"
        HOLD = "hold", "hold"

    rollout = models.OneToOneField(Rollout, on_delete=models.CASCADE, related_name="guard_set")
    window_minutes = models.PositiveIntegerField(default=10)
    # {"5": minutes, "25": minutes, "100": minutes}
    bake_minutes = models.JSONField(default=dict)
    auto_advance = models.BooleanField(default=False)
    verdict = models.CharField(max_length=12, choices=Verdict.choices, default="watching")
    verdict_reason = models.CharField(max_length=500, blank=True)
    stage_seen = models.PositiveSmallIntegerField(null=True, blank=True)
    quiet_since = models.DateTimeField(null=True, blank=True)
    evaluated_at = models.DateTimeField(null=True, blank=True)
    # Exposure a stage needs before it may advance, and its limit (0: none): past it the stage
    # is extended `max_extensions` times by as long, then `on_expiry` (statistical guards).
    min_devices = models.PositiveIntegerField(default=0)
    min_events = models.PositiveIntegerField(default=0)
    stage_limit_minutes = models.PositiveIntegerField(default=0)
    max_extensions = models.PositiveSmallIntegerField(default=1)
    on_expiry = models.CharField(max_length=8, choices=OnExpiry.choices, default="rollback")
    extensions_used = models.PositiveSmallIntegerField(default=0)
    # The last sample ratio checks: {"devices": {...}, "events": {...}} (shown, never judged).
    sample_ratios = models.JSONField(default=dict, blank=True)

    def __str__(self) -> str:
        return f"guards of rollout {self.rollout_id}"

    def bake_for(self, stage: int) -> int:
        """Minutes the guards must stay quiet at `stage` before auto-advance moves on."""
        return int(self.bake_minutes.get(str(stage), 0))


class GuardKind(models.TextChoices):
    """A guard with a fixed limit, or a statistical one (a confidence sequence)."""

    FIXED = "fixed", "fixed limit"
    SEQUENTIAL = "sequential", "statistical (anytime-valid interval)"


class GuardComparison(models.TextChoices):
    """How a guard judges the candidate cohort."""

    ABOVE = "above", "candidate above"
    ABOVE_STABLE_BY = "above_stable_by", "candidate above stable by more than"


class RolloutGuard(models.Model):
    """One guard: the candidate's metric against a value or against the stable cohort."""

    guard_set = models.ForeignKey(RolloutGuardSet, on_delete=models.CASCADE, related_name="guards")
    kind = models.CharField(max_length=10, choices=GuardKind.choices, default="fixed")
    metric = models.CharField(max_length=24, choices=Metric.choices)
    comparison = models.CharField(max_length=16, choices=GuardComparison.choices)
    threshold = models.FloatField()
    min_samples = models.PositiveIntegerField(default=50)
    # ok · firing · insufficient · watching (not judged yet)
    state = models.CharField(max_length=12, default="watching")
    candidate_value = models.FloatField(null=True, blank=True)
    stable_value = models.FloatField(null=True, blank=True)
    candidate_samples = models.BigIntegerField(default=0)
    stable_samples = models.BigIntegerField(default=0)
    message = models.CharField(max_length=300, blank=True)
    # Statistical guards: `threshold` is the tolerated regression; the confidence of the
    # interval, whether cells are judged too, and the last interval of the scope it acted on
    # (else the fleet's), with its series over time: [[iso, stage, estimate, lower, upper,
    # state], ...] (sequential.series_point).
    confidence = models.FloatField(default=0.95)
    per_cell = models.BooleanField(default=True)
    estimate = models.FloatField(null=True, blank=True)
    lower = models.FloatField(null=True, blank=True)
    upper = models.FloatField(null=True, blank=True)
    scope = models.CharField(max_length=200, blank=True)
    series = models.JSONField(default=list, blank=True)
    # When a statistical guard not yet healthy can decide at the current rate, and what would
    # shorten it: {"minutes", "text", "shorter": [...], ...} ({}: decided, or not judged).
    decide = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["guard_set", "id"]

    def __str__(self) -> str:
        return f"{self.metric} {self.comparison} {self.threshold}"
