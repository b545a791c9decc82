"""Serializers of the scheduled-changes API (input validated here, answers for the schema)."""

from typing import Any

from rest_framework import serializers

from controlplane.api import JsonChoiceField, JsonIntegerField, JsonStringField

from ..reviews.schemas import JsonBooleanField, note_field
from ..rollouts.models import Rollout
from ..rollouts.services import MAX_CLOUD_PRESSURE_TTL_S
from ..validation import MAX_VERSION
from .models import ScheduledChange


class JsonNumberField(serializers.FloatField):
    """A JSON number (not a string, not a boolean)."""

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("invalid")
        return super().to_internal_value(data)


class JsonDateTimeField(serializers.DateTimeField):
    """An ISO 8601 date and time string with its offset (`2026-12-01T14:00:00+01:00`)."""

    def to_internal_value(self, value: Any) -> Any:
        if not isinstance(value, str) or len(value) > 40:
            self.fail("invalid", format="YYYY-MM-DDThh:mm[:ss][+HH:MM|Z]")
        parsed = super().to_internal_value(value)
        return parsed


def time_zone_field() -> JsonStringField:
    return JsonStringField(
        max_length=64, required=False, default="UTC", help_text="IANA name, for showing the time"
    )


class ScheduleInputSerializer(serializers.Serializer[Any]):
    kind = JsonChoiceField(choices=ScheduledChange.Kind.values)
    run_at = JsonDateTimeField(help_text="when, with its offset; stored in UTC")
    time_zone = time_zone_field()
    version = JsonIntegerField(min_value=1, max_value=MAX_VERSION, required=False)
    revision = JsonIntegerField(min_value=1, max_value=2**31 - 1, required=False)
    note = note_field(required=False, help_text="the release note (publish)")
    to_stage = JsonChoiceField(choices=list(Rollout.STAGES), required=False)
    require_healthy_guards = JsonBooleanField(required=False, default=False)
    theta_offset = JsonNumberField(min_value=-1.0, max_value=1.0, required=False)
    ttl_s = JsonIntegerField(min_value=1, max_value=MAX_CLOUD_PRESSURE_TTL_S, required=False)

    class Meta:
        ref_name = "ScheduleInput"


class ScheduleUpdateSerializer(serializers.Serializer[Any]):
    run_at = JsonDateTimeField(help_text="the new time, with its offset")
    time_zone = JsonStringField(max_length=64, required=False)

    class Meta:
        ref_name = "ScheduleUpdateInput"


class PlanStepSerializer(serializers.Serializer[Any]):
    to_stage = JsonChoiceField(choices=list(Rollout.STAGES))
    run_at = JsonDateTimeField()
    require_healthy_guards = JsonBooleanField(required=False, default=False)

    class Meta:
        ref_name = "StagePlanStep"


class StagePlanInputSerializer(serializers.Serializer[Any]):
    version = JsonIntegerField(min_value=1, max_value=MAX_VERSION)
    time_zone = time_zone_field()
    steps = PlanStepSerializer(many=True, help_text="5% first, then later stages, in time order")

    class Meta:
        ref_name = "StagePlanInput"


class ScheduledChangeSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    fleet = serializers.SlugField()
    kind = serializers.ChoiceField(choices=ScheduledChange.Kind.values)
    what = serializers.CharField()
    run_at = serializers.DateTimeField()
    run_at_local = serializers.CharField()
    time_zone = serializers.CharField()
    params = serializers.DictField()
    plan = serializers.CharField(allow_null=True)
    state = serializers.ChoiceField(choices=ScheduledChange.State.values)
    outcome = serializers.CharField(allow_blank=True, help_text="what it did, or why it did not")
    created_by = serializers.CharField()
    created_at = serializers.DateTimeField()
    ran_at = serializers.DateTimeField(allow_null=True)

    class Meta:
        ref_name = "ScheduledChange"


class ScheduledChangesSerializer(serializers.Serializer[Any]):
    upcoming = ScheduledChangeSerializer(many=True)
    past = ScheduledChangeSerializer(many=True)

    class Meta:
        ref_name = "ScheduledChanges"
