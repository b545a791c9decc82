"""OpenAPI shapes of the backtest API (drf-spectacular); the service checks the input itself."""

from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlplane.openapi import closed_body
from telemetry.models import Cohort

from .models import BacktestStatus
from .services import DEFAULT_HOURS, MAX_CELL_NAME, MAX_FILTER_CELLS, MAX_FILTER_VERSIONS


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string", "enum": ["draft"]},
            {"type": "integer", "minimum": 1, "maximum": 2**31 - 1},
        ],
        "default": "draft",
        "description": '"draft" (the default) or a published version number',
    }
)
class SubjectField(serializers.JSONField):
    """`"draft"` or a version number."""


class BacktestStartSerializer(serializers.Serializer[Any]):
    version = SubjectField(required=False)
    revision = serializers.IntegerField(
        min_value=1,
        required=False,
        help_text="the subject's revision you looked at; 409 if it is not the subject's (the "
        "draft has moved on, or the version was published at another)",
    )
    hours = serializers.IntegerField(
        min_value=1,
        max_value=int(settings.TELEMETRY_RETENTION_DAYS) * 24,
        default=DEFAULT_HOURS,
        help_text="the window's length (at most the raw events' retention)",
    )
    end = serializers.DateTimeField(
        required=False,
        help_text="the window's end (RFC 3339 with a zone); default now; 409 when in the "
        "future or older than the raw events are kept",
    )
    versions = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=2**31 - 1),
        min_length=1,
        max_length=MAX_FILTER_VERSIONS,
        required=False,
        help_text="only events of these policy versions",
    )
    cohort = serializers.ChoiceField(choices=Cohort.values, required=False)
    cells = serializers.ListField(
        child=serializers.CharField(max_length=MAX_CELL_NAME),
        min_length=1,
        max_length=MAX_FILTER_CELLS,
        required=False,
        help_text="only these cells, as task_type/latency_budget/privacy_tier",
    )

    class Meta:
        ref_name = "BacktestStart"


BacktestStartSerializer = closed_body(BacktestStartSerializer)  # type: ignore[misc]


class BacktestSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    fleet = serializers.CharField()
    subject = serializers.ChoiceField(choices=["draft", "version"])
    version = serializers.IntegerField(allow_null=True)
    revision = serializers.IntegerField()
    # (a DRF Field has a `label` attribute; the metaclass takes this one as a field)
    label = serializers.CharField(help_text="v4 or draft r7")  # type: ignore[assignment]
    stable_version = serializers.IntegerField()
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    filters = serializers.DictField(child=serializers.JSONField())
    status = serializers.ChoiceField(choices=BacktestStatus.values)
    progress = serializers.FloatField(help_text="0 to 1")
    events_total = serializers.IntegerField()
    events_done = serializers.IntegerField()
    error = serializers.CharField(allow_blank=True)
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    url = serializers.CharField()
    result = serializers.DictField(
        allow_null=True,
        help_text="once done: overall, cells, cost, self_check, privacy, headline (docs/lab.md)",
    )

    class Meta:
        ref_name = "Backtest"
