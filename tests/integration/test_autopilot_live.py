"""The θ autopilot end to end through the real services (issue 27): PostgreSQL, Redis and a
real Celery worker whose beat ticks the autopilot (`autopilot.tick_all`, every second here).

A one-cell fleet of the simulator's devices on its virtual clock (quality_fleet.py: the SDK's
own routing, refines and shadow refines; their telemetry through the real ingest into rollups)
reports on v1. Its autopilot is turned on; when its cadence comes due the worker's beat runs a
cycle: the lab calibrates the cell on the fleet's own events, the autopilot writes the draft
(calibration_apply) and, as the fleet's governance asks, opens a change request and waits; a
second publisher approves it; the worker's next tick publishes through the request and starts a
rollout guarded by the quality preset with a holdback. The test then does what the guards do
after their bake (advance to 100%) and gives the candidate cohort v2 as a push would; the
devices run on it; a publisher completes the rollout; the worker's next tick compares predicted
with realized per cell. In the second test (no review asked) the candidate cohort runs another
document than the one predicted (its θ far lower), the realized α misses, and the autopilot
stops: its state, the audit log and a webhook say why.

The alert round (which would judge the guards) is slowed to once an hour in the worker, so the
guards' own verdicts (tested in test_quality_guard_simulated.py) do not race the scenario. The
guards do not advance this rollout themselves within the test's time: the quality preset
tolerates a draft-kept rate 3 pts below stable, and the 5% stage's ~900 shadow-refined reports
in 10 simulated minutes leave the candidate's interval ±6 pts wide (inconclusive; measured).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone

from autopilot.models import AutopilotCycle, AutopilotObjective
from autopilot.services import autopilot_pause, autopilot_resume, objective_set
from controlplane.roles import Role
from routing_policies.models import (
    AuditEntry,
    ChangeRequest,
    PolicyVersion,
    ReviewSettings,
    Rollout,
)
from routing_policies.reviews.services import change_request_approve
from routing_policies.segments.rules import device_attributes, rule_matches
from routing_policies.segments.services import segment_create
from routing_policies.selectors import fleet_assignment
from routing_policies.services import rollout_advance, rollout_complete
from telemetry.alerts.models import AlertWebhook, WebhookDelivery
from tests.factories import UserFactory
from tests.integration.test_telemetry_durability import Worker
from tests.live_server import empty_test_redis

from .quality_fleet import (
    CELL,
    VirtualRun,
    document_of,
    fleet_config,
    one_cell_fleet,
    rollout_backdated,
)

pytestmark = pytest.mark.integration

LABEL = "/".join(CELL)
STEP_S = 30
STABLE_S = 300
CANDIDATE_S = 600
STABLE_VALUES = {"mode": "draft_refine", "threshold": 0.3, "shadow_refine_rate": 0.05}
OBJECTIVE = {
    "enabled": True,
    "cells": [LABEL],
    "quality_floor": 0.5,
    # The cell's interactive budget (1,000 ms) is below what its draft-refines take on these
    # links at any θ; the budget's own handling is unit-tested (tests/unit/autopilot).
    "p95_within_budget": False,
    "quality_resolution": 0.03,
    "max_step": 0.05,
    "window_hours": 1,
    "measure_minutes": 0,
    "bake_minutes": 1,
    "holdback": 10,
}
# The fleet's phones (the head units and speakers are outside).
PHONES = {"attribute": "platform", "equals": "android"}


@pytest.fixture
def worker() -> Iterator[Worker]:
    empty_test_redis()
    env = {
        "TELEMETRY_RATE_LIMIT_BATCHES": "0",
        "AUTOPILOT_TICK_INTERVAL_S": "1",
        "ALERT_EVALUATE_INTERVAL_S": "3600",
    }
    with Worker(env) as started:
        yield started


def _wait(what: str, check: Callable[[], Any], worker: Worker, timeout_s: float = 180) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}\n{worker.output()[-4000:]}")


def _cycle_in(fleet: Any, *states: str) -> Callable[[], AutopilotCycle | None]:
    return lambda: AutopilotCycle.objects.filter(fleet=fleet, state__in=states).first()


def _fleet_reporting(
    slug: str, *, segment: dict[str, Any] | None = None
) -> tuple[Any, Any, VirtualRun]:
    """A one-cell fleet reporting v1 (with `segment`: its segment `phones` of that rule,
    created before the devices report, so its rollup rows hold every event)."""
    publisher: Any = UserFactory(role=Role.PUBLISHER, username=f"pub-{slug}")
    fleet = one_cell_fleet(actor=publisher, slug=slug, values=STABLE_VALUES)
    if segment is not None:
        with transaction.atomic():
            segment_create(actor=publisher, fleet=fleet, name="phones", rule=segment)
    run = VirtualRun(
        fleet=fleet,
        actor=publisher,
        config=fleet_config(rate=200.0, feedback_share=0.0),
        document=document_of(fleet, 1),
        seconds=STABLE_S + CANDIDATE_S,
    )
    for _ in range(STABLE_S // STEP_S):
        run.step(STEP_S)
    return publisher, fleet, run


def _cycle_to(
    fleet: Any, publisher: Any, worker: Worker, state: str, *, objective: Any = OBJECTIVE
) -> AutopilotCycle:
    """Turn the autopilot on and let its cadence come due: the worker's beat runs the cycle
    (to `state`, or to where it ended)."""
    objective_set(actor=publisher, fleet=fleet, values=objective)
    AutopilotObjective.objects.filter(fleet=fleet).update(
        next_run_at=timezone.now() - timedelta(seconds=1)
    )
    return _wait(
        f"the worker's cycle to reach {state}",
        _cycle_in(fleet, state, "stopped", "no_change"),
        worker,
    )


def _completed(done: AutopilotCycle) -> tuple[dict[str, Any], str]:
    """The checked cycle's one cell and what it says (printed), the cycle completed."""
    (row,) = done.cells
    summary = (
        f"{done.state}: {done.reason}; predicted {row['predicted']}, realized {row['realized']}"
    )
    print(f"\n{summary}")
    assert done.state == "completed", summary
    return row, summary


def _run_candidate(run: VirtualRun, fleet: Any, publisher: Any, document: dict[str, Any]) -> None:
    """What the guards do after the bake (to 100%), the push (v2 to the candidate cohort), the
    devices on it, and a publisher's completion, the rollout dated on the virtual clock."""
    rollout = rollout_advance(actor=publisher, fleet=fleet, to_stage=100)
    rollout_backdated(rollout, run.now(), stage_only=True)
    assignment = fleet_assignment(fleet.pk)
    run.apply(document, [d for d in run.devices if assignment.in_candidate_cohort(d)])
    for _ in range(CANDIDATE_S // STEP_S):
        run.step(STEP_S)
    with transaction.atomic():
        rollout_complete(actor=publisher, fleet=fleet)


def test_autopilot__live_worker__cycle_end_to_end_prediction_checked(
    transactional_db: None, requires_postgres: None, worker: Worker
) -> None:
    publisher, fleet, run = _fleet_reporting("ap-live")
    reviewer: Any = UserFactory(role=Role.PUBLISHER, username="reviewer-ap-live")
    ReviewSettings.objects.create(fleet=fleet, publish_needs_approval=True)
    try:
        # When the cadence comes due, the worker's beat runs a cycle: a draft and a request
        cycle = _cycle_to(fleet, publisher, worker, "awaiting_approval")
        assert cycle.state == "awaiting_approval", (cycle.reason, cycle.cells)
        (row,) = cycle.cells
        assert row["threshold_to"] > row["threshold_from"] == 0.3
        request = ChangeRequest.objects.get(pk=cycle.change_request)
        assert request.author_name == "autopilot"
        assert not PolicyVersion.objects.filter(fleet=fleet, number=2).exists()

        # and when a publisher approves it, the worker's next tick publishes through it and
        # starts the guarded rollout with its holdback
        with transaction.atomic():
            change_request_approve(
                actor=reviewer,
                fleet=fleet,
                request_id=request.pk,
                revision=request.version.revision,  # type: ignore[union-attr]
            )
        cycle = _wait("the rollout", _cycle_in(fleet, "rolling_out", "stopped"), worker)
        assert cycle.state == "rolling_out", cycle.reason
        v2 = PolicyVersion.objects.get(fleet=fleet, number=2)
        assert v2.published_by.username == "autopilot"
        rollout = Rollout.objects.get(pk=cycle.rollout)
        assert rollout.holdback == 10
        assert rollout.guard_set.guards.exists()  # type: ignore[attr-defined]

        # and once the candidate ran it and the rollout completed
        _run_candidate(run, fleet, publisher, document_of(fleet, 2))
        done = _wait("the check", _cycle_in(fleet, "completed", "stopped"), worker)
    finally:
        run.close()

    # Then predicted and realized agree within the tolerance, and every step is audited
    row, summary = _completed(done)
    assert row["realized"]["events"] > 1000, summary
    assert abs(row["realized"]["alpha"] - row["predicted"]["alpha"]) <= 0.05, summary
    request.refresh_from_db()
    assert request.state == ChangeRequest.State.DONE
    rollout.refresh_from_db()
    assert rollout.state == Rollout.State.COMPLETED
    actions = set(AuditEntry.objects.filter(fleet=fleet).values_list("action", flat=True))
    assert {
        "autopilot.objective_set",
        "autopilot.draft_written",
        "autopilot.change_request_opened",
        "autopilot.published",
        "autopilot.rollout_started",
        "autopilot.rollout_completed",
        "autopilot.cycle_completed",
    } <= actions


def test_autopilot__live_worker__prediction_missed__stops_and_says_why(
    transactional_db: None, requires_postgres: None, worker: Worker
) -> None:
    publisher, fleet, run = _fleet_reporting("ap-miss")
    AlertWebhook.objects.create(fleet=fleet, url="https://hooks.example.com/ap", format="json")
    try:
        cycle = _cycle_to(fleet, publisher, worker, "rolling_out")
        assert cycle.state == "rolling_out", (cycle.reason, cycle.cells)
        # When the candidate cohort runs a θ far from the one predicted (labelled v2)
        wrong = document_of(fleet, 2)
        cell = next(iter(wrong["cells"]))
        cell["threshold"] = 0.02
        _run_candidate(run, fleet, publisher, wrong)
        stopped = _wait("the stop", _cycle_in(fleet, "stopped", "completed"), worker)
    finally:
        run.close()

    # Then the autopilot stopped, naming the miss, audited and sent to the fleet's webhook
    assert stopped.state == "stopped", stopped.cells
    assert "prediction missed" in stopped.reason
    misses = stopped.cells[0]["misses"]
    print(f"\nstopped: {stopped.reason}")
    assert misses, stopped.cells
    assert any(m.startswith(("α", "cloud share")) for m in misses), misses
    objective = AutopilotObjective.objects.get(fleet=fleet)
    assert objective.state == "stopped"
    assert AuditEntry.objects.filter(fleet=fleet, action="autopilot.stopped").exists()
    assert any(
        d.payload.get("kind") == "autopilot.stopped" or "autopilot.stopped" in str(d.payload)
        for d in WebhookDelivery.objects.filter(fleet=fleet)
    )


def test_autopilot__live_worker__segment_cycle_moves_its_override_and_checks_its_rows(
    transactional_db: None, requires_postgres: None, worker: Worker
) -> None:
    # Given the fleet's phones as segment `phones` (platform android: the head units and
    # speakers are outside it), all reporting v1
    publisher, fleet, run = _fleet_reporting("ap-seg", segment=PHONES)
    phones = {
        d.device_id
        for d in run.devices.values()
        if rule_matches(
            PHONES, device_attributes(platform=d.platform, model=d.model, reported=d.attributes)
        )
    }
    assert 0 < len(phones) < len(run.devices)
    try:
        # When the autopilot, scoped to the segment, runs a cycle in the worker
        objective = {**OBJECTIVE, "segment": "phones"}
        cycle = _cycle_to(fleet, publisher, worker, "rolling_out", objective=objective)
        assert cycle.state == "rolling_out", (cycle.reason, cycle.cells)
        assert cycle.segment == "phones"
        (row,) = cycle.cells
        # Then v2 moves θ in its override for the segment, its base cell as v1's
        v2 = PolicyVersion.objects.get(fleet=fleet, number=2)
        (override,) = v2.overrides
        assert override["segment"] == "phones"
        assert override["cells"][LABEL]["threshold"] == row["threshold_to"] > 0.3
        assert document_of(fleet, 2)["cells"] == document_of(fleet, 1)["cells"]
        rollout = Rollout.objects.get(pk=cycle.rollout)
        assert rollout.segment_name == "phones"

        # and when it reaches 100% of the segment and the segment's candidates run v2 (the
        # autopilot paused meanwhile, as the bake would hold it on a real clock)
        autopilot_pause(actor=publisher, fleet=fleet)
        rollout = rollout_advance(actor=publisher, fleet=fleet, to_stage=100)
        rollout_backdated(rollout, run.now(), stage_only=True)
        assignment = fleet_assignment(fleet.pk)
        cohort = [d for d in phones if assignment.in_candidate_cohort(d, {"platform": "android"})]
        assert cohort
        run.apply(document_of(fleet, 2), cohort)
        for _ in range(CANDIDATE_S // STEP_S):
            run.step(STEP_S)
        autopilot_resume(actor=publisher, fleet=fleet)
        done = _wait("the check", _cycle_in(fleet, "completed", "stopped"), worker)
    finally:
        run.close()

    # Then the realized figures are the segment's rows of v2 (its candidates' events alone)
    row, summary = _completed(done)
    cohort_events = sum(
        1 for e in run.events if e["policy_version"] == 2 and e["device_id"] in phones
    )
    assert row["realized"]["events"] == cohort_events, summary
    assert abs(row["realized"]["alpha"] - row["predicted"]["alpha"]) <= 0.05, summary
    # and the autopilot completed the segment's rollout fleet-wide: v2 stable
    rollout.refresh_from_db()
    assert rollout.state == Rollout.State.COMPLETED
    assert AuditEntry.objects.filter(
        fleet=fleet, action="autopilot.segment_rollout_completed"
    ).exists()
