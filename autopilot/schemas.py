"""The autopilot API's bodies: the objective's input serializer (the API's and the page
form's, one declaration per input) and the answers' shapes."""

from __future__ import annotations

from typing import Any, Final
from zoneinfo import available_timezones

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlplane.api import (
    JsonBooleanField,
    JsonFloatField,
    JsonIntegerField,
    JsonRegexField,
)
from controlplane.openapi import closed_body
from lab.schemas import ClosedSerializer
from routing_policies.models import Rollout
from routing_policies.validation import DIMENSION_VALUE_PATTERN, MAX_CELLS
from telemetry.rollups.segments import SEGMENT_NAME_PATTERN

# `task/budget/tier`, each part as a cell's dimension value.
CELL_LABEL_PATTERN: Final = (
    rf"\A{DIMENSION_VALUE_PATTERN}/{DIMENSION_VALUE_PATTERN}/{DIMENSION_VALUE_PATTERN}\Z"
)
CLOCK_PATTERN: Final = r"\A([01][0-9]|2[0-3]):[0-5][0-9]\Z"
MAX_QUIET_PERIODS: Final = 12
MAX_COST_PER_DAY: Final = 1e9
TIME_ZONES: Final = frozenset(available_timezones())


class CellLabelListField(serializers.ListField):
    """Cells by label; a cell named twice is refused, naming the second."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(
            child=JsonRegexField(CELL_LABEL_PATTERN, max_length=100),
            max_length=MAX_CELLS,
            **kwargs,
        )

    def to_internal_value(self, data: Any) -> list[str]:
        labels = super().to_internal_value(data)
        seen: set[str] = set()
        for index, label in enumerate(labels):
            if label in seen:
                twice = [f"names {label} a second time"]
                # Keyed by the index, as DRF's own list errors are: the detail says `cells[1]`.
                raise serializers.ValidationError({index: twice})  # type: ignore[dict-item]
            seen.add(label)
        return labels


@closed_body
class QuietPeriodSerializer(ClosedSerializer):
    """A daily window (local time) in which no cycle starts; it may cross midnight."""

    class Meta:
        ref_name = "AutopilotQuietPeriod"

    # `from` is a keyword: declared through the fields mapping below.
    to = JsonRegexField(CLOCK_PATTERN, help_text="HH:MM, local")

    def get_fields(self) -> dict[str, Any]:
        fields = super().get_fields()
        fields["from"] = JsonRegexField(CLOCK_PATTERN, help_text="HH:MM, local")
        return fields

    @staticmethod
    def form_value(text: str) -> dict[str, str]:
        """A page's line `HH:MM–HH:MM` (or with `-`) as the period the API takes; a part that
        is not a clock is refused by its field, naming `from` or `to`."""
        start, _, end = text.strip().replace("–", "-").partition("-")
        return {"from": start.strip(), "to": end.strip()}

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["from"] == attrs["to"]:
            raise serializers.ValidationError({"to": ["must differ from `from`"]})
        return attrs


@extend_schema_field({"type": "string", "enum": sorted(TIME_ZONES)})
class TimeZoneField(JsonRegexField):
    """An IANA time zone name (`Europe/Berlin`): the schema lists them, as the check does."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(r"\A[A-Za-z0-9_+\-/]{1,64}\Z", max_length=64, **kwargs)

    def to_internal_value(self, data: Any) -> str:
        value = super().to_internal_value(data)
        if value not in TIME_ZONES:
            raise serializers.ValidationError("not an IANA time zone")
        return value


@closed_body
class ObjectiveInputSerializer(ClosedSerializer):
    """The objective: every field optional, a missing one kept (`enabled` turns it on or off;
    turning it on is refused with 409 when a cell in scope has too little quality data)."""

    class Meta:
        ref_name = "AutopilotObjectiveInput"

    enabled = JsonBooleanField(required=False)
    quality_floor = JsonFloatField(min_value=0.0, max_value=1.0, required=False)
    delta = JsonFloatField(min_value=0.001, max_value=0.5, required=False)
    quality_resolution = JsonFloatField(min_value=0.005, max_value=0.5, required=False)
    p95_within_budget = JsonBooleanField(required=False)
    cost_ceiling_per_day = JsonFloatField(
        min_value=0.0, max_value=MAX_COST_PER_DAY, required=False, allow_null=True
    )
    max_step = JsonFloatField(min_value=0.001, max_value=1.0, required=False)
    margin = JsonFloatField(min_value=0.0, max_value=1.0, required=False)
    cells = CellLabelListField(required=False)
    segment = JsonRegexField(
        SEGMENT_NAME_PATTERN,
        max_length=64,
        required=False,
        allow_null=True,
        allow_blank=True,
        help_text="one of the fleet's segments: its cells as its devices run them, moved in the "
        "draft's override for it and rolled out to it alone; null or blank: the whole fleet",
    )
    excluded_cells = CellLabelListField(required=False)
    run_at = JsonRegexField(CLOCK_PATTERN, required=False, help_text="HH:MM, local")
    time_zone = TimeZoneField(required=False)
    quiet_periods = serializers.ListField(
        child=QuietPeriodSerializer(), max_length=MAX_QUIET_PERIODS, required=False
    )
    window_hours = JsonIntegerField(min_value=1, max_value=168, required=False)
    holdback = JsonIntegerField(min_value=1, max_value=Rollout.MAX_HOLDBACK, required=False)
    bake_minutes = JsonIntegerField(min_value=1, max_value=1440, required=False)
    measure_minutes = JsonIntegerField(min_value=0, max_value=7 * 1440, required=False)
    share_tolerance = JsonFloatField(min_value=0.001, max_value=1.0, required=False)


class AutopilotSerializer(serializers.Serializer[Any]):
    """The objective, its state and why, the next run, and the latest cycles."""

    class Meta:
        ref_name = "Autopilot"

    fleet = serializers.CharField()
    state = serializers.CharField()
    state_reason = serializers.CharField()
    bound_confidence = serializers.FloatField(help_text="1 − δ, in percent")
    next_run_at = serializers.DateTimeField(allow_null=True)
    objective = serializers.DictField()
    cycles = serializers.ListField(child=serializers.DictField())


class CycleSerializer(serializers.Serializer[Any]):
    """One cycle: its state and why, window, versions, request, rollout, and per cell θ before
    and after with the figures now, predicted and realized (and the misses)."""

    class Meta:
        ref_name = "AutopilotCycle"

    number = serializers.IntegerField()
    segment = serializers.CharField(allow_null=True, help_text="the segment it was scoped to")
    state = serializers.CharField()
    reason = serializers.CharField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    window = serializers.DictField()
    base_version = serializers.IntegerField(allow_null=True)
    draft_revision = serializers.IntegerField(allow_null=True)
    version = serializers.IntegerField(allow_null=True)
    change_request = serializers.IntegerField(allow_null=True)
    rollout = serializers.IntegerField(allow_null=True)
    cells = serializers.ListField(child=serializers.DictField())
