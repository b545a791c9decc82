"""Serializers of the scheduled-changes API (input validated here, answers for the schema)."""

from typing import Any
from zoneinfo import available_timezones

from drf_spectacular.utils import PolymorphicProxySerializer
from rest_framework import serializers

from controlplane.api import JsonBooleanField, JsonChoiceField, JsonFloatField, JsonIntegerField
from controlplane.openapi import ApiSerializer, closed_body

from ..reviews.schemas import MAX_REVISION, InputSerializer, note_field
from ..rollouts.models import MAX_CLOUD_PRESSURE_TTL_S, Rollout
from ..rollouts.schemas import holdback_field
from ..validation import MAX_VERSION
from .models import ScheduledChange

Kind = ScheduledChange.Kind
TIME_ZONES = sorted({"UTC", *available_timezones()})


class JsonDateTimeField(serializers.DateTimeField):
    """An ISO 8601 date and time string with its offset (`2026-12-01T14:00:00+01:00`)."""

    def to_internal_value(self, value: Any) -> Any:
        if not isinstance(value, str) or len(value) > 40:
            self.fail("invalid", format="YYYY-MM-DDThh:mm[:ss][+HH:MM|Z]")
        return super().to_internal_value(value)


def time_zone_field(**kwargs: Any) -> JsonChoiceField:
    """An IANA time zone name, for showing the time (the schema lists them)."""
    kwargs.setdefault("required", False)
    if not kwargs["required"]:
        kwargs.setdefault("default", "UTC")
    return JsonChoiceField(
        choices=TIME_ZONES, help_text="IANA name, for showing the time", **kwargs
    )


class _ScheduleBase(ApiSerializer):
    run_at = JsonDateTimeField(help_text="when, with its offset; stored in UTC")
    time_zone = time_zone_field()


@closed_body
class PublishScheduleSerializer(_ScheduleBase):
    component_name = "PublishScheduleInput"

    kind = JsonChoiceField(choices=[Kind.PUBLISH.value])
    note = note_field(help_text="the release note")
    revision = JsonIntegerField(
        min_value=1, max_value=MAX_REVISION, required=False, help_text="default: the draft's now"
    )


@closed_body
class VersionScheduleSerializer(_ScheduleBase):
    component_name = "VersionScheduleInput"

    kind = JsonChoiceField(choices=[Kind.SWITCH.value])
    version = JsonIntegerField(min_value=1, max_value=MAX_VERSION)


@closed_body
class RolloutStartScheduleSerializer(VersionScheduleSerializer):
    component_name = "RolloutStartScheduleInput"

    kind = JsonChoiceField(choices=[Kind.ROLLOUT_START.value])
    holdback = holdback_field()


@closed_body
class AdvanceScheduleSerializer(_ScheduleBase):
    component_name = "AdvanceScheduleInput"

    kind = JsonChoiceField(choices=[Kind.ROLLOUT_ADVANCE.value])
    to_stage = JsonChoiceField(choices=list(Rollout.STAGES[1:]))
    require_healthy_guards = JsonBooleanField(required=False, default=False)


@closed_body
class CloudPressureScheduleSerializer(_ScheduleBase):
    component_name = "CloudPressureScheduleInput"

    kind = JsonChoiceField(choices=[Kind.CLOUD_PRESSURE.value])
    theta_offset = JsonFloatField(min_value=-1.0, max_value=1.0)
    ttl_s = JsonIntegerField(min_value=1, max_value=MAX_CLOUD_PRESSURE_TTL_S)


SCHEDULE_INPUTS: dict[str, InputSerializer] = {
    Kind.PUBLISH.value: PublishScheduleSerializer,
    Kind.ROLLOUT_START.value: RolloutStartScheduleSerializer,
    Kind.SWITCH.value: VersionScheduleSerializer,
    Kind.ROLLOUT_ADVANCE.value: AdvanceScheduleSerializer,
    Kind.CLOUD_PRESSURE.value: CloudPressureScheduleSerializer,
}
ScheduleInputSerializer = PolymorphicProxySerializer(
    component_name="ScheduleInput",
    serializers=dict(SCHEDULE_INPUTS),
    resource_type_field_name="kind",
)
# Every kind's input has these; the rest are the kind's own parameters.
SCHEDULE_FIELDS = ("kind", "run_at", "time_zone")


def schedule_arguments(data: dict[str, Any]) -> dict[str, Any]:
    """A validated schedule input as `services.scheduled_change_create`'s keywords: the kind's
    own fields (version, note, …) are its `params`."""
    params = {name: value for name, value in data.items() if name not in SCHEDULE_FIELDS}
    return {**{name: data[name] for name in SCHEDULE_FIELDS}, "params": params}


@closed_body
class ScheduleUpdateSerializer(ApiSerializer):
    component_name = "ScheduleUpdateInput"

    run_at = JsonDateTimeField(help_text="the new time, with its offset")
    time_zone = time_zone_field(required=False, default=None)


class PlanStepSerializer(ApiSerializer):
    component_name = "StagePlanStep"

    to_stage = JsonChoiceField(choices=list(Rollout.STAGES[1:]))
    run_at = JsonDateTimeField()
    require_healthy_guards = JsonBooleanField(required=False, default=False)


@closed_body
class StagePlanInputSerializer(ApiSerializer):
    version = JsonIntegerField(min_value=1, max_value=MAX_VERSION)
    time_zone = time_zone_field()
    start_at = JsonDateTimeField(help_text="when it starts at 5%")
    steps = serializers.ListField(
        child=PlanStepSerializer(), max_length=2, help_text="later stages (25, 100), in time order"
    )
    holdback = holdback_field()


class ScheduledChangeSerializer(ApiSerializer):
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


class ScheduledChangesSerializer(ApiSerializer):
    upcoming = ScheduledChangeSerializer(many=True)
    past = ScheduledChangeSerializer(many=True)
