"""`POST /api/v1/fleets/<slug>/lab/explain`: one task through the decision, as a trace.

Any role that can read the fleet may ask (it changes nothing). Thin: the input serializer
checks the body (a `FleetActionApi`), `selectors.playground_explain` answers.
"""

from __future__ import annotations

from typing import Any

from rest_framework.request import Request

from controlplane.permissions import IsViewer
from edge_sdk.decision import DeviceState, TaskSignals
from routing_policies.apis import Answer, FleetAction, FleetActionApi
from routing_policies.models import Fleet

from ..schemas import cell_key
from .explain import CellOverride
from .schemas import ExplainInputSerializer, ExplainOutSerializer
from .selectors import playground_explain


class ExplainApi(FleetActionApi):
    """The decision for one task in one cell, with each step's numbers."""

    does = FleetAction(IsViewer, ExplainInputSerializer, "lab_explain")
    answer = Answer(ExplainOutSerializer)

    def act(self, request: Request, fleet: Fleet, data: dict[str, Any]) -> Any:
        """Decides the task with edge_sdk.decision.decide in the cell of the chosen version (or the
        draft), after the optional mode / θ override, and answers the trace: each weighted term
        of the score, θ with each adjustment, the deciding step of PROTOCOL.md, the predicted
        cloud latency against the budget, the privacy outcome and the cloud cost. `matrix`: the
        same task in every cell; `samples`: a stream of sample tasks decided in the cell. Changes
        nothing."""
        return playground_explain(
            fleet=fleet,
            ref=data.get("version"),
            key=cell_key(data["cell"]),
            override=CellOverride(**data.get("override", {})),
            # The closed serializers hold these fields and no other; an optional one left
            # out (upload_bytes, cloud_pressure) takes the dataclass's default, 0.
            task=TaskSignals(**data["task"]),
            device=DeviceState(**data["device"]),
            with_matrix=data.get("matrix", False),
            samples=data.get("samples", "none"),
            device_ms=data.get("device_ms"),
        )
