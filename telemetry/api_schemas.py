"""Serializers that describe the telemetry, metrics, dashboard and alert APIs in the OpenAPI schema.

The views answer with the selectors' dicts (the same ones the pages and the live feeds use);
these serializers are their contract. The input bodies are checked by the services (msgspec for
telemetry, hand-written checks for rules, webhooks and guards, which name every bad field);
the input serializers declare the same limits from the same constants, so a generated client
refuses what the server would.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlplane.openapi import closed_body
from routing_policies.models import Rollout
from routing_policies.rollouts.schemas import RolloutSerializer

from .alerts.judging import GUARD_METRICS, RATE_METRICS
from .alerts.limits import (
    MAX_FOR_SECONDS,
    MAX_HYSTERESIS,
    MAX_MIN_SAMPLES,
    MAX_RULE_NAME_LENGTH,
    MAX_SCOPE_VALUE_LENGTH,
    MAX_THRESHOLD,
    MAX_WINDOW_MINUTES,
    MIN_WINDOW_MINUTES,
    RULE_NAME_PATTERN,
)
from .alerts.models import (
    AlertState,
    Condition,
    GuardComparison,
    GuardKind,
    Metric,
    RolloutGuardSet,
    Scope,
    WebhookDelivery,
    WebhookFormat,
)
from .alerts.sequential import QUANTILE_METRICS, SEQUENTIAL_METRICS
from .alerts.services.guards import (
    DEFAULT_BAKE_MINUTES,
    MAX_BAKE_MINUTES,
    MAX_CONFIDENCE,
    MAX_EXPOSURE,
    MAX_EXTENSIONS,
    MAX_GUARDS,
    MIN_CONFIDENCE,
    PRESETS,
)
from .feedback.messages import MAX_ITEMS as MAX_FEEDBACK_ITEMS
from .ingest.events import FIELDS, MAX_EVENTS, FieldRule

# --- telemetry ingest ------------------------------------------------------------------------


def _event_field(rule: FieldRule) -> serializers.Field[Any, Any, Any, Any]:
    options: dict[str, Any] = {"required": rule.required}
    if not rule.required:
        options["allow_null"] = rule.kind != "bool"
    if rule.kind == "uuid":
        return serializers.UUIDField(**options)
    if rule.kind == "datetime":
        return serializers.DateTimeField(help_text="RFC 3339 with a time zone", **options)
    if rule.kind == "enum":
        return serializers.ChoiceField(choices=list(rule.choices), **options)
    if rule.kind == "bool":
        return serializers.BooleanField(**options)
    if rule.kind == "str":
        return serializers.CharField(min_length=1, max_length=rule.max_length, **options)
    numeric: dict[str, Any] = {**options, "min_value": rule.minimum, "max_value": rule.maximum}
    if rule.kind == "int":
        return serializers.IntegerField(**numeric)
    return serializers.FloatField(**numeric)


TelemetryEventSerializer = type(
    "TelemetryEventSerializer",
    (serializers.Serializer,),
    {
        **{rule.name: _event_field(rule) for rule in FIELDS},
        "__doc__": "One routing decision as a device reports it (PROTOCOL.md).",
        "Meta": type("Meta", (), {"ref_name": "TelemetryEvent"}),
    },
)


class TelemetryBatchSerializer(serializers.Serializer[Any]):
    events = serializers.ListField(child=TelemetryEventSerializer(), max_length=MAX_EVENTS)

    class Meta:
        ref_name = "TelemetryBatch"


class TelemetryFeedbackItemSerializer(serializers.Serializer[Any]):
    """The app's quality reading of one event it sent before (PROTOCOL.md extensions)."""

    event_id = serializers.UUIDField()
    quality = serializers.FloatField(min_value=0.0, max_value=1.0)

    class Meta:
        ref_name = "TelemetryFeedbackItem"


class TelemetryFeedbackBatchSerializer(serializers.Serializer[Any]):
    feedback = serializers.ListField(
        child=TelemetryFeedbackItemSerializer(), min_length=1, max_length=MAX_FEEDBACK_ITEMS
    )

    class Meta:
        ref_name = "TelemetryFeedbackBatch"


class TelemetryAcceptedSerializer(serializers.Serializer[Any]):
    accepted = serializers.IntegerField(min_value=0, help_text="new events, now durable")
    duplicates = serializers.IntegerField(min_value=0, help_text="event ids already received")

    class Meta:
        ref_name = "TelemetryAccepted"


class IngestStatusSerializer(serializers.Serializer[Any]):
    landed_batches = serializers.IntegerField(min_value=0)
    landed_events = serializers.IntegerField(min_value=0)
    lag_seconds = serializers.FloatField(min_value=0)

    class Meta:
        ref_name = "IngestStatus"


# --- metrics ------------------------------------------------------------------------------------


class LatencyFiguresSerializer(serializers.Serializer[Any]):
    mean = serializers.FloatField(allow_null=True)
    p50 = serializers.FloatField(allow_null=True)
    p95 = serializers.FloatField(allow_null=True)
    p99 = serializers.FloatField(allow_null=True)

    class Meta:
        ref_name = "LatencyFigures"


class FallbackRatesSerializer(serializers.Serializer[Any]):
    cloud_to_device = serializers.FloatField(allow_null=True)
    device_to_cloud = serializers.FloatField(allow_null=True)

    class Meta:
        ref_name = "FallbackRates"


class TokensPerTaskSerializer(serializers.Serializer[Any]):
    """Mean tokens per task on each route; null where the route had no task."""

    device = serializers.FloatField(allow_null=True)
    cloud = serializers.FloatField(allow_null=True)
    draft_refine = serializers.FloatField(allow_null=True)

    class Meta:
        ref_name = "TokensPerTask"


class ScoreHistogramSerializer(serializers.Serializer[Any]):
    bin_width = serializers.FloatField()
    counts = serializers.ListField(child=serializers.IntegerField(min_value=0))

    class Meta:
        ref_name = "ScoreHistogram"


class MetricsGroupSerializer(serializers.Serializer[Any]):
    """One group's figures; its `group_by` keys (version, cohort, route, cell dimensions) too."""

    version = serializers.IntegerField(required=False)
    cohort = serializers.CharField(
        required=False,
        allow_null=True,
        help_text="stable or candidate (the arms of `cohorts`); null: an event of neither arm",
    )
    route = serializers.CharField(required=False)
    task_type = serializers.CharField(required=False)
    latency_budget = serializers.CharField(required=False)
    privacy_tier = serializers.CharField(required=False)
    events = serializers.IntegerField(min_value=0)
    alpha = serializers.FloatField(allow_null=True, help_text="device share")
    cloud_share = serializers.FloatField(allow_null=True)
    draft_refine_share = serializers.FloatField(allow_null=True)
    fallback_rate = serializers.FloatField(allow_null=True)
    fallback_rates = FallbackRatesSerializer()
    cache_hit_rate = serializers.FloatField(allow_null=True)
    error_rate = serializers.FloatField(allow_null=True)
    privacy_violations = serializers.IntegerField(min_value=0)
    latency_ms = LatencyFiguresSerializer()
    draft_kept_rate = serializers.FloatField(
        allow_null=True,
        help_text="share of the events reporting refine_changed whose draft the cloud kept",
    )
    mean_quality = serializers.FloatField(
        allow_null=True, help_text="mean app quality (from events and late feedback)"
    )
    refine_reported = serializers.IntegerField(
        min_value=0, help_text="events reporting refine_changed"
    )
    quality_count = serializers.IntegerField(
        min_value=0, help_text="quality readings (from events and late feedback)"
    )
    score_mean = serializers.FloatField(allow_null=True)
    tokens_per_task = TokensPerTaskSerializer(
        help_text="mean tokens per task per route (a task sent without `tokens` counts as 0)"
    )
    score_histogram = ScoreHistogramSerializer(required=False, help_text="with ?scores=true")

    class Meta:
        ref_name = "MetricsGroup"


class MetricsWindowSerializer(serializers.Serializer[Any]):
    to = serializers.DateTimeField()
    resolution = serializers.ChoiceField(choices=["minute", "hour"])

    class Meta:
        ref_name = "MetricsWindow"

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        # `from` is a Python keyword: it cannot be a class attribute.
        return {"from": serializers.DateTimeField(), **super().get_fields()}


class CohortArmsSerializer(serializers.Serializer[Any]):
    """The version each cohort counts (docs/telemetry.md, "Cohorts"); null: every version."""

    stable = serializers.IntegerField(allow_null=True)
    candidate = serializers.IntegerField(allow_null=True)

    class Meta:
        ref_name = "CohortArms"


class FleetMetricsSerializer(serializers.Serializer[Any]):
    fleet = serializers.SlugField()
    window = MetricsWindowSerializer()
    group_by = serializers.ListField(child=serializers.CharField())
    filters = serializers.DictField(child=serializers.JSONField(), help_text="the filters set")
    cohorts = CohortArmsSerializer(
        required=False, help_text="with a cohort grouping or filter: the version each counts"
    )
    groups = MetricsGroupSerializer(many=True)

    class Meta:
        ref_name = "FleetMetrics"


# --- dashboard ----------------------------------------------------------------------------------


class DashboardWindowSerializer(MetricsWindowSerializer):
    bucket_seconds = serializers.IntegerField(min_value=1)

    class Meta:
        ref_name = "DashboardWindow"


class DashboardMarkerSerializer(serializers.Serializer[Any]):
    at = serializers.DateTimeField()
    kind = serializers.ChoiceField(choices=["published", "switched", "rollout", "rolled_back"])
    label = serializers.CharField()  # type: ignore[assignment]  # a declared field
    summary = serializers.CharField(allow_blank=True)

    class Meta:
        ref_name = "DashboardMarker"


class DashboardOptionsSerializer(serializers.Serializer[Any]):
    versions = serializers.ListField(child=serializers.IntegerField())
    task_types = serializers.ListField(child=serializers.CharField())

    class Meta:
        ref_name = "DashboardOptions"


class DashboardConvergenceVersionSerializer(serializers.Serializer[Any]):
    version = serializers.IntegerField()
    role = serializers.ChoiceField(choices=["stable", "candidate", "other"])
    assigned = serializers.IntegerField(min_value=0)
    acked = serializers.IntegerField(min_value=0)
    online = serializers.IntegerField(min_value=0)

    class Meta:
        ref_name = "DashboardConvergenceVersion"


class DashboardConvergenceSerializer(serializers.Serializer[Any]):
    devices = serializers.IntegerField(min_value=0)
    online = serializers.IntegerField(min_value=0)
    versions = DashboardConvergenceVersionSerializer(many=True)

    class Meta:
        ref_name = "DashboardConvergence"


class DashboardViewSerializer(serializers.Serializer[Any]):
    window = serializers.CharField()
    version = serializers.IntegerField(allow_null=True)
    cohort = serializers.CharField(allow_null=True)
    task_type = serializers.CharField(allow_null=True)
    route = serializers.CharField(allow_null=True)

    class Meta:
        ref_name = "DashboardView"


class DashboardAllCloudSerializer(serializers.Serializer[Any]):
    window = serializers.FloatField()
    per_hour = serializers.FloatField(allow_null=True)
    per_day = serializers.FloatField(allow_null=True)

    class Meta:
        ref_name = "DashboardAllCloudCost"


class DashboardSavingSerializer(serializers.Serializer[Any]):
    amount = serializers.FloatField(help_text="the baseline's cost minus the actual, in the view")
    share = serializers.FloatField(allow_null=True, help_text="amount / the baseline's cost")

    class Meta:
        ref_name = "CostSaving"


class DashboardCohortCostSerializer(serializers.Serializer[Any]):
    """Cost per task of the compared rollout's two cohorts."""

    stable_version = serializers.IntegerField()
    candidate_version = serializers.IntegerField()
    stable_events = serializers.IntegerField()
    candidate_events = serializers.IntegerField()
    stable_per_task = serializers.FloatField()
    candidate_per_task = serializers.FloatField()
    candidate_change = serializers.FloatField(
        allow_null=True, help_text="candidate per task / stable per task - 1"
    )
    candidate_change_low = serializers.FloatField(
        allow_null=True, help_text="95% interval of candidate_change: its low end"
    )
    candidate_change_high = serializers.FloatField(
        allow_null=True, help_text="95% interval of candidate_change: its high end"
    )

    class Meta:
        ref_name = "DashboardCohortCost"


class CostSpanSerializer(serializers.Serializer[Any]):
    """The span that holds data: the first and the last event the cost is taken over."""

    from_ = serializers.DateTimeField(allow_null=True, help_text="the first event")
    to = serializers.DateTimeField(allow_null=True, help_text="the last event")
    text = serializers.CharField(allow_null=True, help_text='its length in words ("3 h 12 m")')

    def get_fields(self) -> dict[str, Any]:
        fields = super().get_fields()
        fields["from"] = fields.pop("from_")
        return fields

    class Meta:
        ref_name = "CostSpan"


class DashboardPriceSerializer(serializers.Serializer[Any]):
    per_1k_tokens = serializers.FloatField()
    per_call = serializers.FloatField()

    class Meta:
        ref_name = "DashboardCloudPrice"


class CostReportSerializer(serializers.Serializer[Any]):
    """A cost over a span, per hour and day, with the savings against all-cloud and against
    the stable version (routing_policies.pricing.cost_report; docs/lab.md, "Cost")."""

    currency = serializers.CharField()
    # `label` in the answer (a serializer's own attribute of that name is its field label).
    label_ = serializers.CharField(help_text='the figure\'s name on every page: "Cloud cost / day"')
    hours = serializers.FloatField(
        help_text="the span that holds data (first to last event), in hours: per_hour and "
        "per_day are the cost over it; 0 (and they null) with fewer than two events"
    )
    span = CostSpanSerializer()
    window = serializers.FloatField(help_text="the cost over the span")
    per_hour = serializers.FloatField(allow_null=True)
    per_day = serializers.FloatField(allow_null=True)
    all_cloud = DashboardAllCloudSerializer(help_text="every task priced as a cloud call")
    stable = DashboardAllCloudSerializer(
        allow_null=True, help_text="the stable version on the same tasks; null: no comparison"
    )
    saving_vs_all_cloud = DashboardSavingSerializer()
    saving_vs_stable = DashboardSavingSerializer(allow_null=True)

    def get_fields(self) -> dict[str, Any]:
        fields = super().get_fields()
        fields["label"] = fields.pop("label_")
        return fields

    class Meta:
        ref_name = "CostReport"


class DashboardCostSerializer(CostReportSerializer):
    """The cloud cost of the view, priced by the fleet's cloud price (docs/lab.md, Cost).

    `stable` is the view had the candidate's tasks cost what the stable cohort's cost per task;
    null without a rollout whose two cohorts both have tasks in the view."""

    price = DashboardPriceSerializer()
    cloud_calls = serializers.FloatField(help_text="cloud and draft_refine tasks, not cached")
    cloud_tokens = serializers.FloatField()
    saving = serializers.FloatField(help_text="all-cloud minus actual, in the view")
    saving_share = serializers.FloatField(allow_null=True, help_text="saving / all-cloud")
    cohorts = DashboardCohortCostSerializer(
        allow_null=True, help_text="the rollout in progress, past min_compared_tasks per cohort"
    )
    cohorts_withheld = serializers.CharField(
        allow_null=True, help_text="why cohorts is null, in words; null when it is shown"
    )
    min_compared_tasks = serializers.IntegerField(
        help_text="tasks each cohort needs in the view before their costs are compared"
    )

    class Meta:
        ref_name = "DashboardCost"


class FleetDashboardSerializer(serializers.Serializer[Any]):
    """Everything the fleet dashboard draws; series are lists aligned with `buckets`."""

    fleet = serializers.SlugField()
    view = DashboardViewSerializer()
    view_key = serializers.CharField()
    generated_at = serializers.DateTimeField()
    window = DashboardWindowSerializer()
    buckets = serializers.ListField(child=serializers.DateTimeField())
    summary = serializers.DictField(help_text="headline figures of the whole view")
    series = serializers.DictField(help_text="per-bucket series, each a list aligned with buckets")
    routes = serializers.DictField(help_text="latency and shares per route")
    cohorts = serializers.DictField(help_text="figures and series of the stable and candidate")
    cost = DashboardCostSerializer()
    budgets = serializers.JSONField(help_text="the policy's latency budgets per route")
    grid = serializers.JSONField(
        help_text="cloud share, P95, draft-kept rate and mean app quality per policy cell"
    )
    markers = DashboardMarkerSerializer(many=True)
    options = DashboardOptionsSerializer()
    stable_version = serializers.IntegerField(allow_null=True)
    rollout = RolloutSerializer(allow_null=True)
    convergence = DashboardConvergenceSerializer()
    alerts = serializers.JSONField(allow_null=True, help_text="kept live by the alert feed")

    class Meta:
        ref_name = "FleetDashboard"


# --- alert rules ----------------------------------------------------------------------------------


class AlertRuleSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    name = serializers.CharField()
    metric = serializers.ChoiceField(choices=Metric.values)
    condition = serializers.ChoiceField(choices=Condition.values)
    threshold = serializers.FloatField()
    window_minutes = serializers.IntegerField()
    min_samples = serializers.IntegerField()
    for_seconds = serializers.IntegerField()
    hysteresis = serializers.FloatField()
    scope = serializers.ChoiceField(choices=Scope.values)
    scope_value = serializers.CharField(allow_blank=True)
    enabled = serializers.BooleanField()
    revision = serializers.IntegerField()
    state = serializers.ChoiceField(choices=AlertState.values)
    state_since = serializers.DateTimeField()
    value = serializers.FloatField(allow_null=True)
    previous_value = serializers.FloatField(allow_null=True)
    samples = serializers.IntegerField(allow_null=True)
    message = serializers.CharField(allow_blank=True)
    evaluated_at = serializers.DateTimeField(allow_null=True)

    class Meta:
        ref_name = "AlertRule"


class AlertRuleListSerializer(serializers.Serializer[Any]):
    results = AlertRuleSerializer(many=True)

    class Meta:
        ref_name = "AlertRuleList"


def _rule_input_fields(*, partial: bool) -> dict[str, Any]:
    required = not partial
    return {
        "name": serializers.RegexField(
            RULE_NAME_PATTERN, min_length=1, max_length=MAX_RULE_NAME_LENGTH, required=required
        ),
        "metric": serializers.ChoiceField(choices=Metric.values, required=required),
        "condition": serializers.ChoiceField(
            choices=Condition.values,
            required=required,
            help_text="events (silence) is judged above or below a count, not rises_by/falls_by",
        ),
        "threshold": serializers.FloatField(
            min_value=-MAX_THRESHOLD,
            max_value=MAX_THRESHOLD,
            required=required,
            help_text="shares (cloud_share, alpha, fallback_rate, error_rate, cache_hit_rate, "
            "draft_kept_rate, mean_quality) are fractions from 0 to 1, and so is a change's "
            "size (rises_by 0.2: up by 20 points; the condition gives the direction); latency "
            "metrics are ratios to each cell's budget; events is a count",
        ),
        "window_minutes": serializers.IntegerField(
            min_value=MIN_WINDOW_MINUTES, max_value=MAX_WINDOW_MINUTES, required=False
        ),
        "min_samples": serializers.IntegerField(
            min_value=0, max_value=MAX_MIN_SAMPLES, required=False
        ),
        "for_seconds": serializers.IntegerField(
            min_value=0, max_value=MAX_FOR_SECONDS, required=False
        ),
        "hysteresis": serializers.FloatField(
            min_value=0,
            max_value=MAX_HYSTERESIS,
            required=False,
            help_text="how far back past the threshold the value must come before the rule "
            "clears, in the threshold's unit (a share's is a fraction from 0 to 1)",
        ),
        "scope": serializers.ChoiceField(choices=Scope.values, required=False),
        "scope_value": serializers.CharField(
            max_length=MAX_SCOPE_VALUE_LENGTH,
            allow_blank=True,
            required=False,
            help_text="version: a number; cohort: stable or candidate; "
            "cell: task_type/latency_budget/privacy_tier; fleet: empty",
        ),
        "enabled": serializers.BooleanField(required=False),
    }


AlertRuleCreateSerializer = closed_body(
    type(
        "AlertRuleCreateSerializer",
        (serializers.Serializer,),
        {
            **_rule_input_fields(partial=False),
            "Meta": type("Meta", (), {"ref_name": "AlertRuleCreate"}),
        },
    )
)
AlertRuleUpdateSerializer = closed_body(
    type(
        "AlertRuleUpdateSerializer",
        (serializers.Serializer,),
        {
            "revision": serializers.IntegerField(
                help_text="the rule's revision from the last read"
            ),
            **_rule_input_fields(partial=True),
            "Meta": type("Meta", (), {"ref_name": "AlertRuleUpdate"}),
        },
    )
)


class AlertEventSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    kind = serializers.CharField()
    rule_id = serializers.IntegerField(allow_null=True)
    rule = serializers.CharField(allow_blank=True)
    rollout_id = serializers.IntegerField(allow_null=True)
    state_before = serializers.CharField(allow_blank=True)
    state_after = serializers.CharField(allow_blank=True)
    value = serializers.FloatField(allow_null=True)
    previous_value = serializers.FloatField(allow_null=True)
    samples = serializers.IntegerField(allow_null=True)
    message = serializers.CharField(allow_blank=True)
    at = serializers.DateTimeField()

    class Meta:
        ref_name = "AlertEvent"


class AlertEventListSerializer(serializers.Serializer[Any]):
    results = AlertEventSerializer(many=True)

    class Meta:
        ref_name = "AlertEventList"


class FiringAlertSerializer(serializers.Serializer[Any]):
    rule_id = serializers.IntegerField()
    fleet = serializers.SlugField()
    name = serializers.CharField()
    message = serializers.CharField(allow_blank=True)
    since = serializers.DateTimeField(allow_null=True)

    class Meta:
        ref_name = "FiringAlert"


class FiringAlertListSerializer(serializers.Serializer[Any]):
    results = FiringAlertSerializer(many=True)

    class Meta:
        ref_name = "FiringAlertList"


# --- webhooks ---------------------------------------------------------------------------------


class AlertWebhookSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    url = serializers.URLField()
    format = serializers.ChoiceField(choices=WebhookFormat.values)
    rule_id = serializers.IntegerField(allow_null=True)
    enabled = serializers.BooleanField()

    class Meta:
        ref_name = "AlertWebhook"


class AlertWebhookListSerializer(serializers.Serializer[Any]):
    results = AlertWebhookSerializer(many=True)

    class Meta:
        ref_name = "AlertWebhookList"


@closed_body
class AlertWebhookCreateSerializer(serializers.Serializer[Any]):
    url = serializers.URLField(
        max_length=500, help_text="http(s), a public address unless the deployment allows others"
    )
    format = serializers.ChoiceField(choices=WebhookFormat.values, required=False)
    rule_id = serializers.IntegerField(
        required=False, allow_null=True, help_text="one rule of this fleet; null: every rule"
    )

    class Meta:
        ref_name = "AlertWebhookCreate"


class WebhookDeliverySerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    webhook_id = serializers.IntegerField(allow_null=True)
    alert_event_id = serializers.IntegerField(allow_null=True)
    url = serializers.CharField()
    status = serializers.ChoiceField(choices=WebhookDelivery.Status.values)
    attempts = serializers.IntegerField(min_value=0)
    attempt_log = serializers.JSONField(help_text="each attempt: when, status code, error")
    next_attempt_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    payload = serializers.JSONField()

    class Meta:
        ref_name = "WebhookDelivery"


class WebhookDeliveryListSerializer(serializers.Serializer[Any]):
    results = WebhookDeliverySerializer(many=True)

    class Meta:
        ref_name = "WebhookDeliveryList"


# --- rollout guards -------------------------------------------------------------------------------


class GuardPointSerializer(serializers.Serializer[Any]):
    at = serializers.DateTimeField()
    stage = serializers.IntegerField()
    estimate = serializers.FloatField(allow_null=True)
    lower = serializers.FloatField(allow_null=True)
    upper = serializers.FloatField(allow_null=True)
    state = serializers.ChoiceField(choices=["collecting", "healthy", "inconclusive", "regressed"])
    scope = serializers.CharField(
        required=False, help_text='"fleet", or the cell the point is about: task/budget/tier'
    )

    class Meta:
        ref_name = "GuardPoint"


class SampleRatioSerializer(serializers.Serializer[Any]):
    observed = serializers.IntegerField()
    total = serializers.IntegerField()
    share = serializers.FloatField()
    expected_share = serializers.FloatField()
    chi_square = serializers.FloatField()
    p_value = serializers.FloatField()

    class Meta:
        ref_name = "SampleRatio"


class GuardDecideSerializer(serializers.Serializer[Any]):
    """When a statistical guard can decide at the current rate (docs/alerts.md)."""

    minutes = serializers.FloatField(
        allow_null=True, help_text="null: not within the stage's limit (or 24 h) at this rate"
    )
    text = serializers.CharField(help_text='"decides in about 17 min at the current rate (…)"')
    shorter = serializers.ListField(
        child=serializers.CharField(), help_text="what would shorten it, each with its estimate"
    )
    candidate_per_minute = serializers.FloatField()
    stable_per_minute = serializers.FloatField()
    horizon_minutes = serializers.FloatField()

    class Meta:
        ref_name = "GuardDecide"


class GuardStateSerializer(serializers.Serializer[Any]):
    metric = serializers.ChoiceField(choices=sorted(GUARD_METRICS))
    metric_label = serializers.CharField()
    comparison = serializers.ChoiceField(choices=GuardComparison.values)
    comparison_label = serializers.CharField()
    threshold = serializers.FloatField()
    threshold_text = serializers.CharField()
    min_samples = serializers.IntegerField()
    state = serializers.CharField()
    candidate_value = serializers.FloatField(allow_null=True)
    stable_value = serializers.FloatField(allow_null=True)
    candidate_samples = serializers.IntegerField(allow_null=True)
    stable_samples = serializers.IntegerField(allow_null=True)
    message = serializers.CharField(allow_blank=True)
    kind = serializers.ChoiceField(choices=GuardKind.values)
    confidence = serializers.FloatField(allow_null=True, help_text="null for a fixed guard")
    per_cell = serializers.BooleanField(allow_null=True, help_text="null for a fixed guard")
    estimate = serializers.FloatField(
        allow_null=True,
        help_text="how much worse the candidate is: points of a rate (0.03 is 3 pts), or the "
        "latency quantile's ratio minus one (0.2 is 20% slower); at `scope`",
    )
    lower = serializers.FloatField(allow_null=True, help_text="the interval's lower end")
    upper = serializers.FloatField(allow_null=True, help_text="the interval's upper end")
    scope = serializers.CharField(
        allow_blank=True, help_text='"fleet", or the cell it acted on: task/budget/tier'
    )
    series = GuardPointSerializer(many=True, help_text="the interval over time, oldest first")
    decide = GuardDecideSerializer(
        allow_null=True,
        help_text="a statistical guard not yet healthy: when it can decide (null otherwise)",
    )

    class Meta:
        ref_name = "GuardState"


class GuardSetSerializer(serializers.Serializer[Any]):
    window_minutes = serializers.IntegerField()
    bake_minutes = serializers.DictField(
        child=serializers.IntegerField(), help_text="minutes per stage: 5, 25, 100"
    )
    auto_advance = serializers.BooleanField()
    verdict = serializers.ChoiceField(choices=RolloutGuardSet.Verdict.values)
    verdict_label = serializers.CharField()
    reason = serializers.CharField(allow_blank=True)
    quiet_since = serializers.DateTimeField(allow_null=True)
    evaluated_at = serializers.DateTimeField(allow_null=True)
    min_devices = serializers.IntegerField()
    min_events = serializers.IntegerField()
    stage_limit_minutes = serializers.IntegerField()
    max_extensions = serializers.IntegerField()
    extensions_used = serializers.IntegerField()
    on_expiry = serializers.ChoiceField(choices=RolloutGuardSet.OnExpiry.values)
    sample_ratios = serializers.DictField(
        child=SampleRatioSerializer(),
        help_text='"devices", "events": the last sample ratio checks (statistical guards)',
    )
    guards = GuardStateSerializer(many=True)

    class Meta:
        ref_name = "GuardSet"


class RolloutGuardsSerializer(serializers.Serializer[Any]):
    rollout = serializers.IntegerField(allow_null=True, help_text="the open (or last) rollout")
    guards = GuardSetSerializer(allow_null=True, help_text="null: the rollout has no guards")

    class Meta:
        ref_name = "RolloutGuards"


_MINUTES = {"type": "integer", "minimum": 0, "maximum": MAX_BAKE_MINUTES}


def _guard_schema(
    metrics: frozenset[str], comparisons: list[str], threshold: dict[str, Any]
) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "metric": {"type": "string", "enum": sorted(metrics)},
            "comparison": {"type": "string", "enum": comparisons},
            "threshold": {"type": "number", **threshold},
            "min_samples": {"type": "integer", "minimum": 0, "maximum": MAX_MIN_SAMPLES},
            "kind": {"type": "string", "enum": [GuardKind.FIXED]},
        },
        "required": ["metric", "comparison", "threshold"],
    }


def _sequential_schema(metrics: frozenset[str], maximum: float) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "kind": {"type": "string", "enum": [GuardKind.SEQUENTIAL]},
            "metric": {"type": "string", "enum": sorted(metrics)},
            "tolerance": {"type": "number", "minimum": 0, "maximum": maximum},
            "confidence": {"type": "number", "minimum": MIN_CONFIDENCE, "maximum": MAX_CONFIDENCE},
            "per_cell": {"type": "boolean"},
            "min_samples": {"type": "integer", "minimum": 0, "maximum": MAX_MIN_SAMPLES},
        },
        "required": ["kind", "metric", "tolerance"],
        "additionalProperties": False,
    }


# What services.guards._clean_guards accepts, as a schema: a share's threshold is a fraction.
GUARDS_SCHEMA: dict[str, Any] = {
    "oneOf": [
        {"type": "string", "enum": sorted(PRESETS)},
        {
            "type": "array",
            "minItems": 1,
            "maxItems": MAX_GUARDS,
            "items": {
                "oneOf": [
                    # A share is 0 to 1; a difference of two shares may be negative.
                    _guard_schema(
                        RATE_METRICS, [GuardComparison.ABOVE.value], {"minimum": 0, "maximum": 1}
                    ),
                    _guard_schema(
                        RATE_METRICS,
                        [GuardComparison.ABOVE_STABLE_BY.value],
                        {"minimum": -1, "maximum": 1},
                    ),
                    _guard_schema(
                        GUARD_METRICS - RATE_METRICS,
                        list(GuardComparison.values),
                        {"minimum": -1e9, "maximum": 1e9},
                    ),
                    _sequential_schema(SEQUENTIAL_METRICS - frozenset(QUANTILE_METRICS), 1),
                    _sequential_schema(frozenset(QUANTILE_METRICS), 10),
                ]
            },
        },
    ],
    "nullable": True,
    "description": '"default" (or null), "statistical", "quality" (statistical and the '
    f"draft-kept rate at most 3 pts below stable), or a list of 1 to {MAX_GUARDS} guards; "
    "a fixed guard's share threshold is a fraction from 0 to 1 for `above` (0.02 is 2%) and "
    "from -1 to 1 for `above_stable_by` (0.02 is 2 points above stable); a "
    'sequential guard ("kind": "sequential") tolerates a regression: a fraction of a share '
    "from 0 to 1, or of a latency quantile from 0 to 10 (0.2: 20% slower)",
}
# What services.guards._clean_bake accepts: minutes at every stage, or per stage (missing: 0).
BAKE_MINUTES_SCHEMA: dict[str, Any] = {
    "oneOf": [
        _MINUTES,
        {
            "type": "object",
            "properties": {str(stage): _MINUTES for stage in Rollout.STAGES},
            "additionalProperties": False,
        },
    ],
    "nullable": True,
    "description": f"minutes from 0 to {MAX_BAKE_MINUTES} at every stage "
    f"(null: {DEFAULT_BAKE_MINUTES}), "
    'or per stage: {"5": 10, "25": 20, "100": 30} (a missing stage bakes 0)',
}


@extend_schema_field(GUARDS_SCHEMA)
class GuardsField(serializers.JSONField):
    """The guards of a rollout, as the schema declares them; the service checks them."""


@extend_schema_field(BAKE_MINUTES_SCHEMA)
class BakeMinutesField(serializers.JSONField):
    """The bake time of a rollout, as the schema declares it; the service checks it."""


@closed_body
class RolloutGuardsInputSerializer(serializers.Serializer[Any]):
    """The guards of an open rollout (PUT), or of the rollout a start opens."""

    guards = GuardsField(required=False)
    bake_minutes = BakeMinutesField(required=False)
    auto_advance = serializers.BooleanField(required=False)
    window_minutes = serializers.IntegerField(
        min_value=MIN_WINDOW_MINUTES, max_value=MAX_WINDOW_MINUTES, required=False
    )
    min_samples = serializers.IntegerField(min_value=0, max_value=MAX_MIN_SAMPLES, required=False)
    min_devices = serializers.IntegerField(
        min_value=0,
        max_value=MAX_EXPOSURE,
        required=False,
        help_text="candidate devices a stage needs before it may advance",
    )
    min_events = serializers.IntegerField(
        min_value=0,
        max_value=MAX_EXPOSURE,
        required=False,
        help_text="candidate events a stage needs before it may advance",
    )
    stage_limit_minutes = serializers.IntegerField(
        min_value=0,
        max_value=MAX_BAKE_MINUTES,
        required=False,
        help_text="0: none; past it a stage that cannot advance is extended, then expires",
    )
    max_extensions = serializers.IntegerField(min_value=0, max_value=MAX_EXTENSIONS, required=False)
    on_expiry = serializers.ChoiceField(choices=RolloutGuardSet.OnExpiry.values, required=False)

    class Meta:
        ref_name = "RolloutGuardsInput"
