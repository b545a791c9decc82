"""Serializers that describe the rollout API's bodies in the OpenAPI schema (see
`policies/schemas.py` for why the answers have them)."""

from typing import Any

from rest_framework import serializers

from .models import Rollout
from .services import MAX_CLOUD_PRESSURE_TTL_S


class RolloutSerializer(serializers.Serializer[Any]):
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
    state = serializers.ChoiceField(choices=Rollout.State.values)
    open = serializers.BooleanField()
    started_at = serializers.DateTimeField()
    stage_changed_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    reason = serializers.CharField(allow_blank=True)
    next = serializers.CharField(allow_null=True, help_text="resume, advance to N%, complete")
    next_stage = serializers.IntegerField(allow_null=True)

    class Meta:
        ref_name = "Rollout"


class CloudPressureStateSerializer(serializers.Serializer[Any]):
    theta_offset = serializers.FloatField()
    until = serializers.DateTimeField()

    class Meta:
        ref_name = "CloudPressureState"


class ConvergenceVersionSerializer(serializers.Serializer[Any]):
    version = serializers.IntegerField()
    role = serializers.ChoiceField(choices=["stable", "candidate", "other"])
    assigned = serializers.IntegerField(min_value=0)
    acked = serializers.IntegerField(min_value=0)
    acked_online = serializers.IntegerField(min_value=0)

    class Meta:
        ref_name = "ConvergenceVersion"


class PropagationSerializer(serializers.Serializer[Any]):
    p50_ms = serializers.FloatField(allow_null=True)
    p95_ms = serializers.FloatField(allow_null=True)
    count = serializers.IntegerField(min_value=0)

    class Meta:
        ref_name = "Propagation"


class ConvergenceSerializer(serializers.Serializer[Any]):
    devices = serializers.IntegerField(min_value=0)
    online = serializers.IntegerField(min_value=0)
    versions = ConvergenceVersionSerializer(many=True)
    last_change_at = serializers.DateTimeField(allow_null=True)
    propagation = PropagationSerializer()

    class Meta:
        ref_name = "Convergence"


class FreezeSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    frozen = serializers.BooleanField()
    reason = serializers.CharField()
    rollout = serializers.IntegerField(allow_null=True, help_text="the rollout rolled back")
    frozen_at = serializers.DateTimeField()
    released_at = serializers.DateTimeField(allow_null=True)
    released_by = serializers.CharField(allow_null=True)
    release_note = serializers.CharField(allow_blank=True)

    class Meta:
        ref_name = "Freeze"


class RolloutStatusSerializer(serializers.Serializer[Any]):
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

    class Meta:
        ref_name = "RolloutStatus"


class CloudPressureInputSerializer(serializers.Serializer[Any]):
    theta_offset = serializers.FloatField(
        min_value=-1.0, max_value=1.0, help_text="added to every cell's θ while it lasts"
    )
    ttl_s = serializers.IntegerField(min_value=1, max_value=MAX_CLOUD_PRESSURE_TTL_S)

    class Meta:
        ref_name = "CloudPressureInput"
