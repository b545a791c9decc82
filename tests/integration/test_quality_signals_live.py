"""Issue #15, "Done when": the quality signals flow from the SDK to the rollups, the dashboard
and the lab, and late feedback joins its event exactly once.

The simulator's SDK devices (edge_sdk.simulate) against a real ASGI server, a real Celery
worker with its beat (ingest, the feedback join and its sweep), PostgreSQL and Redis. The
fleet's image/interactive/normal cell is draft_refine (the cloud refines drafts above θ) and
its text/interactive/normal cell shadow-refines 5% of its device answers; the simulated app
rates half of the answers, 0.5–8 s late (`Device.feedback`, the SDK's feedback queue).
"""

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.db.models import Count, Sum

from edge_sdk.simulate.fleet import FleetConfig, SimulatedFleet
from routing_policies.services import (
    device_enroll,
    fleet_switch_version,
    policy_draft_create,
    policy_draft_update_cells,
    policy_version_publish,
)
from telemetry.models import Event, EventKey, Feedback, FeedbackState, LandedBatch, MinuteRollup
from tests.live_server import asgi_server, require_postgres_and_redis

from .test_telemetry_durability import Worker
from .ws_clients import BackgroundLoop, wait_until

__all__ = ["asgi_server"]

pytestmark = pytest.mark.integration

DRAFT_CELL = ("image", "interactive", "normal")
SHADOW_CELL = ("text", "interactive", "normal")
DEVICES = 30
RATE = 30.0  # tasks per second, fleet-wide
# Counted, not timed (a loaded machine runs fewer tasks a second): the reports the fleet must
# have made before it stops. ~40 s of traffic.
AT_LEAST = {"refines": 40, "shadow_refines": 8, "feedback": 300}
CONNECT_TIMEOUT_S = 120.0
TRAFFIC_TIMEOUT_S = 150.0


@pytest.fixture
def worker(transactional_db: None) -> Iterator[Worker]:
    """A real Celery worker with beat: ingest, the feedback join and the sweep every second."""
    require_postgres_and_redis("the simulated fleet")
    with Worker(
        {
            "TELEMETRY_SWEEP_AFTER_S": "1",
            "TELEMETRY_SWEEP_INTERVAL_S": "1",
            "TELEMETRY_RATE_LIMIT_BATCHES": "0",
        }
    ) as process:
        yield process


def _fields(cell: tuple[str, str, str]) -> dict[str, str]:
    return dict(zip(("task_type", "latency_budget", "privacy_tier"), cell, strict=True))


def _shadow_version(fleet: Any, publisher: Any) -> int:
    """v2: v1 with the text cell shadow-refining 5% of its device answers; made stable."""
    draft = policy_draft_create(actor=publisher, fleet=fleet)
    policy_draft_update_cells(
        actor=publisher,
        fleet=fleet,
        revision=draft.revision,
        edits=[
            {
                **dict(
                    zip(("task_type", "latency_budget", "privacy_tier"), SHADOW_CELL, strict=False)
                ),
                "values": {"shadow_refine_rate": 0.05},
            }
        ],
    )
    version = policy_version_publish(
        actor=publisher, fleet=fleet, revision=draft.revision + 1, note="shadow refines"
    )
    number = version.number
    assert number is not None
    fleet_switch_version(actor=publisher, fleet=fleet, version=number)
    return number


def _cell_sums(fleet: Any, cell: tuple[str, str, str], **where: Any) -> dict[str, int]:
    rows = MinuteRollup.objects.filter(
        fleet=fleet, task_type=cell[0], latency_budget=cell[1], privacy_tier=cell[2], **where
    )
    sums = rows.aggregate(
        reported=Sum("refine_reported"), kept=Sum("refine_kept"), quality=Sum("quality_count")
    )
    return {name: int(value or 0) for name, value in sums.items()}


def _settled() -> bool:
    """Every landed batch processed, and no feedback held whose event was received."""
    if LandedBatch.objects.exists():
        return False
    received = EventKey.objects.values("event_id")
    return not Feedback.objects.filter(state=FeedbackState.HELD, event_id__in=received).exists()


def test_quality_signals__simulated_sdk_fleet__rollups_dashboard_and_lab_late_feedback_once(
    asgi_server: str,
    worker: Worker,
    background: BackgroundLoop,
    fleet: Any,
    fleet_key: str,
    publisher: Any,
    client_as: Any,
) -> None:
    # Given a fleet whose stable version has a draft_refine cell and a shadow-refining cell
    version = _shadow_version(fleet, publisher)
    sim = SimulatedFleet(
        FleetConfig(
            base_url=asgi_server,
            fleet_key=fleet_key,
            devices=DEVICES,
            rate=RATE,
            connect_per_s=25,
            telemetry_flush_s=1.0,
            progress_s=3600,
            offline_spells=False,
            feedback_share=0.5,
            feedback_delay_s=(0.5, 8.0),
        )
    )

    # When the simulated SDK devices run until they have reported refines, shadow refines and
    # late feedback, then stop (delivering what they hold)
    background.run(sim.start())
    try:
        wait_until(
            lambda: all(d.device.policy.version == version for d in sim.devices.values()),
            timeout=CONNECT_TIMEOUT_S,
            interval=0.2,
            what=f"every device on v{version}",
        )
        stats = sim.stats
        wait_until(
            lambda: all(getattr(stats, name) >= count for name, count in AT_LEAST.items()),
            timeout=TRAFFIC_TIMEOUT_S,
            interval=0.5,
            what=f"the fleet's reports {AT_LEAST}",
        )
    finally:
        background.run(sim.stop(), timeout=60)
    wait_until(_settled, timeout=60, interval=0.5, what="events processed and feedback joined")

    # Then the refine outcomes are in the rollups: drafts of the draft_refine cell, and shadow
    # refines of the text cell's device answers (device route, never a cache hit)
    drafts = _cell_sums(fleet, DRAFT_CELL, route="draft_refine")
    shadows = _cell_sums(fleet, SHADOW_CELL, route="device")
    shadow_events = Event.objects.filter(fleet=fleet, shadow_refine=True)
    assert (
        drafts["reported"]
        == Event.objects.filter(
            fleet=fleet, route="draft_refine", refine_changed__isnull=False
        ).count()
    )
    assert drafts["reported"] > 0
    assert shadows["reported"] == shadow_events.filter(refine_changed__isnull=False).count() > 0
    assert set(shadow_events.values_list("route", "cache_hit", "task_type").distinct()) == {
        ("device", False, "text")
    }

    # ... and each late feedback joined its event exactly once: the rollups count one quality
    # per distinct event joined, and resending every item changes nothing
    joined = Feedback.objects.filter(state=FeedbackState.JOINED)
    assert joined.count() == joined.values("event_id").distinct().count() >= AT_LEAST["feedback"]
    assert joined.values("event_id").annotate(n=Count("id")).filter(n__gt=1).count() == 0
    total_quality = MinuteRollup.objects.filter(fleet=fleet).aggregate(n=Sum("quality_count"))
    assert total_quality["n"] == joined.count()
    device_id = joined.values("device_id").annotate(n=Count("id")).order_by("-n")[0]
    resend = list(
        joined.filter(device_id=device_id["device_id"]).values_list("event_id", "quality")
    )
    _, token = device_enroll(fleet_key=fleet_key, device_id=device_id["device_id"])
    answer = httpx.post(
        f"{asgi_server}/api/v1/telemetry/feedback",
        json={"feedback": [{"event_id": str(e), "quality": 1.0 - q} for e, q in resend]},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert answer.status_code == 202, answer.text
    assert answer.json() == {"accepted": 0, "duplicates": len(resend)}
    wait_until(_settled, timeout=30, interval=0.5, what="the resend processed")
    again = MinuteRollup.objects.filter(fleet=fleet).aggregate(n=Sum("quality_count"))
    assert again["n"] == joined.count() == total_quality["n"]

    # ... the dashboard shows the draft-kept rate and mean quality of both cells, and the text
    # cell's device quality (its shadow refines), as the rollups have them
    client = client_as(publisher)
    payload = client.get(f"/api/v1/fleets/{fleet.slug}/dashboard?window=1h").json()
    grid = {
        (c["task_type"], c["latency_budget"], c["privacy_tier"]): c
        for c in payload["grid"]["cells"]
    }
    for cell in (DRAFT_CELL, SHADOW_CELL):
        sums = _cell_sums(fleet, cell)
        shown = grid[cell]
        assert shown["refine_reported"] == sums["reported"] > 0, cell
        assert shown["draft_kept_rate"] == pytest.approx(sums["kept"] / sums["reported"]), cell
        assert shown["quality_count"] == sums["quality"] > 0, cell
        assert shown["mean_quality"] is not None, cell
        assert 0.0 <= shown["mean_quality"] <= 1.0, cell
    text = grid[SHADOW_CELL]
    assert text["device_refine_reported"] == shadows["reported"]
    assert text["device_kept_rate"] == pytest.approx(shadows["kept"] / shadows["reported"])
    assert payload["summary"]["quality_count"] == joined.count()

    # ... and the lab has each cell's curve score → draft kept, over the same reports
    answer = client.post(
        f"/api/v1/fleets/{fleet.slug}/lab/calibrations",
        {
            "target": {"kind": "alpha", "value": 0.7},
            "cells": [_fields(cell) for cell in (DRAFT_CELL, SHADOW_CELL)],
            "hours": 1,
        },
        format="json",
    )
    assert answer.status_code == 200, answer.content
    for out in answer.json()["cells"]:
        cell = (out["task_type"], out["latency_budget"], out["privacy_tier"])
        quality = out["quality"]
        curve = quality["curve"]
        assert curve, cell
        assert quality["reports"] == _cell_sums(fleet, cell)["reported"], cell
        assert sum(point["reported"] for point in curve) == quality["scored_reports"], cell
        assert all(point["low"] <= point["kept_rate"] <= point["high"] for point in curve), cell
