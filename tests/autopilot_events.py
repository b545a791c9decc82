"""Events of a fleet's image cell with the draft reports the autopilot's bound needs (unit
and integration tests of the autopilot)."""

from __future__ import annotations

import json
import random
from typing import Any

from django.utils import timezone

from routing_policies.models import Device
from telemetry.ingest.services import landed_batches_process, telemetry_batch_ingest
from tests.factories import demo_cell, iso, protocol_event, recorded_sample
from tests.lab_events import IMAGE_KEY, with_quality

IMAGE = "image/interactive/normal"
OBJECTIVE = {
    "enabled": True,
    "cells": [IMAGE],
    "quality_floor": 0.5,
    "quality_resolution": 0.04,
    "max_step": 0.05,
    "measure_minutes": 30,
}


def ingest(device: Device, events: list[dict[str, Any]]) -> None:
    for start in range(0, len(events), 500):
        batch = {"events": events[start : start + 500]}
        telemetry_batch_ingest(device=device, body=json.dumps(batch).encode())
    landed_batches_process()


def image_events(
    count: int, *, seed: int, version: int = 1, now: bool = False, **over: Any
) -> list[dict[str, Any]]:
    """The image cell's events, half the device answers shadow-refined, kept as true_kept
    (`now`: stamped now, else an hour ago)."""
    cell = demo_cell(IMAGE_KEY, **over)
    rng = random.Random(seed)
    out = []
    ts = timezone.now() if now else None
    for recorded in recorded_sample(cell, count, seed=seed, ts=ts):
        event = protocol_event(recorded)
        if ts is not None:  # stamped now, not a second ago: after whatever just happened
            event["ts"] = iso(ts)
        event["policy_version"] = version
        out.append(with_quality(event, cell, recorded, rng, shadow_share=0.5))
    return out


def approve_then_tick(client: Any, fleet: Any, request: Any) -> Any:
    """A publisher approves the autopilot's change request (the page's API); then the
    autopilot's next tick: the cycle it moved on."""
    from autopilot.services import autopilot_tick

    revision = request.version.revision
    approved = client.post(
        f"/api/v1/fleets/{fleet.slug}/change-requests/{request.pk}/approve",
        {"revision": revision},
        format="json",
    )
    assert approved.status_code == 200, approved.content
    return autopilot_tick(fleet=fleet)
