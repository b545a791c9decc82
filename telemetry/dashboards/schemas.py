"""The metrics API and the fleet dashboard in the OpenAPI schema: their queries and answers.

A query's serializer is the one declaration of its input: the API validates it in one pass,
the schema shows it, and the page and the live feed read a view with it (`parse_view`).
The views answer with the selectors' dicts (the same the page and the live feed use); the
output serializers are their contract. Each component is named after its class, without
`Serializer` (drf-spectacular's default), so no `Meta.ref_name` repeats it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from rest_framework import serializers

from controlplane.exceptions import ValidationFailed, drf_error_details
from routing_policies.apis import RolloutSerializer
from routing_policies.validation import DIMENSION_VALUE_RE, MAX_VERSION

from ..api_schemas import CostReportSerializer, KeywordNamedSerializer, segment_field
from ..rollups import CELL_DIMENSIONS
from .selectors import COHORTS, DEFAULT_WINDOW, FILTERS, ROUTES, WINDOWS, DashboardView

# --- the queries ------------------------------------------------------------------------------

# 1 to 99999 minutes, 9600 hours or 400 days (the longest window the rollups keep).
WINDOW_RE = (
    r"\A(?:[1-9][0-9]{0,4}m|(?:[1-9][0-9]{0,2}|[1-8][0-9]{3}|9[0-5][0-9]{2}|9600)h"
    r"|(?:[1-9][0-9]?|[1-3][0-9]{2}|400)d)\Z"
)
_WINDOW_UNITS = {"m": timedelta(minutes=1), "h": timedelta(hours=1), "d": timedelta(days=1)}
_GROUP_NAME = "(?:version|cohort|cell|route|task_type|latency_budget|privacy_tier)"
_TASK_TYPE_MESSAGE = (
    "`task_type` must be a task type name (a lower-case letter, then a-z, 0-9, _ or -; ≤ 32)."
)
_VERSION_MESSAGE = "`version` must be a version number such as 3."


class _DigitsIntegerField(serializers.IntegerField):
    """An integer written in ASCII digits (Python's int() reads "٣" as 3 too)."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, str) and not data.strip().isascii():
            self.fail("invalid")
        return super().to_internal_value(data)


class _FleetFiltersSerializer(serializers.Serializer[Any]):
    """The filters the metrics API and the dashboard share: a version, a cohort, a route and a
    task type."""

    version = _DigitsIntegerField(
        min_value=1,
        max_value=MAX_VERSION,
        required=False,
        help_text="only this version",
        error_messages=dict.fromkeys(
            ("invalid", "min_value", "max_value", "max_string_length"), _VERSION_MESSAGE
        ),
    )
    cohort = serializers.ChoiceField(
        choices=list(COHORTS),
        required=False,
        error_messages={"invalid_choice": "`cohort` must be stable or candidate."},
    )
    route = serializers.ChoiceField(
        choices=list(ROUTES),
        required=False,
        error_messages={"invalid_choice": f"`route` must be one of {', '.join(ROUTES)}."},
    )
    task_type = serializers.RegexField(
        DIMENSION_VALUE_RE,
        trim_whitespace=False,
        required=False,
        help_text="only this task type",
        error_messages={"invalid": _TASK_TYPE_MESSAGE},
    )
    segment = segment_field(
        serializers.RegexField,
        "only the devices of this named segment of the fleet (their events as counted when "
        "they were processed); an unknown name is refused (400)",
        trim_whitespace=False,
    )


class FleetDashboardQuerySerializer(_FleetFiltersSerializer):
    """The view a dashboard shows: a window and optional filters (`selectors.DashboardView`)."""

    window = serializers.ChoiceField(
        choices=list(WINDOWS),
        default=DEFAULT_WINDOW,
        error_messages={"invalid_choice": f"`window` must be one of {', '.join(WINDOWS)}."},
    )


def refuse_unknown(params: Mapping[str, Any]) -> None:
    """Refuse a parameter that is not a window or a filter: a typo such as `?tasktype=voice`
    must not silently show the unfiltered fleet."""
    unknown = sorted(str(name) for name in params if name not in ("window", *FILTERS))
    if unknown:
        raise ValidationFailed(
            f"Unknown parameter {unknown[0]!r}; use window, {', '.join(FILTERS)}.",
            details=[{"field": name, "message": "unknown parameter"} for name in unknown],
        )


def parse_view(params: Mapping[str, Any], *, strict: bool = True) -> DashboardView:
    """The view a page's query or a feed message names, checked by FleetDashboardQuerySerializer;
    a ValidationFailed naming the field otherwise (with `strict`, unknown parameters too).

    As a person types them: a blank value is no filter, `v3` is version 3, spaces around a
    value are dropped; a value that is neither text nor a whole number (a list, `true`) is
    refused.
    """
    if strict:
        refuse_unknown(params)
    data: dict[str, Any] = {}
    for name in ("window", *FILTERS):
        raw = params.get(name)
        if raw is None or raw == "":
            continue
        if isinstance(raw, bool) or not isinstance(raw, str | int):
            raise ValidationFailed(
                f"`{name}` must be a string.",
                details=[{"field": name, "message": "must be a string"}],
            )
        text = raw.strip() if isinstance(raw, str) else raw
        data[name] = text.removeprefix("v") if name == "version" and isinstance(text, str) else text
    serializer = FleetDashboardQuerySerializer(data=data)
    if not serializer.is_valid():
        details = drf_error_details(serializer.errors)
        raise ValidationFailed(details[0]["message"], details=details)
    return DashboardView(**serializer.validated_data)


class FleetMetricsQuerySerializer(_FleetFiltersSerializer):
    """The window, grouping and filters of `GET /api/v1/fleets/<slug>/metrics`."""

    window = serializers.RegexField(
        WINDOW_RE,
        trim_whitespace=False,
        default="1h",
        help_text="15m, 1h, 24h, 7d, … up to 400d",
    )
    group_by = serializers.RegexField(
        rf"\A{_GROUP_NAME}(?:,{_GROUP_NAME})*\Z",
        trim_whitespace=False,
        required=False,
        help_text="comma-separated: version, cohort, cell, route, task_type, "
        "latency_budget, privacy_tier",
    )
    latency_budget = serializers.RegexField(
        DIMENSION_VALUE_RE, trim_whitespace=False, required=False
    )
    privacy_tier = serializers.RegexField(DIMENSION_VALUE_RE, trim_whitespace=False, required=False)
    scores = serializers.BooleanField(default=False, help_text="add the complexity-score histogram")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """The window as a duration and the grouping as names (`cell`: its three dimensions,
        each once), as the fields' patterns admitted them."""
        window = attrs["window"]
        attrs["window"] = int(window[:-1]) * _WINDOW_UNITS[window[-1]]
        names = attrs.get("group_by", "").split(",") if attrs.get("group_by") else []
        expanded = (CELL_DIMENSIONS if name == "cell" else (name,) for name in names)
        attrs["group_by"] = list(dict.fromkeys(name for group in expanded for name in group))
        return attrs


# --- the answers ------------------------------------------------------------------------------


class LatencyFiguresSerializer(serializers.Serializer[Any]):
    mean = serializers.FloatField(allow_null=True)
    p50 = serializers.FloatField(allow_null=True)
    p95 = serializers.FloatField(allow_null=True)
    p99 = serializers.FloatField(allow_null=True)


class FallbackRatesSerializer(serializers.Serializer[Any]):
    cloud_to_device = serializers.FloatField(allow_null=True)
    device_to_cloud = serializers.FloatField(allow_null=True)


class TokensPerTaskSerializer(serializers.Serializer[Any]):
    """Mean tokens per task on each route; null where the route had no task."""

    device = serializers.FloatField(allow_null=True)
    cloud = serializers.FloatField(allow_null=True)
    draft_refine = serializers.FloatField(allow_null=True)


class ScoreHistogramSerializer(serializers.Serializer[Any]):
    bin_width = serializers.FloatField()
    counts = serializers.ListField(child=serializers.IntegerField(min_value=0))


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


class MetricsWindowSerializer(KeywordNamedSerializer):
    from_ = serializers.DateTimeField()
    to = serializers.DateTimeField()
    resolution = serializers.ChoiceField(choices=["minute", "hour"])


class CohortArmsSerializer(serializers.Serializer[Any]):
    """The version each cohort counts (docs/telemetry.md, "Cohorts"); null: every version."""

    stable = serializers.IntegerField(allow_null=True)
    candidate = serializers.IntegerField(allow_null=True)


class FleetMetricsSerializer(serializers.Serializer[Any]):
    fleet = serializers.SlugField()
    window = MetricsWindowSerializer()
    group_by = serializers.ListField(child=serializers.CharField())
    filters = serializers.DictField(child=serializers.JSONField(), help_text="the filters set")
    cohorts = CohortArmsSerializer(
        required=False, help_text="with a cohort grouping or filter: the version each counts"
    )
    groups = MetricsGroupSerializer(many=True)


class DashboardWindowSerializer(MetricsWindowSerializer):
    bucket_seconds = serializers.IntegerField(min_value=1)
    partial_bucket = serializers.IntegerField(
        min_value=0,
        help_text="index in `buckets` of the bucket still in progress (the last one): its "
        "figures so far are in the series, but it is not a whole bucket; the page leaves it out",
    )
    partial_from = serializers.DateTimeField(help_text="when the bucket in progress began")


class DashboardMarkerSerializer(KeywordNamedSerializer):
    at = serializers.DateTimeField()
    kind = serializers.ChoiceField(choices=["published", "switched", "rollout", "rolled_back"])
    label_ = serializers.CharField()
    summary = serializers.CharField(allow_blank=True)


class DashboardOptionsSerializer(serializers.Serializer[Any]):
    versions = serializers.ListField(child=serializers.IntegerField())
    task_types = serializers.ListField(child=serializers.CharField())


class DashboardConvergenceVersionSerializer(serializers.Serializer[Any]):
    version = serializers.IntegerField()
    role = serializers.ChoiceField(choices=["stable", "candidate", "other"])
    assigned = serializers.IntegerField(min_value=0)
    acked = serializers.IntegerField(min_value=0)
    online = serializers.IntegerField(min_value=0)


class DashboardConvergenceSerializer(serializers.Serializer[Any]):
    devices = serializers.IntegerField(min_value=0)
    online = serializers.IntegerField(min_value=0)
    versions = DashboardConvergenceVersionSerializer(many=True)
    segment = serializers.CharField(
        allow_null=True,
        help_text="The segment filter's name: the figures count only the live devices its rule "
        "matches now (their attributes as the registry holds them); null: the whole fleet.",
    )


class DashboardViewSerializer(serializers.Serializer[Any]):
    window = serializers.CharField()
    version = serializers.IntegerField(allow_null=True)
    cohort = serializers.CharField(allow_null=True)
    task_type = serializers.CharField(allow_null=True)
    route = serializers.CharField(allow_null=True)
    segment = serializers.CharField(allow_null=True)


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


class DashboardCloudPriceSerializer(serializers.Serializer[Any]):
    per_1k_tokens = serializers.FloatField()
    per_call = serializers.FloatField()


class DashboardCostSerializer(CostReportSerializer):
    """The cloud cost of the view, priced by the fleet's cloud price (docs/lab.md, Cost).

    `stable` is the view had the candidate's tasks cost what the stable cohort's cost per task;
    null without a rollout whose two cohorts both have tasks in the view."""

    price = DashboardCloudPriceSerializer()
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
