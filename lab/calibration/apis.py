"""REST API of calibration, under /api/v1/ (docs/lab.md, "Calibration").

`POST fleets/{slug}/lab/calibrations` computes (any role that reads the fleet; synchronous:
a day of a busy fleet calibrates in seconds, bench/RESULTS.md); `POST
fleets/{slug}/lab/calibrations/apply` writes chosen θs into the draft (editors), revision
checked like every draft edit.
"""

from __future__ import annotations

from typing import Any

from rest_framework.request import Request

from controlplane.permissions import IsEditor, IsViewer
from routing_policies.apis import Answer, FleetAction, FleetActionApi
from routing_policies.models import Fleet

from ..schemas import cell_key
from .schemas import (
    AppliedSerializer,
    ApplyInputSerializer,
    CalibrationInputSerializer,
    CalibrationSerializer,
)
from .selectors import calibration_compute, calibration_out
from .services import calibration_apply_cells
from .targets import Target


class CalibrationApi(FleetActionApi):
    """Calibrate θ per cell for a target over the fleet's recorded events."""

    does = FleetAction(IsViewer, CalibrationInputSerializer, "lab_calibration_compute")
    answer = Answer(CalibrationSerializer, errors=(409,))

    def act(self, request: Request, fleet: Fleet, data: dict[str, Any]) -> Any:
        """Example: {"target": {"kind": "alpha", "value": 0.7}, "cells": [{"task_type": "text",
        "latency_budget": "interactive", "privacy_tier": "normal"}], "hours": 24}. Nothing is
        stored; apply the chosen θs with .../apply. 409: nothing to calibrate (no version), or
        for a quality target too few draft reports in every cell (too_few_quality_reports)."""
        cells = [cell_key(cell) for cell in data["cells"]] if "cells" in data else None
        target = Target(kind=data["target"]["kind"], value=data["target"].get("value"))
        calibration = calibration_compute(
            fleet=fleet,
            target=target,
            cells=cells,
            hours=data["hours"],
            version=data.get("version"),
            segment=data.get("segment"),
        )
        return calibration_out(calibration)


class CalibrationApplyApi(FleetActionApi):
    """Write θs (a calibration's chosen points) into the draft as one audited draft edit."""

    does = FleetAction(IsEditor, ApplyInputSerializer, "lab_calibration_apply")
    answer = Answer(AppliedSerializer, errors=(409,))

    def act(self, request: Request, fleet: Fleet, data: dict[str, Any]) -> Any:
        draft, backtest = calibration_apply_cells(actor=request.user, fleet=fleet, **data)
        return {
            "revision": draft.revision,
            "cells": data["cells"],
            "backtest": backtest.pk if backtest else None,
        }
