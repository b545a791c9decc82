"""REST API of the autopilot, under /api/v1/ (docs/lab.md, "The autopilot").

`GET fleets/{slug}/autopilot` (viewers): the objective, its state and why, the next run and
the latest cycles. `PUT` the same (publishers): set the objective. `POST …/pause`, `…/resume`,
`…/run` (publishers). `GET …/cycles/{number}` (viewers): one cycle.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.api import input_validate, require_object
from controlplane.exceptions import NotFound
from controlplane.openapi import error_responses
from controlplane.permissions import IsPublisher, IsViewer
from lab.schemas import ClosedSerializer
from routing_policies.apis import Answer, FleetAction, FleetActionApi
from routing_policies.models import Fleet
from routing_policies.selectors import fleet_get

from .models import AutopilotCycle
from .schemas import AutopilotSerializer, CycleSerializer, ObjectiveInputSerializer
from .selectors import autopilot_out, cycle_out
from .services import autopilot_pause, autopilot_resume, autopilot_tick, objective_set


class AutopilotApi(FleetActionApi):
    """The fleet's autopilot: read it (viewers), set its objective (publishers)."""

    def get_permissions(self) -> list[Any]:
        return [IsViewer()] if self.request.method == "GET" else [IsPublisher()]

    @extend_schema(responses={200: AutopilotSerializer}, operation_id="autopilot_get")
    def get(self, request: Request, slug: str) -> Response:
        return Response(autopilot_out(fleet_get(slug=slug)))

    does = FleetAction(IsPublisher, ObjectiveInputSerializer, "autopilot_set", "put")
    answer = Answer(AutopilotSerializer, errors=(409,))

    def act(self, request: Request, fleet: Fleet, data: dict[str, Any]) -> Any:
        """Example: {"enabled": true, "quality_floor": 0.85, "delta": 0.05, "max_step": 0.05,
        "run_at": "03:00", "time_zone": "Europe/Berlin"}. A field left out is kept. 409
        too_little_quality_data: a cell in scope lacks the sample the bound needs (each cell, its
        reports and the reports it needs in `details`); 409 no_such_cell: `cells` or
        `excluded_cells` names a cell the stable version lacks."""
        objective_set(actor=request.user, fleet=fleet, values=data)
        return autopilot_out(fleet)


def _action(name: str, doing: Any, description: str) -> type[APIView]:
    class ActionApi(APIView):
        permission_classes = [IsPublisher]

        @extend_schema(
            request=None,
            responses={200: AutopilotSerializer, **error_responses(409)},
            operation_id=f"autopilot_{name}",
            description=description,
        )
        def post(self, request: Request, slug: str) -> Response:
            fleet = fleet_get(slug=slug)
            if request.data:
                require_object(request.data)
                input_validate(_Empty, request.data)
            doing(actor=request.user, fleet=fleet)
            return Response(autopilot_out(fleet))

    ActionApi.__name__ = f"Autopilot{name.title()}Api"
    ActionApi.__doc__ = description
    return ActionApi


class _Empty(ClosedSerializer):
    """No fields: any field sent is refused by name."""


def _run(*, actor: Any, fleet: Fleet) -> None:
    autopilot_tick(fleet=fleet, force=True)


# The publishers' actions, each at `…/autopilot/<name>` (urls.py routes them all).
ACTIONS: dict[str, type[APIView]] = {
    name: _action(name, doing, description)
    for name, doing, description in (
        (
            "pause",
            autopilot_pause,
            "Pause the autopilot: no cycle starts or moves on until resumed.",
        ),
        ("resume", autopilot_resume, "Resume the autopilot after a pause or a stop."),
        ("run", _run, "Start a cycle now, or move the open one on (outside quiet periods)."),
    )
}


class AutopilotCycleApi(APIView):
    """One cycle: predicted beside realized per cell, the draft, the request, the rollout."""

    permission_classes = [IsViewer]

    @extend_schema(responses={200: CycleSerializer}, operation_id="autopilot_cycle_get")
    def get(self, request: Request, slug: str, number: int) -> Response:
        fleet = fleet_get(slug=slug)
        cycle = AutopilotCycle.objects.filter(fleet=fleet, number=number).first()
        if cycle is None:
            raise NotFound(f"Fleet {fleet.slug!r} has no autopilot cycle {number}.")
        return Response(cycle_out(cycle))
