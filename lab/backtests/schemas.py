"""The backtest API's bodies: the input serializer that checks a start (the API's, the page's
and the command's), and the backtest's shape."""

from datetime import UTC, datetime
from typing import Any, Final

from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlplane.api import JsonChoiceField, JsonStringField
from controlplane.openapi import ApiSerializer, closed_body
from telemetry.models import Cohort

from ..schemas import (
    ClosedSerializer,
    SubjectField,
    segment_field,
    version_number_field,
    window_hours_field,
)
from .models import BacktestStatus
from .services import MAX_CELL_NAME, MAX_FILTER_CELLS, MAX_FILTER_VERSIONS

MAX_TIMESTAMP: Final = 40


@extend_schema_field(OpenApiTypes.DATETIME)
class AwareDateTimeField(JsonStringField):
    """An RFC 3339 timestamp string with its time zone (`Z`, `+02:00`), read as UTC."""

    default_error_messages = {
        "invalid": "Must be an RFC 3339 timestamp.",
        "naive": "Must carry a time zone (e.g. Z).",
    }

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(max_length=MAX_TIMESTAMP, **kwargs)

    def run_validation(self, data: Any = serializers.empty) -> Any:
        # The string checks (JSON string, length) first, on the text as sent.
        text = super().run_validation(data)
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            self.fail("invalid")
        if moment.tzinfo is None:
            self.fail("naive")
        return moment.astimezone(UTC)


def max_hours() -> int:
    """The longest window: the raw events' retention."""
    return int(settings.TELEMETRY_RETENTION_DAYS) * 24


def _filter_field(
    child: serializers.Field[Any, Any, Any, Any], max_length: int, help_text: str
) -> serializers.ListField:
    """An event filter of a backtest: omitted, every event; else a non-empty list of at most
    `max_length` values (lab.replay.EventFilters)."""
    return serializers.ListField(
        child=child, min_length=1, max_length=max_length, required=False, help_text=help_text
    )


@closed_body
class BacktestStartSerializer(ClosedSerializer):
    """What to replay (the draft or a version) over which window, and which events."""

    version = SubjectField(required=False)
    revision = version_number_field(
        required=False,
        help_text="the subject's revision you looked at; 409 if it is not the subject's (the "
        "draft has moved on, or the version was published at another)",
    )
    hours = window_hours_field(
        max_hours=max_hours(), help_text="the window's length (at most the raw events' retention)"
    )
    end = AwareDateTimeField(
        required=False,
        help_text="the window's end (RFC 3339 with a zone); default now; 409 when in the "
        "future or older than the raw events are kept",
    )
    versions = _filter_field(
        version_number_field(), MAX_FILTER_VERSIONS, "only events of these policy versions"
    )
    cohort = JsonChoiceField(choices=Cohort.values, required=False)
    cells = _filter_field(
        JsonStringField(max_length=MAX_CELL_NAME),
        MAX_FILTER_CELLS,
        "only these cells, as task_type/latency_budget/privacy_tier",
    )
    segment = segment_field(
        "only events of the devices in this segment of the fleet (their attributes "
        "now), every version replayed as a device of the segment runs it (its overrides); "
        "400 naming `segment` when the fleet has no such segment"
    )

    class Meta:
        ref_name = "BacktestStart"


class BacktestSerializer(ApiSerializer):
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
    filters = serializers.DictField(
        child=serializers.JSONField(),
        help_text="versions, cohort, cells as asked; segment: its name, its rule as read, the "
        "cells the subject's override for it changes (overridden) and how many of its devices "
        "run another table (devices_other_table)",
    )
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
