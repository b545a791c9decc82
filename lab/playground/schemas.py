"""The explain API's bodies: the input serializers that check them, and the answer's shape.

Every input field is JSON-typed (a number is a JSON number, never `"5"` or `true`), bounded by
the same physical ranges as a telemetry event (telemetry.ingest.events), and every object
refuses fields it does not know, so a typo such as `rtt` is a 400 naming it, never ignored.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from controlplane.api import JsonBooleanField, JsonChoiceField, JsonFloatField, JsonIntegerField
from controlplane.openapi import closed_body
from edge_sdk.decision import SCORE_TERM_NAMES
from routing_policies.cell_schema import MODES
from telemetry.ingest.events import MAX_BANDWIDTH_KBPS, MAX_RTT_MS, MAX_TOKENS, MAX_UPLOAD_BYTES

from ..schemas import CellKeyOut, ClosedSerializer, LabCellSerializer, LabVersionRefField
from .explain import SEED_DEVICE_MS

MAX_CLOUD_INFER_MS = 600_000.0  # ten minutes: as long as a cell's latency budget may be
MAX_DEVICE_MS = 600_000.0
SAMPLE_SOURCES = ("none", "seed", "recorded")
ROUTES = ("device", "cloud", "draft_refine")
DECIDED_BY = ("policy", "privacy", "offline", "threshold", "latency")


@closed_body
class LabOverrideSerializer(ClosedSerializer):
    """What to change in the cell before deciding: its mode, its θ (either or both)."""

    mode = JsonChoiceField(choices=list(MODES), required=False)
    threshold = JsonFloatField(min_value=0.0, max_value=1.0, required=False)

    class Meta:
        ref_name = "LabOverride"


@closed_body
class LabTaskSerializer(ClosedSerializer):
    """The task's signals (PROTOCOL.md step 4 and 7)."""

    tokens = JsonIntegerField(min_value=0, max_value=MAX_TOKENS)
    intent_conf = JsonFloatField(min_value=0.0, max_value=1.0)
    lm_conf = JsonFloatField(min_value=0.0, max_value=1.0)
    upload_bytes = JsonIntegerField(min_value=0, max_value=MAX_UPLOAD_BYTES, required=False)

    class Meta:
        ref_name = "LabTask"


@closed_body
class LabDeviceSerializer(ClosedSerializer):
    """The device's state, the pushed cloud-pressure offset and a cloud inference estimate."""

    rtt_ms = JsonFloatField(min_value=0.0, max_value=MAX_RTT_MS)
    bandwidth_kbps = JsonFloatField(min_value=0.0, max_value=MAX_BANDWIDTH_KBPS)
    device_load = JsonFloatField(min_value=0.0, max_value=1.0)
    online = JsonBooleanField()
    cloud_pressure = JsonFloatField(min_value=-1.0, max_value=1.0, required=False)
    cloud_infer_ms = JsonFloatField(min_value=0.0, max_value=MAX_CLOUD_INFER_MS)

    class Meta:
        ref_name = "LabDevice"


@closed_body
class ExplainInputSerializer(ClosedSerializer):
    """One task through one cell of a version (or the draft), and optionally every cell."""

    version = LabVersionRefField(required=False)
    cell = LabCellSerializer()
    override = LabOverrideSerializer(required=False)
    task = LabTaskSerializer()
    device = LabDeviceSerializer()
    matrix = JsonBooleanField(required=False, help_text="also decide the task in every cell")
    samples = JsonChoiceField(
        choices=list(SAMPLE_SOURCES),
        required=False,
        help_text="also decide a stream of sample tasks in the cell: the seed's five, or the "
        "cell's recorded tasks of the last 24 h",
    )
    device_ms = JsonFloatField(
        min_value=0.0,
        max_value=MAX_DEVICE_MS,
        required=False,
        help_text="on-device latency of a sample task (default: for recorded tasks the "
        f"observed device P50 of the last 24 h, else {SEED_DEVICE_MS:g} ms, the seed's)",
    )

    class Meta:
        ref_name = "LabExplainInput"


# --- the answer ------------------------------------------------------------------------------


# An object of the answer, named in the schema by its class less `Out` (`LabDecisionOut`:
# `LabDecision`) unless it says otherwise. (A comment: a docstring here would become the
# description of every answer object in the schema.)
class _Out(serializers.Serializer[Any]):
    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "Meta" not in cls.__dict__:
            meta = type("Meta", (), {"ref_name": cls.__name__.removesuffix("Out")})
            setattr(cls, "Meta", meta)  # noqa: B010  # (a class DRF reads, not a typed attribute)


class LabDecisionOut(_Out):
    route = serializers.ChoiceField(choices=list(ROUTES))
    decided_by = serializers.ChoiceField(choices=list(DECIDED_BY))
    step = serializers.IntegerField(help_text="the step of PROTOCOL.md that decided (1-3, 6-8)")
    step_text = serializers.CharField()
    explain = serializers.CharField()
    queue_until_online = serializers.BooleanField()


class LabScoreTermOut(_Out):
    name = serializers.ChoiceField(choices=list(SCORE_TERM_NAMES))
    weight = serializers.FloatField()
    signal = serializers.FloatField(help_text="the signal's share in [0, 1] before weighting")
    term = serializers.FloatField(help_text="weight × signal")


class LabScoreOut(_Out):
    reached = serializers.BooleanField(help_text="false: a step before 4 decided")
    value = serializers.FloatField()
    terms = LabScoreTermOut(many=True)


class LabAdjustmentOut(_Out):
    name = serializers.ChoiceField(choices=["network", "load", "cloud_pressure", "clamp"])
    delta = serializers.FloatField()
    text = serializers.CharField()


class LabThresholdOut(_Out):
    reached = serializers.BooleanField()
    base = serializers.FloatField()
    adjustments = LabAdjustmentOut(many=True)
    effective = serializers.FloatField()
    score_below = serializers.BooleanField()


class LabLatencyOut(_Out):
    reached = serializers.BooleanField()
    predicted_cloud_ms = serializers.FloatField(allow_null=True, help_text="null: no bandwidth")
    upload_ms = serializers.FloatField(allow_null=True)
    rtt_ms = serializers.FloatField()
    cloud_infer_ms = serializers.FloatField()
    budget_ms = serializers.IntegerField()
    within_budget = serializers.BooleanField()


class LabPrivacyOut(_Out):
    tier = serializers.CharField()
    upload_allowed = serializers.BooleanField()
    deidentify = serializers.BooleanField()
    keeps_data_on_device = serializers.BooleanField()
    data_leaves_device = serializers.BooleanField()
    violation = serializers.BooleanField()


class LabCostOut(_Out):
    cloud_calls = serializers.IntegerField()
    amount = serializers.FloatField()
    currency = serializers.CharField()


class _CellOut(CellKeyOut, _Out):
    """A cell's key and its mode."""

    mode = serializers.ChoiceField(choices=list(MODES))


class _DecidedOut(_Out):
    """How a task was decided: the route, the step's reason, the score against θ."""

    route = serializers.ChoiceField(choices=list(ROUTES))
    decided_by = serializers.ChoiceField(choices=list(DECIDED_BY))
    score = serializers.FloatField(allow_null=True)
    threshold = serializers.FloatField(allow_null=True)


class LabCellOut(_CellOut):
    """The cell decided in: its θ, and whether the override changed it."""

    threshold = serializers.FloatField()
    overridden = serializers.BooleanField()

    class Meta:
        ref_name = "LabCellOut"


class LabMatrixCellOut(_CellOut, _DecidedOut):
    """The task decided in one cell of the table."""

    step = serializers.IntegerField()
    queue_until_online = serializers.BooleanField()


class LabSampleOut(_DecidedOut):
    """One sample task of the stream, decided in the cell."""

    # `source` is also a DRF Field attribute; as a declared field it is a plain output key.
    source = serializers.ChoiceField(choices=["seed", "recorded"])  # type: ignore[assignment]
    tokens = serializers.IntegerField()
    intent_conf = serializers.FloatField()
    lm_conf = serializers.FloatField()
    latency_ms = serializers.FloatField(allow_null=True)


class LabSamplesDeviceMsOut(_Out):
    value = serializers.FloatField(help_text="the latency of a device answer in the stream, ms")
    source = serializers.CharField(help_text="where it came from, in words")  # type: ignore[assignment]  # a declared field


class ExplainOutSerializer(_Out):
    """The decision and its trace."""

    version = serializers.IntegerField(allow_null=True, help_text="null: the draft")
    version_label = serializers.CharField()
    cell = LabCellOut()
    decision = LabDecisionOut()
    score = LabScoreOut()
    threshold = LabThresholdOut()
    latency = LabLatencyOut()
    privacy = LabPrivacyOut()
    cost = LabCostOut()
    matrix = LabMatrixCellOut(many=True, required=False)
    samples = LabSampleOut(many=True, required=False)
    samples_device_ms = LabSamplesDeviceMsOut(
        required=False,
        help_text="with samples: the device latency the stream uses and its source (the "
        "request's device_ms; for recorded tasks the device P50 of the cell, else of the "
        "fleet, over the last 24 h; else the seed's)",
    )

    class Meta:
        ref_name = "LabExplain"
