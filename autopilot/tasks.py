"""The autopilot's beat task: every AUTOPILOT_TICK_INTERVAL_S, each active fleet's autopilot
moves its open cycle on or starts one when its cadence says so (autopilot.services)."""

from __future__ import annotations

import logging

from celery import shared_task

from controlplane.exceptions import ApplicationError
from routing_policies.models import Fleet

from .models import AutopilotObjective
from .services import autopilot_tick

logger = logging.getLogger(__name__)


@shared_task(name="autopilot.tick_all")  # type: ignore[untyped-decorator]
def tick_all() -> int:
    """Tick every fleet whose autopilot is on; the number of fleets ticked."""
    fleet_ids = list(
        AutopilotObjective.objects.filter(state=AutopilotObjective.State.ACTIVE).values_list(
            "fleet_id", flat=True
        )
    )
    for fleet_id in fleet_ids:
        tick.delay(fleet_id)
    return len(fleet_ids)


@shared_task(name="autopilot.tick")  # type: ignore[untyped-decorator]
def tick(fleet_id: int) -> str | None:
    """One fleet's tick: the state of the cycle it touched, if any."""
    fleet = Fleet.objects.filter(pk=fleet_id).first()
    if fleet is None:
        return None
    try:
        cycle = autopilot_tick(fleet=fleet)
    except ApplicationError as exc:  # a quiet period: said, nothing to retry
        logger.info("autopilot.tick_refused fleet=%s reason=%s", fleet.slug, exc.message)
        return None
    return cycle.state if cycle is not None else None
