"""`POST /api/v1/fleets/<slug>/lab/explain`: one task through the decision, as a trace.

Any role that can read the fleet may ask (it changes nothing). Thin: the input serializer
checks the body, `selectors.playground_explain` answers.
"""

from __future__ import annotations

from typing import Any

from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from edge_sdk.decision import DeviceState, TaskSignals
from routing_policies.models import Fleet

from ..api import fleet_post
from ..schemas import cell_key
from .explain import CellOverride
from .schemas import ExplainInputSerializer, ExplainOutSerializer
from .selectors import playground_explain


class ExplainApi(APIView):
    """The decision for one task in one cell, with each step's numbers."""

    @fleet_post(
        ExplainInputSerializer,
        responses=ExplainOutSerializer,
        operation_id="lab_explain",
        description=(
            "Decides the task with edge_sdk.decision.decide in the cell of the chosen version "
            "(or the draft), after the optional mode / θ override, and answers the trace: each "
            "weighted term of the score, θ with each adjustment, the deciding step of "
            "PROTOCOL.md, the predicted cloud latency against the budget, the privacy outcome "
            "and the cloud cost. `matrix`: the same task in every cell; `samples`: a stream of "
            "sample tasks decided in the cell. Changes nothing."
        ),
    )
    def post(self, request: Request, fleet: Fleet, body: dict[str, Any]) -> Response:
        return Response(
            playground_explain(
                fleet=fleet,
                ref=body.get("version"),
                key=cell_key(body["cell"]),
                override=CellOverride(**body.get("override", {})),
                # The closed serializers hold these fields and no other; an optional one left
                # out (upload_bytes, cloud_pressure) takes the dataclass's default, 0.
                task=TaskSignals(**body["task"]),
                device=DeviceState(**body["device"]),
                with_matrix=body.get("matrix", False),
                samples=body.get("samples", "none"),
                device_ms=body.get("device_ms"),
            )
        )
