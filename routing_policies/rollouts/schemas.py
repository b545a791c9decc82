"""The rollout API's bodies: the input serializers, each the one declaration of its use case's
input (the API validates with it, the OpenAPI schema shows it, the rollout page's forms go
through it with `controlplane.pages.form_input`, `manage.py rollout` checks its options with
it; the services take what it validated), and the serializers that describe the answers (see
`policies/schemas.py` for why)."""

from rest_framework import serializers

from controlplane.api import (
    JsonBooleanField,
    JsonChoiceField,
    JsonFloatField,
    JsonIntegerField,
    JsonRegexField,
    TidyJsonStringField,
)
from controlplane.openapi import ApiSerializer

from ..segments.models import MAX_SEGMENT_NAME
from ..segments.schemas import SEGMENT_NAME_RE
from ..validation import MAX_VERSION
from .models import MAX_CLOUD_PRESSURE_TTL_S, Rollout
from .selectors import NOT_ACKED_LIMIT


class RolloutSerializer(ApiSerializer):
    id = serializers.IntegerField()
    candidate = serializers.IntegerField()
    stable = serializers.IntegerField()
    stage = serializers.ChoiceField(choices=list(Rollout.STAGES))
    holdback = serializers.IntegerField(
        help_text="percent of the fleet kept on stable at 100% until completion; 0: none"
    )
    candidate_share = serializers.IntegerField(
        help_text="percent of buckets on the candidate: the stage, less the holdback at 100%"
    )
    segment = serializers.CharField(
        allow_null=True,
        help_text="the segment the rollout is scoped to (null: the whole fleet); the stage "
        "and shares are then of the segment's devices",
    )
    segment_rule = serializers.JSONField(
        allow_null=True, help_text="the segment's rule as it was at the start (a snapshot)"
    )
    state = serializers.ChoiceField(choices=Rollout.State.values)
    open = serializers.BooleanField()
    started_at = serializers.DateTimeField()
    stage_changed_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    reason = serializers.CharField(allow_blank=True)
    next = serializers.CharField(allow_null=True, help_text="resume, advance to N%, complete")
    next_stage = serializers.IntegerField(allow_null=True)


class CloudPressureStateSerializer(ApiSerializer):
    theta_offset = serializers.FloatField()
    until = serializers.DateTimeField()


class ConvergenceVersionSerializer(ApiSerializer):
    version = serializers.IntegerField()
    role = serializers.ChoiceField(choices=["stable", "candidate", "other"])
    assigned = serializers.IntegerField(min_value=0)
    acked = serializers.IntegerField(min_value=0)
    acked_online = serializers.IntegerField(min_value=0)


class PropagationSerializer(ApiSerializer):
    p50_ms = serializers.FloatField(allow_null=True)
    p95_ms = serializers.FloatField(allow_null=True)
    p99_ms = serializers.FloatField(allow_null=True)
    last_ms = serializers.FloatField(
        allow_null=True, help_text="the last device's time from the change to its ack"
    )
    count = serializers.IntegerField(min_value=0)


class NotAckedDeviceSerializer(ApiSerializer):
    device_id = serializers.CharField()
    assigned_version = serializers.IntegerField()
    acked_version = serializers.IntegerField(
        allow_null=True, help_text="the version it last acked; null: none yet"
    )
    online = serializers.BooleanField()


class NotAckedSerializer(ApiSerializer):
    count = serializers.IntegerField(
        min_value=0, help_text="live devices that have not acked the version they are assigned"
    )
    devices = NotAckedDeviceSerializer(
        many=True, help_text=f"the first {NOT_ACKED_LIMIT} of them by device id"
    )


class ConvergenceSerializer(ApiSerializer):
    devices = serializers.IntegerField(min_value=0)
    online = serializers.IntegerField(min_value=0)
    versions = ConvergenceVersionSerializer(many=True)
    last_change_at = serializers.DateTimeField(allow_null=True)
    propagation = PropagationSerializer()
    not_acked = NotAckedSerializer(
        help_text="who has not acked: the devices not (yet) running their assigned version"
    )


class FreezeSerializer(ApiSerializer):
    id = serializers.IntegerField()
    frozen = serializers.BooleanField()
    reason = serializers.CharField()
    rollout = serializers.IntegerField(allow_null=True, help_text="the rollout rolled back")
    frozen_at = serializers.DateTimeField()
    released_at = serializers.DateTimeField(allow_null=True)
    released_by = serializers.CharField(allow_null=True)
    release_note = serializers.CharField(allow_blank=True)


class RolloutStatusSerializer(ApiSerializer):
    fleet = serializers.SlugField()
    stable_version = serializers.IntegerField(allow_null=True)
    rollout = RolloutSerializer(allow_null=True, help_text="the open rollout, else the last one")
    cloud_pressure = CloudPressureStateSerializer(allow_null=True)
    convergence = ConvergenceSerializer()
    freeze = FreezeSerializer(
        allow_null=True, help_text="rollouts frozen after an automatic rollback, until released"
    )
    guards = serializers.JSONField(
        allow_null=True,
        help_text="the rollout's guards as GET …/rollout/guards answers them (GuardSet: each "
        "guard's state, interval and series, the verdict and why), null without guards",
    )


# --- input ----------------------------------------------------------------------------------


class RolloutVersionInputSerializer(ApiSerializer):
    """A published version: the whole fleet switches to it (or a rollout starts it)."""

    version = JsonIntegerField(
        min_value=1, max_value=MAX_VERSION, label="the version", help_text="published"
    )


def holdback_field() -> JsonIntegerField:
    """The holdback of a rollout's start, now or scheduled (absent: 0)."""
    return JsonIntegerField(
        min_value=0,
        max_value=Rollout.MAX_HOLDBACK,
        required=False,
        help_text="percent of the fleet kept on the stable version at 100% until the rollout "
        "completes, so the guards keep a comparison group; default 0",
    )


class RolloutStartBaseSerializer(RolloutVersionInputSerializer):
    """The version to roll out at 5%, and its holdback (the guard fields, when a guard
    extension is installed, are added by `rollouts.apis`)."""

    holdback = holdback_field()
    segment = JsonRegexField(
        SEGMENT_NAME_RE,
        max_length=MAX_SEGMENT_NAME,
        required=False,
        allow_null=True,
        error_messages={
            "invalid": f"a segment's name: 1 to {MAX_SEGMENT_NAME} lower-case letters, digits, "
            "_ and -"
        },
        help_text="scope the rollout to this segment of the fleet (docs/segments.md, "
        "rollouts): only the devices its rule matches take part, the rest stay on stable; "
        "absent or null: the whole fleet",
    )


class RolloutCompleteInputSerializer(ApiSerializer):
    """The confirmation a scoped rollout's completion needs."""

    fleet_wide = JsonBooleanField(
        required=False,
        default=False,
        help_text="a rollout scoped to a segment completes only with true: its candidate "
        "becomes the stable version of the whole fleet, moving the devices outside the "
        "segment at once",
    )


class RolloutAdvanceInputSerializer(ApiSerializer):
    """The stage to advance to (default: the next one)."""

    to_stage = JsonChoiceField(
        choices=list(Rollout.STAGES),
        required=False,
        label="the stage to advance to",
        help_text="default: the next stage",
    )


class RolloutRollbackInputSerializer(ApiSerializer):
    """Why the rollout is rolled back (kept with it and in the audit log)."""

    reason = TidyJsonStringField(
        max_length=500, required=False, allow_blank=True, default="", label="the reason"
    )


class EmptyInputSerializer(ApiSerializer):
    """An empty JSON object (or no body at all)."""


class CloudPressureInputSerializer(ApiSerializer):
    """A fleet-wide θ nudge and how long it lasts."""

    theta_offset = JsonFloatField(
        min_value=-1.0,
        max_value=1.0,
        label="the θ offset",
        help_text="added to every cell's θ while it lasts",
    )
    ttl_s = JsonIntegerField(
        min_value=1, max_value=MAX_CLOUD_PRESSURE_TTL_S, label="the duration in seconds"
    )
