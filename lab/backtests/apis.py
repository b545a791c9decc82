"""REST API of backtests: editors and up start one, anyone who can read the fleet reads it."""

from __future__ import annotations

from typing import Any

from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.permissions import IsEditor, IsViewer
from routing_policies.apis import Answer, FleetAction, FleetActionApi, FleetReadApi
from routing_policies.models import Fleet

from . import schemas, selectors, services


class BacktestListApi(FleetActionApi):
    """POST starts a backtest (or answers the one kept for the same request)."""

    does = FleetAction(IsEditor, schemas.BacktestStartSerializer, "backtest_start", reads=IsViewer)
    answer = Answer(schemas.BacktestSerializer, also=(202,), errors=(404, 409))

    def act(self, request: Request, fleet: Fleet, data: dict[str, Any]) -> Any:
        """Replay the draft or a version over the recorded events of a window (default the last 24
        h). 202 with a new backtest to poll; 200 with the one already kept for the same subject,
        revision, window and filters."""
        backtest, created = services.backtest_start(actor=request.user, fleet=fleet, **data)
        return Response(
            selectors.backtest_out(backtest, slug=fleet.slug),
            status=status.HTTP_202_ACCEPTED if created else status.HTTP_200_OK,
        )


class BacktestDetailApi(FleetReadApi):
    """One backtest: its progress, and its result once done."""

    answer = Answer(schemas.BacktestSerializer, errors=(404,))
    read_operation = "backtest_get"

    def look(self, request: Request, fleet: Fleet, backtest_id: int) -> Any:
        backtest = selectors.backtest_get(fleet=fleet, backtest_id=backtest_id)
        return selectors.backtest_out(backtest, slug=fleet.slug)
