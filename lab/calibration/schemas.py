"""The calibration API's bodies: the input serializers that check them (the API's, and the
page's forms built on them), and the answers' shapes."""

from __future__ import annotations

import re
from typing import Any, Final

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlplane.api import JsonChoiceField, JsonFloatField, JsonRegexField
from controlplane.openapi import ApiSerializer, closed_body
from routing_policies.cell_schema import DIMENSIONS as CELL_FIELDS
from routing_policies.cell_schema import CellKey
from routing_policies.validation import DIMENSION_VALUE_RE, MAX_CELLS
from telemetry.api_schemas import CostReportSerializer

from ..schemas import (
    CellKeyFields,
    CellKeyOut,
    ClosedSerializer,
    cell_key,
    segment_field,
    version_number_field,
    window_hours_field,
)
from .selectors import DEFAULT_HOURS, MAX_HOURS
from .targets import TARGET_KINDS

# A cost ceiling far above any fleet's spend, low enough to stay a plain float.
MAX_COST_PER_HOUR: Final = 1e9
# The windows the page offers (the API takes any whole number of hours up to MAX_HOURS).
HOURS_CHOICES: Final = (1, 6, 24, 72, MAX_HOURS)


class CellKeyListField(serializers.ListField):
    """A list of cells (objects naming the three dimensions); a cell named twice is refused,
    naming the second."""

    def to_internal_value(self, data: Any) -> list[Any]:
        cells = super().to_internal_value(data)
        seen: set[CellKey] = set()
        for index, cell in enumerate(cells):
            key = cell_key(cell)
            if key in seen:
                # Keyed by the index, as DRF's own list errors are: the detail says `cells[1]`.
                twice = f"names {'/'.join(key)} a second time"
                raise serializers.ValidationError({index: [twice]})  # type: ignore[dict-item]
            seen.add(key)
        return cells


@closed_body
class CellKeySerializer(CellKeyFields):
    """One cell of the table by its three dimensions."""

    class Meta:
        ref_name = "CalibrationCell"


def _target_case(kinds: list[str], value: dict[str, Any] | None) -> dict[str, Any]:
    properties: dict[str, Any] = {"kind": {"type": "string", "enum": kinds}}
    if value is not None:
        properties["value"] = {"type": "number", "minimum": 0, **value}
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


# What `TargetSerializer.validate` accepts, case by case: a share for alpha,
# alpha_within_budget, cloud_share and quality, a ceiling for cost_ceiling, no value for the
# P95 target.
SHARE_KINDS: Final = ("alpha", "alpha_within_budget", "cloud_share", "quality")
TARGET_SCHEMA: Final[dict[str, Any]] = {
    "oneOf": [
        _target_case(list(SHARE_KINDS), {"maximum": 1}),
        _target_case(["cost_ceiling"], {"maximum": MAX_COST_PER_HOUR}),
        _target_case(["p95_within_budget"], None),
    ],
    "description": "; ".join(f"{kind}: {text}" for kind, text in TARGET_KINDS.items()),
}


@extend_schema_field(TARGET_SCHEMA)
@closed_body
class TargetSerializer(ClosedSerializer):
    """What to calibrate for; see `kind`."""

    kind = JsonChoiceField(
        choices=list(TARGET_KINDS),
        help_text="; ".join(f"{kind}: {text}" for kind, text in TARGET_KINDS.items()),
    )
    value = JsonFloatField(
        required=False,
        min_value=0.0,
        max_value=MAX_COST_PER_HOUR,
        help_text="alpha, alpha_within_budget, cloud_share and quality: a share in [0, 1]; "
        "cost_ceiling: currency "
        "units per hour per cell; p95_within_budget: none",
    )

    class Meta:
        ref_name = "CalibrationTarget"

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        kind, value = attrs["kind"], attrs.get("value")
        if kind == "p95_within_budget":
            if value is not None:
                raise serializers.ValidationError({"value": "p95_within_budget takes no value"})
        elif value is None:
            raise serializers.ValidationError({"value": f"{kind} needs a value"})
        elif kind in SHARE_KINDS and value > 1.0:
            raise serializers.ValidationError({"value": f"{kind} is a share in [0, 1]"})
        return attrs


@closed_body
class CalibrationInputSerializer(ClosedSerializer):
    """A calibration request."""

    target = TargetSerializer()
    cells = CellKeyListField(
        child=CellKeySerializer(),
        required=False,
        allow_empty=False,
        min_length=1,
        max_length=MAX_CELLS,
        help_text="the cells to calibrate; omitted: every cell",
    )
    hours = window_hours_field(
        max_hours=MAX_HOURS, help_text="the window: the last this many hours of recorded events"
    )
    version = version_number_field(
        required=False,
        help_text="the published version whose cells to calibrate; omitted: the draft "
        "(else the latest published version)",
    )
    segment = segment_field(
        "calibrate on the events of the devices in this segment of the fleet only (their "
        "attributes now), each version as a device of the segment runs it (its overrides): a "
        "θ per hardware class; 400 naming `segment` when the fleet has no such segment"
    )

    class Meta:
        ref_name = "CalibrationRequest"


@closed_body
class AppliedCellSerializer(CellKeySerializer):
    """One cell and the θ to write into the draft."""

    threshold = JsonFloatField(min_value=0.0, max_value=1.0)

    class Meta:
        ref_name = "CalibrationAppliedCell"


@closed_body
class ApplyInputSerializer(ClosedSerializer):
    """θs to write into the draft at `revision`."""

    revision = version_number_field(help_text="the draft revision")
    cells = CellKeyListField(
        child=AppliedCellSerializer(), allow_empty=False, min_length=1, max_length=MAX_CELLS
    )
    segment = segment_field(
        "write the θs into the draft's override for this segment (a calibration of the "
        "segment's events), kept with its other fields; omitted: into the cells themselves"
    )

    class Meta:
        ref_name = "CalibrationApply"


# --- the page's forms: the API's inputs, as a page posts them ----------------------------------

_DIMENSION_VALUE: Final = DIMENSION_VALUE_RE.pattern.removeprefix(r"\A").removesuffix(r"\Z")
CELL_LABEL_RE: Final = re.compile(r"\A" + "/".join([_DIMENSION_VALUE] * 3) + r"\Z")


class CellLabelField(JsonRegexField):
    """A cell as a page names it, `task_type/latency_budget/privacy_tier`: its key."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(CELL_LABEL_RE.pattern, max_length=3 * 33, **kwargs)

    def run_validation(self, data: Any = serializers.empty) -> CellKey:
        # The pattern is checked on the label as posted; then it is read as a key.
        task_type, latency_budget, privacy_tier = str(super().run_validation(data)).split("/")
        return (task_type, latency_budget, privacy_tier)


class CalibratePageSerializer(TargetSerializer):
    """The page's query: the API's target (a share typed in percent), the window among the
    page's choices, the cells ticked (none: every cell)."""

    hours = JsonChoiceField(choices=list(HOURS_CHOICES), default=DEFAULT_HOURS, label="Window")
    cells = serializers.ListField(
        child=CellLabelField(), required=False, max_length=MAX_CELLS, label="Cells"
    )
    segment = segment_field("the devices of this segment only (blank: the whole fleet)")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        kind, value = attrs["kind"], attrs.get("value")
        if kind in SHARE_KINDS and value is not None:
            if value > 100:
                raise serializers.ValidationError(
                    {"value": f"A share is between 0 and 100% (got {value:g})."}
                )
            attrs["value"] = value / 100
        return super().validate(attrs)


class ThetaField(serializers.Field):  # type: ignore[type-arg]
    """A cell and its θ as the page posts them, `text/interactive/normal=0.592`: checked by the
    API's `AppliedCellSerializer`."""

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        label, _, number = str(data).partition("=")
        parts = label.split("/")
        try:
            threshold = float(number)
        except ValueError:
            threshold = -1.0
        cell = AppliedCellSerializer(
            data={**dict(zip(CELL_FIELDS, parts, strict=False)), "threshold": threshold}
        )
        if len(parts) != len(CELL_FIELDS) or not cell.is_valid():
            raise serializers.ValidationError(
                f"{str(data)[:60]!r} is not a cell and a θ in [0, 1]."
            )
        return dict(cell.validated_data)

    def to_representation(self, value: Any) -> Any:
        return value


class ApplyPageSerializer(ApplyInputSerializer):
    """The page's apply form: the API's input, its cells posted as `theta` values `cell=θ`."""

    cells = None  # type: ignore[assignment]  # posted as `theta`
    theta = serializers.ListField(
        child=ThetaField(), allow_empty=False, max_length=MAX_CELLS, label="θ to apply"
    )

    class Meta:
        ref_name = "CalibrationApplyPage"


# --- answers ----------------------------------------------------------------------------------


class CurvePointSerializer(ApiSerializer):
    component_name = "CalibrationPoint"
    threshold = serializers.FloatField()
    alpha = serializers.FloatField(help_text="share of the cell's tasks answered on the device")
    cloud_share = serializers.FloatField(help_text="share that calls the cloud")
    draft_refine_share = serializers.FloatField()
    p95_ms = serializers.FloatField(
        allow_null=True, help_text="predicted P95 latency of the cell's tasks"
    )
    cost_per_hour = serializers.FloatField(
        allow_null=True,
        help_text="over the span that holds data (docs/lab.md, Cost); null under a minute of data",
    )
    device_quality = serializers.FloatField(
        allow_null=True,
        help_text="predicted device quality: of the tasks this θ keeps on the device, the "
        "share whose draft the cloud would keep (null: too few reports, or no task judged)",
    )
    device_quality_low = serializers.FloatField(allow_null=True, help_text="its 95% interval")
    device_quality_high = serializers.FloatField(allow_null=True)
    device_judged = serializers.IntegerField(help_text="device tasks the prediction judges")


class KeptBinSerializer(ApiSerializer):
    component_name = "CalibrationKeptBin"
    score_from = serializers.FloatField()
    score_to = serializers.FloatField()
    reported = serializers.IntegerField(help_text="events reporting refine_changed")
    kept = serializers.IntegerField(help_text="of which the cloud kept the draft")
    kept_rate = serializers.FloatField()
    low = serializers.FloatField(help_text="Wilson 95% interval")
    high = serializers.FloatField()


class CellQualitySerializer(ApiSerializer):
    component_name = "CalibrationCellQuality"
    reports = serializers.IntegerField(help_text="events reporting refine_changed in the window")
    scored_reports = serializers.IntegerField(help_text="of which with a score")
    min_reports = serializers.IntegerField(help_text="scored reports the quality target needs")
    draft_kept_rate = serializers.FloatField(allow_null=True)
    device_kept_rate = serializers.FloatField(
        allow_null=True,
        help_text="kept rate of the device-route reports alone (shadow refines): the device "
        "quality measured at the θs the window ran, to set beside the prediction",
    )
    device_reports = serializers.IntegerField(help_text="device-route reports (shadow refines)")
    groups = serializers.IntegerField(help_text="score groups the estimator pools")
    refused = serializers.CharField(help_text="why device quality is not predicted, or empty")
    curve = KeptBinSerializer(many=True, help_text="score → draft kept, by score decile")


class VerifiedSerializer(ApiSerializer):
    component_name = "CalibrationVerified"
    events = serializers.IntegerField(help_text="sampled events decided again at the chosen θ")
    matching = serializers.IntegerField(help_text="of which the sweep predicted the route")


class BrokenConstraintSerializer(ApiSerializer):
    component_name = "CalibrationBrokenConstraint"
    constraint = serializers.ChoiceField(choices=["latency_budget"])
    limit = serializers.FloatField(help_text="the cell's limit (latency budget, ms)")
    value = serializers.FloatField(help_text="the chosen point's figure (predicted P95, ms)")
    message = serializers.CharField()


class CellResultSerializer(CellKeyOut):
    mode = serializers.CharField()
    current_threshold = serializers.FloatField()
    latency_budget_ms = serializers.IntegerField()
    calibrated = serializers.BooleanField()
    skipped = serializers.CharField(help_text="why θ plays no part in this cell, or empty")
    quality = CellQualitySerializer(
        allow_null=True, help_text="the curve score → draft kept of the window's rollups"
    )
    events = serializers.IntegerField()
    reached = serializers.BooleanField()
    current = CurvePointSerializer(allow_null=True)
    chosen = CurvePointSerializer(allow_null=True)
    curve = CurvePointSerializer(many=True)
    verified = VerifiedSerializer(allow_null=True)
    cost = CostReportSerializer(allow_null=True, help_text="at the chosen θ, over the window")
    constraints_broken = BrokenConstraintSerializer(
        many=True,
        help_text="the constraints of the cell the chosen point breaks, whatever the target "
        "(empty: none): its predicted P95 over the cell's latency budget",
    )

    class Meta:
        ref_name = "CalibrationCellResult"


class BaseSerializer(ApiSerializer):
    component_name = "CalibrationBase"
    version = serializers.IntegerField(allow_null=True)
    label = serializers.CharField()  # type: ignore[assignment]  # a declared field
    is_draft = serializers.BooleanField()
    revision = serializers.IntegerField(allow_null=True)


class TargetOutSerializer(ApiSerializer):
    component_name = "CalibrationTargetOut"
    kind = serializers.CharField()
    value = serializers.FloatField(allow_null=True)
    label = serializers.CharField()  # type: ignore[assignment]  # a declared field


class WindowSerializer(ApiSerializer):
    component_name = "CalibrationWindow"
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    hours = serializers.FloatField()


class CalibrationSegmentSerializer(ApiSerializer):
    name = serializers.CharField()
    rule = serializers.JSONField(help_text="the segment's rule as it was read")
    devices = serializers.IntegerField(help_text="the fleet's devices it matched")
    overridden = serializers.ListField(
        child=serializers.CharField(),
        help_text="the cells the version's override for the segment changes",
    )


class CalibrationSerializer(ApiSerializer):
    fleet = serializers.CharField()
    base = BaseSerializer()
    target = TargetOutSerializer()
    window = WindowSerializer()
    currency = serializers.CharField()
    stable_version = serializers.IntegerField(
        allow_null=True, help_text="the version the savings against stable compare with"
    )
    events = serializers.IntegerField()
    unreplayable_events = serializers.IntegerField()
    seconds = serializers.FloatField()
    cells = CellResultSerializer(many=True)
    cost = CostReportSerializer(
        allow_null=True,
        help_text="the calibrated cells together at their chosen θs; against stable only when "
        "each of them has a cell in the stable version",
    )
    segment = CalibrationSegmentSerializer(
        allow_null=True,
        help_text="the segment whose devices' events were calibrated on (null: the whole fleet)",
    )


class AppliedSerializer(ApiSerializer):
    component_name = "CalibrationApplied"
    revision = serializers.IntegerField(help_text="the draft's revision after the edit")
    cells = AppliedCellSerializer(many=True)
    backtest = serializers.IntegerField(
        allow_null=True,
        help_text="the backtest of the new revision over the last 24 h, started "
        "(GET .../lab/backtests/{id}); null when it cannot start",
    )
