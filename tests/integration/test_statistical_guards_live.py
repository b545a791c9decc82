"""Statistical guards on a real fleet: the simulator's SDK devices against a real ASGI server,
a real Celery worker with beat, PostgreSQL and Redis. The buggy candidate rolls back on its
own on a per-cell confidence sequence; a healthy candidate advances on its own.
"""

from typing import Any

import pytest

from routing_policies.models import AuditEntry, Rollout
from telemetry.alerts.models import AlertEvent
from telemetry.alerts.selectors import guard_status
from telemetry.alerts.services import rollout_start_guarded
from tests.live_server import asgi_server

from .simulated import buggy_candidate_fleet
from .test_alerts_simulated import (
    CONNECT_TIMEOUT_S,
    DEVICES,
    GUARDS_TIMEOUT_S,
    RATE,
    _all_on,
    _guards_read,
    worker,
)
from .test_telemetry_durability import Worker
from .ws_clients import BackgroundLoop, wait_until

__all__ = ["asgi_server", "worker"]

pytestmark = pytest.mark.integration

CLOUD_SHARE_PER_CELL = {
    "kind": "sequential",
    "metric": "cloud_share",
    "tolerance": 0.05,
    "confidence": 0.95,
    "per_cell": True,
    "min_samples": 30,
}


def _run(
    *,
    fleet: Any,
    fleet_key: str,
    publisher: Any,
    background: BackgroundLoop,
    asgi_server: str,
    buggy_version: int,
    guards: list[dict[str, Any]],
    until: Any,
    what: str,
) -> Rollout:
    sim = buggy_candidate_fleet(
        base_url=asgi_server,
        fleet_key=fleet_key,
        devices=DEVICES,
        rate=RATE,
        buggy_version=buggy_version,
    )
    background.run(sim.start())
    try:
        wait_until(lambda: _all_on(sim, 1), timeout=CONNECT_TIMEOUT_S, interval=0.2, what="v1")
        rollout = rollout_start_guarded(
            actor=publisher,
            fleet=fleet,
            version=2,
            guard_options={"guards": guards, "bake_minutes": 0, "auto_advance": True},
        )
        try:
            wait_until(
                lambda: until(Rollout.objects.get(pk=rollout.pk)),
                timeout=GUARDS_TIMEOUT_S,
                interval=0.5,
                what=what,
            )
        except AssertionError as failure:
            raise AssertionError(f"{failure}; {_guards_read(rollout)}") from None
    finally:
        background.run(sim.stop(), timeout=60)
    rollout.refresh_from_db()
    return rollout


def test_statistical_guard__buggy_candidate_on_a_real_fleet__rolled_back_on_a_cells_interval(
    asgi_server: str,
    worker: Worker,
    background: BackgroundLoop,
    fleet: Any,
    fleet_key: str,
    publish_version: Any,
    publisher: Any,
) -> None:
    # Given a real fleet on v1 and v2 published, whose devices use the doubting model
    publish_version(fleet, threshold=0.7)

    # When v2 is rolled out at 5% with one per-cell statistical guard on the cloud share
    rollout = _run(
        fleet=fleet,
        fleet_key=fleet_key,
        publisher=publisher,
        background=background,
        asgi_server=asgi_server,
        buggy_version=2,
        guards=[CLOUD_SHARE_PER_CELL],
        until=lambda r: r.state == Rollout.State.ROLLED_BACK,
        what="the statistical guard to roll the buggy candidate back",
    )

    # Then it rolled back with no one clicking, its interval wholly beyond +5 pts, and says so
    assert rollout.reason.startswith("Guard fired: cloud share ")
    assert "wholly beyond the tolerated +5.0 pts" in rollout.reason
    audit = AuditEntry.objects.get(action="rollout.rolled_back", fleet=fleet, actor=None)
    assert "95% interval" in audit.summary
    status = guard_status(rollout_id=rollout.pk)
    assert status is not None
    guard = status["guards"][0]
    assert guard["state"] == "regressed"
    assert guard["lower"] > 0.05
    assert guard["series"][-1]["state"] == "regressed"


def test_statistical_guard__healthy_candidate_on_a_real_fleet__advances_on_its_own(
    asgi_server: str,
    worker: Worker,
    background: BackgroundLoop,
    fleet: Any,
    fleet_key: str,
    publish_version: Any,
    publisher: Any,
) -> None:
    # Given a real fleet on v1 and v2 published that behaves as v1 does (no buggy version)
    publish_version(fleet, threshold=0.66)

    # When v2 is rolled out with a statistical cloud-share guard tolerating 20 pts
    rollout = _run(
        fleet=fleet,
        fleet_key=fleet_key,
        publisher=publisher,
        background=background,
        asgi_server=asgi_server,
        buggy_version=99,
        guards=[{**CLOUD_SHARE_PER_CELL, "tolerance": 0.2}],
        until=lambda r: r.stage >= 25 or not r.is_open,
        what="the healthy candidate to advance",
    )

    # Then its interval came wholly within the tolerance and it moved on (with no bake, it
    # may already have gone on to 100% and completed: nothing is left to compare there)
    assert rollout.state in (Rollout.State.ACTIVE, Rollout.State.COMPLETED), rollout.reason
    advanced = AlertEvent.objects.get(rollout=rollout, kind="advanced", state_before="5")
    assert advanced.message.startswith("Advanced v2 to 25%: guards quiet")
