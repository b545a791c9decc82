"""The alerts and rollout-guards APIs in the OpenAPI schema, and their input serializers.

The input serializers here are the one declaration of each input: the API views validate with
them, the alerts page (`controlplane.pages.form_input`) and the guard options another part
sends (`services.guards.guard_options_validate`) too, and the schema shows them. The services
keep what needs several fields or the database. Limits are `alerts.limits`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from django.core.validators import URLValidator
from rest_framework import serializers

from controlplane.api import (
    JsonBooleanField,
    JsonChoiceField,
    JsonFloatField,
    JsonIntegerField,
    JsonRegexField,
    JsonStringField,
)
from controlplane.openapi import ApiSerializer, closed_body
from controlplane.validators import TidyTextValidator, text_problem

from ..api_schemas import segment_field
from .guard_fields import BakeMinutesField, GuardsField
from .judging import GUARD_METRICS
from .limits import (
    MAX_BAKE_MINUTES,
    MAX_EXPOSURE,
    MAX_EXTENSIONS,
    MAX_FOR_SECONDS,
    MAX_HYSTERESIS,
    MAX_MIN_SAMPLES,
    MAX_RULE_NAME_LENGTH,
    MAX_SCOPE_VALUE_LENGTH,
    MAX_THRESHOLD,
    MAX_WEBHOOK_URL_LENGTH,
    MAX_WINDOW_MINUTES,
    MIN_WINDOW_MINUTES,
)
from .models import (
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


def _declared(ref_name: str, fields: dict[str, Any]) -> type[serializers.Serializer[Any]]:
    """A serializer of `fields`, named `ref_name` in the schema."""
    meta = type("Meta", (), {"ref_name": ref_name})
    return type(f"{ref_name}Serializer", (serializers.Serializer,), {**fields, "Meta": meta})


def _results_of(
    item: type[serializers.Serializer[Any]], *, ref_name: str
) -> type[serializers.Serializer[Any]]:
    """A list answer: `{"results": [item, …]}`."""
    return _declared(ref_name, {"results": item(many=True)})


def _reading(prefix: str) -> type[serializers.Serializer[Any]]:
    """What a judgement read, shown from the row's `<prefix>value`, `<prefix>previous`,
    `<prefix>samples` and `<prefix>message` (a rule's last reading, or an event's): the base of
    its answer. (The class made has no docstring: drf-spectacular would show one as each
    answer's description.)"""

    def read(field_name: str, attribute: str) -> str | None:
        """The field's `source`: none where the attribute has the field's name."""
        attribute = f"{prefix}{attribute}"
        return None if attribute == field_name else attribute

    fields = {
        "value": serializers.FloatField(allow_null=True, source=read("value", "value")),
        "previous_value": serializers.FloatField(
            allow_null=True, source=read("previous_value", "previous")
        ),
        "samples": serializers.IntegerField(allow_null=True, source=read("samples", "samples")),
        "message": serializers.CharField(allow_blank=True, source=read("message", "message")),
    }
    return type(f"Reading{prefix}", (serializers.Serializer,), {**fields, "__doc__": None})


class AlertRuleSerializer(_reading("last_")):  # type: ignore[misc]
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
    segment = serializers.CharField(
        allow_blank=True, help_text="the named segment the rule is judged on; blank: every device"
    )
    enabled = serializers.BooleanField()
    revision = serializers.IntegerField()
    state = serializers.ChoiceField(choices=AlertState.values)
    state_since = serializers.DateTimeField()
    evaluated_at = serializers.DateTimeField(allow_null=True, source="last_evaluated_at")

    class Meta:
        ref_name = "AlertRule"


AlertRuleListSerializer = _results_of(AlertRuleSerializer, ref_name="AlertRuleList")


class _RuleNameValidator(TidyTextValidator):
    """Tidy text, refused and never trimmed: the name shown is the name sent, as for ids."""

    def __call__(self, value: object) -> None:
        problem = text_problem(str(value))
        if problem is not None:
            raise serializers.ValidationError(f"{problem} Nothing is trimmed.")


def _rule_input_fields(*, partial: bool) -> dict[str, Any]:
    required = not partial
    return {
        "name": JsonStringField(
            min_length=1,
            max_length=MAX_RULE_NAME_LENGTH,
            validators=[_RuleNameValidator()],
            required=required,
        ),
        "metric": JsonChoiceField(choices=Metric.values, required=required),
        "condition": JsonChoiceField(
            choices=Condition.values,
            required=required,
            help_text="events (silence) is judged above or below a count, not rises_by/falls_by",
        ),
        "threshold": JsonFloatField(
            min_value=-MAX_THRESHOLD,
            max_value=MAX_THRESHOLD,
            required=required,
            help_text="shares (cloud_share, alpha, fallback_rate, error_rate, cache_hit_rate, "
            "draft_kept_rate, mean_quality) are fractions from 0 to 1, and so is a change's "
            "size (rises_by 0.2: up by 20 points; the condition gives the direction); latency "
            "metrics are ratios to each cell's budget; events is a count",
        ),
        "window_minutes": JsonIntegerField(
            min_value=MIN_WINDOW_MINUTES, max_value=MAX_WINDOW_MINUTES, required=False
        ),
        "min_samples": JsonIntegerField(min_value=0, max_value=MAX_MIN_SAMPLES, required=False),
        "for_seconds": JsonIntegerField(min_value=0, max_value=MAX_FOR_SECONDS, required=False),
        "hysteresis": JsonFloatField(
            min_value=0,
            max_value=MAX_HYSTERESIS,
            required=False,
            help_text="how far back past the threshold the value must come before the rule "
            "clears, in the threshold's unit (a share's is a fraction from 0 to 1)",
        ),
        "scope": JsonChoiceField(choices=Scope.values, required=False),
        "scope_value": JsonStringField(
            max_length=MAX_SCOPE_VALUE_LENGTH,
            allow_blank=True,
            required=False,
            help_text="version: a number; cohort: stable or candidate; "
            "cell: task_type/latency_budget/privacy_tier; fleet: empty",
        ),
        "segment": segment_field(
            JsonRegexField,
            "one of the fleet's named segments: the rule is judged on its devices' events only "
            "(within `scope`); blank or left out: every device",
            allow_blank=True,
        ),
        "enabled": JsonBooleanField(required=False),
    }


AlertRuleCreateSerializer = closed_body(
    _declared("AlertRuleCreate", _rule_input_fields(partial=False))
)
AlertRuleUpdateSerializer = closed_body(
    _declared(
        "AlertRuleUpdate",
        {
            "revision": JsonIntegerField(help_text="the rule's revision from the last read"),
            **_rule_input_fields(partial=True),
        },
    )
)


class AlertEventSerializer(_reading("")):  # type: ignore[misc]
    id = serializers.IntegerField()
    kind = serializers.CharField()
    rule_id = serializers.IntegerField(allow_null=True)
    rule = serializers.CharField(allow_blank=True, source="rule_name")
    rollout_id = serializers.IntegerField(allow_null=True)
    state_before = serializers.CharField(allow_blank=True)
    state_after = serializers.CharField(allow_blank=True)
    at = serializers.DateTimeField()

    class Meta:
        ref_name = "AlertEvent"


AlertEventListSerializer = _results_of(AlertEventSerializer, ref_name="AlertEventList")


class FiringAlertSerializer(ApiSerializer):
    rule_id = serializers.IntegerField()
    fleet = serializers.SlugField()
    name = serializers.CharField()
    message = serializers.CharField(allow_blank=True)
    since = serializers.DateTimeField(allow_null=True)


FiringAlertListSerializer = _results_of(FiringAlertSerializer, ref_name="FiringAlertList")


class AlertWebhookSerializer(ApiSerializer):
    id = serializers.IntegerField()
    url = serializers.URLField()
    format = serializers.ChoiceField(choices=WebhookFormat.values)
    rule_id = serializers.IntegerField(allow_null=True)
    enabled = serializers.BooleanField()


AlertWebhookListSerializer = _results_of(AlertWebhookSerializer, ref_name="AlertWebhookList")


class WebhookUrlField(serializers.URLField):
    """An http(s) URL with a host, sent as a JSON string. Any spelling of the host passes here
    (`http://2130706433/`, which Django's URL pattern refuses, is 127.0.0.1): whether the
    address is public is the service's to say, naming the setting that allows it."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.validators = [v for v in self.validators if not isinstance(v, URLValidator)]

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        parsed = urlparse(data)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            self.fail("invalid")
        return super().to_internal_value(data)


@closed_body
class AlertWebhookCreateSerializer(ApiSerializer):
    url = WebhookUrlField(
        max_length=MAX_WEBHOOK_URL_LENGTH,
        trim_whitespace=False,
        help_text="http(s), a public address unless the deployment allows others",
    )
    format = JsonChoiceField(choices=WebhookFormat.values, required=False)
    rule_id = JsonIntegerField(
        required=False, allow_null=True, help_text="one rule of this fleet; null: every rule"
    )


class WebhookDeliverySerializer(ApiSerializer):
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


WebhookDeliveryListSerializer = _results_of(
    WebhookDeliverySerializer, ref_name="WebhookDeliveryList"
)


class GuardPointSerializer(ApiSerializer):
    at = serializers.DateTimeField()
    stage = serializers.IntegerField()
    estimate = serializers.FloatField(allow_null=True)
    lower = serializers.FloatField(allow_null=True)
    upper = serializers.FloatField(allow_null=True)
    state = serializers.ChoiceField(choices=["collecting", "healthy", "inconclusive", "regressed"])
    scope = serializers.CharField(
        required=False, help_text='"fleet", or the cell the point is about: task/budget/tier'
    )


class SampleRatioSerializer(ApiSerializer):
    observed = serializers.IntegerField()
    total = serializers.IntegerField()
    share = serializers.FloatField()
    expected_share = serializers.FloatField()
    chi_square = serializers.FloatField()
    p_value = serializers.FloatField()


class GuardDecideSerializer(ApiSerializer):
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


def _labelled(name: str, choices: list[str]) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
    """A choice as sent (`metric`) and the label people read for it (`metric_label`)."""
    return {
        name: serializers.ChoiceField(choices=choices),
        f"{name}_label": serializers.CharField(),
    }


def _cohorts_judged() -> type[serializers.Serializer[Any]]:
    """What a guard judged, the base of its answer: its metric and comparison, each with its
    label, and each cohort's value and sample count (`candidate_value`, `stable_samples`; null
    before the first judgement). (No docstring on the class made, as for `_reading`.)"""
    readings = {
        f"{cohort}_{reading}": field(allow_null=True)
        for reading, field in (
            ("value", serializers.FloatField),
            ("samples", serializers.IntegerField),
        )
        for cohort in ("candidate", "stable")
    }
    fields = {
        **_labelled("metric", sorted(GUARD_METRICS)),
        **_labelled("comparison", GuardComparison.values),
        **readings,
    }
    return type("CohortsJudged", (serializers.Serializer,), {**fields, "__doc__": None})


class GuardStateSerializer(_cohorts_judged(), ApiSerializer):  # type: ignore[misc]
    threshold = serializers.FloatField()
    threshold_text = serializers.CharField()
    min_samples = serializers.IntegerField()
    state = serializers.CharField()
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


class GuardSetSerializer(ApiSerializer):
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


class RolloutGuardsSerializer(ApiSerializer):
    rollout = serializers.IntegerField(allow_null=True, help_text="the open (or last) rollout")
    guards = GuardSetSerializer(allow_null=True, help_text="null: the rollout has no guards")


def _bounded(
    maximum: int, help_text: str = "", *, minimum: int = 0, label: str | None = None
) -> JsonIntegerField:
    """An optional whole number of a guard set, from `minimum` to `maximum`."""
    return JsonIntegerField(
        min_value=minimum,
        max_value=maximum,
        required=False,
        help_text=help_text or None,
        label=label,
    )


@closed_body
class RolloutGuardsInputSerializer(ApiSerializer):
    """The guards of an open rollout (PUT), or of the rollout a start opens."""

    guards = GuardsField(required=False, allow_null=True, label="the guards")
    bake_minutes = BakeMinutesField(required=False, allow_null=True, label="the bake time")
    auto_advance = JsonBooleanField(required=False)
    window_minutes = _bounded(
        MAX_WINDOW_MINUTES, minimum=MIN_WINDOW_MINUTES, label="the guard window"
    )
    min_samples = _bounded(MAX_MIN_SAMPLES, label="the minimum events")
    min_devices = _bounded(MAX_EXPOSURE, "candidate devices a stage needs before it may advance")
    min_events = _bounded(MAX_EXPOSURE, "candidate events a stage needs before it may advance")
    stage_limit_minutes = _bounded(
        MAX_BAKE_MINUTES, "0: none; past it a stage that cannot advance is extended, then expires"
    )
    max_extensions = _bounded(MAX_EXTENSIONS)
    on_expiry = JsonChoiceField(choices=RolloutGuardSet.OnExpiry.values, required=False)
