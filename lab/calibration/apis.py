"""REST API of calibration, under /api/v1/ (docs/lab.md, "Calibration").

`POST fleets/{slug}/lab/calibrations` computes (any role that reads the fleet; synchronous:
a day of a busy fleet calibrates in seconds, bench/RESULTS.md); `POST
fleets/{slug}/lab/calibrations/apply` writes chosen θs into the draft (editors), revision
checked like every draft edit.
"""

from __future__ import annotations

from typing import Any, Final

from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.api import (
    JsonChoiceField,
    JsonFloatField,
    JsonIntegerField,
    JsonRegexField,
    require_object,
)
from controlplane.exceptions import ValidationFailed
from controlplane.openapi import closed_body, error_responses
from controlplane.permissions import IsEditor, IsViewer
from routing_policies.cell_schema import DIMENSIONS, CellKey
from routing_policies.selectors import fleet_get
from routing_policies.validation import DIMENSION_VALUE_RE, MAX_CELLS, MAX_VERSION
from telemetry.api_schemas import CostReportSerializer

from .selectors import DEFAULT_HOURS, MAX_HOURS, calibration_compute, calibration_out
from .services import calibration_apply
from .targets import TARGET_KINDS, Target

# A cost ceiling far above any fleet's spend, low enough to stay a plain float.
MAX_COST_PER_HOUR: Final = 1e9


def _dimension_field() -> JsonRegexField:
    return JsonRegexField(DIMENSION_VALUE_RE.pattern, max_length=32)


def _refuse_unknown(data: dict[str, Any], known: tuple[str, ...], prefix: str = "") -> None:
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ValidationFailed(
            f"Unknown field {prefix}{unknown[0]!r}.",
            details=[{"field": f"{prefix}{name}", "message": "unknown field"} for name in unknown],
        )


def _cell_keys(cells: list[dict[str, Any]]) -> list[CellKey]:
    """The cells of a body as keys; a cell named twice is refused, naming the second."""
    keys: list[CellKey] = []
    for index, cell in enumerate(cells):
        key: CellKey = (cell["task_type"], cell["latency_budget"], cell["privacy_tier"])
        if key in keys:
            raise ValidationFailed(
                f"cells[{index}] names {'/'.join(key)} a second time.",
                details=[{"field": f"cells[{index}]", "message": "names a cell twice"}],
            )
        keys.append(key)
    return keys


@closed_body
class CellKeySerializer(serializers.Serializer[Any]):
    """One cell of the table by its three dimensions."""

    task_type = _dimension_field()
    latency_budget = _dimension_field()
    privacy_tier = _dimension_field()

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


# What `TargetSerializer.validate` accepts, case by case (schemathesis holds the two equal):
# a share for alpha, alpha_within_budget, cloud_share and quality, a ceiling for
# cost_ceiling, no value for the P95 target.
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
class TargetSerializer(serializers.Serializer[Any]):
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
class CalibrationInputSerializer(serializers.Serializer[Any]):
    """A calibration request."""

    target = TargetSerializer()
    cells = serializers.ListField(
        child=CellKeySerializer(),
        required=False,
        allow_empty=False,
        min_length=1,
        max_length=MAX_CELLS,
        help_text="the cells to calibrate; omitted: every cell",
    )
    hours = JsonIntegerField(
        min_value=1,
        max_value=MAX_HOURS,
        default=DEFAULT_HOURS,
        help_text="the window: the last this many hours of recorded events",
    )
    version = JsonIntegerField(
        min_value=1,
        max_value=MAX_VERSION,
        required=False,
        help_text="the published version whose cells to calibrate; omitted: the draft "
        "(else the latest published version)",
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
class ApplyInputSerializer(serializers.Serializer[Any]):
    """θs to write into the draft at `revision`."""

    revision = JsonIntegerField(min_value=1, max_value=MAX_VERSION, help_text="the draft revision")
    cells = serializers.ListField(
        child=AppliedCellSerializer(), allow_empty=False, min_length=1, max_length=MAX_CELLS
    )

    class Meta:
        ref_name = "CalibrationApply"


# --- answers ----------------------------------------------------------------------------------


class CurvePointSerializer(serializers.Serializer[Any]):
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

    class Meta:
        ref_name = "CalibrationPoint"


class KeptBinSerializer(serializers.Serializer[Any]):
    score_from = serializers.FloatField()
    score_to = serializers.FloatField()
    reported = serializers.IntegerField(help_text="events reporting refine_changed")
    kept = serializers.IntegerField(help_text="of which the cloud kept the draft")
    kept_rate = serializers.FloatField()
    low = serializers.FloatField(help_text="Wilson 95% interval")
    high = serializers.FloatField()

    class Meta:
        ref_name = "CalibrationKeptBin"


class CellQualitySerializer(serializers.Serializer[Any]):
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

    class Meta:
        ref_name = "CalibrationCellQuality"


class VerifiedSerializer(serializers.Serializer[Any]):
    events = serializers.IntegerField(help_text="sampled events decided again at the chosen θ")
    matching = serializers.IntegerField(help_text="of which the sweep predicted the route")

    class Meta:
        ref_name = "CalibrationVerified"


class BrokenConstraintSerializer(serializers.Serializer[Any]):
    constraint = serializers.ChoiceField(choices=["latency_budget"])
    limit = serializers.FloatField(help_text="the cell's limit (latency budget, ms)")
    value = serializers.FloatField(help_text="the chosen point's figure (predicted P95, ms)")
    message = serializers.CharField()

    class Meta:
        ref_name = "CalibrationBrokenConstraint"


class CellResultSerializer(serializers.Serializer[Any]):
    task_type = serializers.CharField()
    latency_budget = serializers.CharField()
    privacy_tier = serializers.CharField()
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


class BaseSerializer(serializers.Serializer[Any]):
    version = serializers.IntegerField(allow_null=True)
    label = serializers.CharField()  # type: ignore[assignment]  # a declared field
    is_draft = serializers.BooleanField()
    revision = serializers.IntegerField(allow_null=True)

    class Meta:
        ref_name = "CalibrationBase"


class TargetOutSerializer(serializers.Serializer[Any]):
    kind = serializers.CharField()
    value = serializers.FloatField(allow_null=True)
    label = serializers.CharField()  # type: ignore[assignment]  # a declared field

    class Meta:
        ref_name = "CalibrationTargetOut"


class WindowSerializer(serializers.Serializer[Any]):
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    hours = serializers.FloatField()

    class Meta:
        ref_name = "CalibrationWindow"


class CalibrationSerializer(serializers.Serializer[Any]):
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

    class Meta:
        ref_name = "Calibration"


class AppliedSerializer(serializers.Serializer[Any]):
    revision = serializers.IntegerField(help_text="the draft's revision after the edit")
    cells = AppliedCellSerializer(many=True)
    backtest = serializers.IntegerField(
        allow_null=True,
        help_text="the backtest of the new revision over the last 24 h, started "
        "(GET .../lab/backtests/{id}); null when it cannot start",
    )

    class Meta:
        ref_name = "CalibrationApplied"


def _validated(
    serializer_class: type[serializers.Serializer[Any]], data: Any, cell_fields: tuple[str, ...]
) -> dict[str, Any]:
    """The body checked by `serializer_class`, unknown fields refused at every level."""
    body = require_object(data)
    _refuse_unknown(body, tuple(serializer_class().fields))
    target = body.get("target")
    if isinstance(target, dict):
        _refuse_unknown(target, ("kind", "value"), "target.")
    for index, cell in enumerate(body.get("cells") or []):
        if isinstance(cell, dict):
            _refuse_unknown(cell, cell_fields, f"cells[{index}].")
    serializer = serializer_class(data=body)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


class CalibrationApi(APIView):
    """Calibrate θ per cell for a target over the fleet's recorded events."""

    permission_classes = [IsViewer]

    @extend_schema(
        request=CalibrationInputSerializer,
        responses={200: CalibrationSerializer, **error_responses(409)},
        operation_id="lab_calibration_compute",
        description='Example: {"target": {"kind": "alpha", "value": 0.7}, "cells": '
        '[{"task_type": "text", "latency_budget": "interactive", "privacy_tier": "normal"}], '
        '"hours": 24}. Nothing is stored; apply the chosen θs with .../apply. 409: nothing to '
        "calibrate (no version), or for a quality target too few draft reports in every cell "
        "(too_few_quality_reports).",
    )
    def post(self, request: Request, slug: str) -> Response:
        fleet = fleet_get(slug=slug)
        data = _validated(CalibrationInputSerializer, request.data, DIMENSIONS)
        cells = _cell_keys(data["cells"]) if "cells" in data else None
        target = Target(kind=data["target"]["kind"], value=data["target"].get("value"))
        calibration = calibration_compute(
            fleet=fleet,
            target=target,
            cells=cells,
            hours=data["hours"],
            version=data.get("version"),
        )
        return Response(calibration_out(calibration))


class CalibrationApplyApi(APIView):
    """Write θs (a calibration's chosen points) into the draft as one audited draft edit."""

    permission_classes = [IsEditor]

    @extend_schema(
        request=ApplyInputSerializer,
        responses={200: AppliedSerializer, **error_responses(409)},
        operation_id="lab_calibration_apply",
    )
    def post(self, request: Request, slug: str) -> Response:
        fleet = fleet_get(slug=slug)
        data = _validated(ApplyInputSerializer, request.data, (*DIMENSIONS, "threshold"))
        keys = _cell_keys(data["cells"])
        thresholds = [
            (key, cell["threshold"]) for key, cell in zip(keys, data["cells"], strict=True)
        ]
        draft, backtest = calibration_apply(
            actor=request.user, fleet=fleet, revision=data["revision"], thresholds=thresholds
        )
        return Response(
            {
                "revision": draft.revision,
                "cells": data["cells"],
                "backtest": backtest.pk if backtest else None,
            }
        )
