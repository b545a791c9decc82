"""A cycle of the autopilot through the services a person uses (autopilot/services.py):
refused without quality data, a draft, a change request where governance asks, a guarded
rollout with a holdback, predicted against realized, and every stop said."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from autopilot.models import AutopilotCycle, AutopilotObjective
from autopilot.services import autopilot_pause, autopilot_resume, autopilot_tick, objective_set
from controlplane.exceptions import Conflict
from routing_policies.models import (
    AuditEntry,
    ChangeRequest,
    Device,
    PolicyVersion,
    ReviewSettings,
    Rollout,
)
from routing_policies.services import rollout_advance, rollout_complete, rollout_rollback
from telemetry.alerts.models import AlertWebhook, WebhookDelivery
from tests.autopilot_events import (
    IMAGE,
    IMAGE_KEY,
    OBJECTIVE,
    approve_then_tick,
    image_events,
    ingest,
)
from tests.factories import demo_cell, protocol_event, recorded_sample


def test_objective__too_little_quality_data__409_naming_the_cell_and_what_it_needs(
    phone: tuple[Device, Any], fleet: Any, publisher: Any
) -> None:
    # Given a few image events with no reports at all
    cell = demo_cell(IMAGE_KEY)
    ingest(phone[0], [protocol_event(e) for e in recorded_sample(cell, 2000, seed=2)])
    audit = AuditEntry.objects.count()

    # When the autopilot is turned on
    with pytest.raises(Conflict) as refused:
        objective_set(actor=publisher, fleet=fleet, values=OBJECTIVE)

    # Then refused, naming the cell, its reports, the sample it needs and the sampling rate
    assert refused.value.code == "too_little_quality_data"
    (detail,) = refused.value.details
    assert detail["cell"] == IMAGE
    assert detail["reports"] == 0
    assert detail["needed"] == 423  # 1.645² · 0.5 · 0.5 / 0.04²: no reports, p at the floor
    assert "set its shadow_refine_rate to at least" in detail["message"]
    # and nothing stored
    assert not AutopilotObjective.objects.filter(fleet=fleet).exists()
    assert AuditEntry.objects.count() == audit


def test_cycle__no_review__draft_published_and_a_guarded_rollout_with_holdback(
    reported: Device, fleet: Any, publisher: Any
) -> None:
    # Given the autopilot on for the image cell
    objective_set(actor=publisher, fleet=fleet, values=OBJECTIVE)

    # When a cycle runs now
    cycle = autopilot_tick(fleet=fleet, force=True)

    # Then θ moved up by the largest step, published as v2 and rolled out with guards
    assert cycle is not None
    assert cycle.state == AutopilotCycle.State.ROLLING_OUT, cycle.reason
    (row,) = cycle.cells
    assert row["cell"] == IMAGE
    assert row["threshold_from"] == 0.6
    assert row["threshold_to"] == pytest.approx(0.65)
    assert row["predicted"]["alpha"] > row["current"]["alpha"]
    assert row["quality_low"] >= 0.5
    v2 = PolicyVersion.objects.get(fleet=fleet, number=2)
    assert v2.published_by.username == "autopilot"
    rollout = Rollout.objects.get(pk=cycle.rollout)
    assert rollout.candidate_id == v2.pk
    assert rollout.holdback == 10
    assert rollout.guard_set.guards.exists()  # type: ignore[attr-defined]
    actions = list(
        AuditEntry.objects.filter(action__startswith="autopilot.").values_list("action", flat=True)
    )
    assert {
        "autopilot.objective_set",
        "autopilot.draft_written",
        "autopilot.published",
        "autopilot.rollout_started",
    } <= set(actions)
    assert AuditEntry.objects.filter(action="policy_cells.updated", actor_name="autopilot").exists()


def test_cycle__publish_needs_approval__waits_for_a_publisher_then_rolls_out(
    reported: Device, fleet: Any, publisher: Any, make_user: Any, client_as: Any
) -> None:
    ReviewSettings.objects.create(fleet=fleet, publish_needs_approval=True)
    objective_set(actor=publisher, fleet=fleet, values=OBJECTIVE)

    # When a cycle runs: the request waits
    cycle = autopilot_tick(fleet=fleet, force=True)
    assert cycle is not None
    assert cycle.state == AutopilotCycle.State.AWAITING_APPROVAL
    request = ChangeRequest.objects.get(pk=cycle.change_request)
    assert request.author_name == "autopilot"
    assert autopilot_tick(fleet=fleet).state == AutopilotCycle.State.AWAITING_APPROVAL  # type: ignore[union-attr]
    assert not PolicyVersion.objects.filter(fleet=fleet, number=2).exists()

    # When a publisher approves it (the page's API)
    cycle = approve_then_tick(client_as(publisher), fleet, request)

    # Then the next tick publishes through the request and starts the rollout
    assert cycle is not None
    assert cycle.state == AutopilotCycle.State.ROLLING_OUT, cycle.reason
    request.refresh_from_db()
    assert request.state == ChangeRequest.State.DONE


def test_cycle__guard_rolled_back__autopilot_stops_audited_and_webhooked(
    reported: Device, fleet: Any, publisher: Any
) -> None:
    AlertWebhook.objects.create(fleet=fleet, url="https://hooks.example.com/x", format="json")
    objective_set(actor=publisher, fleet=fleet, values=OBJECTIVE)
    cycle = autopilot_tick(fleet=fleet, force=True)
    assert cycle is not None

    # When the guards roll it back (an automatic rollback: the fleet freezes)
    rollout_rollback(actor=None, fleet=fleet, reason="Guard fired: quality", automatic=True)
    autopilot_tick(fleet=fleet)

    # Then the autopilot stopped, says why, and waits for a person
    objective = AutopilotObjective.objects.get(fleet=fleet)
    assert objective.state == AutopilotObjective.State.STOPPED
    assert "frozen" in objective.state_reason or "rolled back" in objective.state_reason
    cycle.refresh_from_db()
    assert cycle.state == AutopilotCycle.State.STOPPED
    assert AuditEntry.objects.filter(action="autopilot.stopped").exists()
    payloads = [d.payload for d in WebhookDelivery.objects.filter(fleet=fleet)]
    assert any("autopilot.stopped" in json.dumps(p) for p in payloads)
    assert autopilot_tick(fleet=fleet, force=True) is None  # waits for a person


def test_cycle__realized_far_from_predicted__stops(
    reported: Device, fleet: Any, publisher: Any
) -> None:
    objective_set(actor=publisher, fleet=fleet, values=OBJECTIVE)
    cycle = autopilot_tick(fleet=fleet, force=True)
    assert cycle is not None
    rollout_advance(actor=publisher, fleet=fleet, to_stage=100)
    rollout_complete(actor=publisher, fleet=fleet)
    assert autopilot_tick(fleet=fleet).state == AutopilotCycle.State.MEASURING  # type: ignore[union-attr]

    # When v2's events come in with every task in the cloud (α 0, far from the prediction)
    ingest(reported, image_events(400, seed=8, version=2, now=True, mode="cloud_only"))
    later = timezone.now() + timedelta(minutes=31)
    autopilot_tick(fleet=fleet, now=later)

    # Then the miss is named per cell and the autopilot stopped
    cycle.refresh_from_db()
    assert cycle.state == AutopilotCycle.State.STOPPED, (
        cycle.cells[0]["realized"],
        cycle.cells[0].get("unchecked"),
    )
    (row,) = cycle.cells
    assert row["realized"]["alpha"] == 0.0
    assert any(m.startswith("α") for m in row["misses"])
    objective = AutopilotObjective.objects.get(fleet=fleet)
    assert objective.state == AutopilotObjective.State.STOPPED
    assert "prediction missed" in objective.state_reason


def test_cycle__realized_as_predicted__completed(
    reported: Device, fleet: Any, publisher: Any
) -> None:
    objective_set(actor=publisher, fleet=fleet, values=OBJECTIVE)
    cycle = autopilot_tick(fleet=fleet, force=True)
    assert cycle is not None
    rollout_advance(actor=publisher, fleet=fleet, to_stage=100)
    rollout_complete(actor=publisher, fleet=fleet)
    autopilot_tick(fleet=fleet)
    # v2's own events: the new θ on the same kind of traffic
    ingest(reported, image_events(3000, seed=12, version=2, now=True, threshold=0.65))
    autopilot_tick(fleet=fleet, now=timezone.now() + timedelta(minutes=31))
    cycle.refresh_from_db()
    assert cycle.state == AutopilotCycle.State.COMPLETED, cycle.cells[0]["misses"]
    assert cycle.cells[0]["realized"]["events"] == 3000


def test_pause_resume__audited__no_cycle_while_paused(
    reported: Device, fleet: Any, publisher: Any
) -> None:
    objective_set(actor=publisher, fleet=fleet, values=OBJECTIVE)
    autopilot_pause(actor=publisher, fleet=fleet)
    assert autopilot_tick(fleet=fleet, force=True) is None
    autopilot_resume(actor=publisher, fleet=fleet)
    assert autopilot_tick(fleet=fleet, force=True) is not None
    actions = set(AuditEntry.objects.values_list("action", flat=True))
    assert {"autopilot.paused", "autopilot.resumed"} <= actions


def test_cycle__a_person_s_draft_open__skipped_untouched(
    reported: Device, fleet: Any, publisher: Any
) -> None:
    from routing_policies.services import policy_draft_create

    objective_set(actor=publisher, fleet=fleet, values=OBJECTIVE)
    draft = policy_draft_create(actor=publisher, fleet=fleet)
    cycle = autopilot_tick(fleet=fleet, force=True)
    assert cycle is not None
    assert cycle.state == AutopilotCycle.State.NO_CHANGE
    assert "draft is open" in cycle.reason
    draft.refresh_from_db()
    assert draft.revision == 1


def test_cycle__excluded_cell__never_touched(reported: Device, fleet: Any, publisher: Any) -> None:
    # Given the autopilot on for the image cell, which a publisher then says it may not touch
    objective_set(actor=publisher, fleet=fleet, values=OBJECTIVE)
    objective_set(actor=publisher, fleet=fleet, values={"excluded_cells": [IMAGE]})

    # When a cycle runs
    cycle = autopilot_tick(fleet=fleet, force=True)

    # Then the cell is neither calibrated nor moved: no draft, no new version
    assert cycle is not None
    assert cycle.state == AutopilotCycle.State.NO_CHANGE, cycle.reason
    assert cycle.cells == []
    assert cycle.draft_revision is None
    assert not PolicyVersion.objects.filter(fleet=fleet, number=2).exists()


def test_cycle__inside_a_quiet_period__409_naming_it_no_cycle(
    reported: Device, fleet: Any, publisher: Any, client_as: Any
) -> None:
    now = timezone.now()
    around_now = {
        "from": (now - timedelta(hours=1)).strftime("%H:%M"),
        "to": (now + timedelta(hours=1)).strftime("%H:%M"),
    }
    objective_set(actor=publisher, fleet=fleet, values={**OBJECTIVE, "quiet_periods": [around_now]})
    objective = AutopilotObjective.objects.get(fleet=fleet)
    assert objective.next_run_at is not None
    assert objective.next_run_at >= now + timedelta(minutes=59)  # not inside the period

    # When a publisher asks for a cycle now
    response = client_as(publisher).post(f"/api/v1/fleets/{fleet.slug}/autopilot/run")

    # Then refused naming the quiet periods, and no cycle
    assert response.status_code == 409, response.content
    error = response.json()["error"]
    assert error["code"] == "quiet_period"
    assert [d["field"] for d in error["details"]] == ["quiet_periods"]
    assert not AutopilotCycle.objects.filter(fleet=fleet).exists()


def _cost_row(label: str, now: float, predicted: float, theta_to: float | None) -> dict[str, Any]:
    return {
        "cell": label,
        "threshold_from": 0.5,
        "threshold_to": theta_to,
        "reason": "proposed",
        "current": {"cost_per_day": now},
        "predicted": {"cost_per_day": predicted},
    }


@pytest.mark.parametrize(
    ("ceiling", "kept"),
    [
        (None, [IMAGE, "text/interactive/normal"]),  # no ceiling: every move
        (20.0, [IMAGE, "text/interactive/normal"]),  # 8 + 9 a day: under it
        (15.0, [IMAGE]),  # over it: the move that raises a cell's cost is held
    ],
)
def test_cost_ceiling__over_it__only_moves_that_do_not_raise_cost_kept(
    ceiling: float | None, kept: list[str]
) -> None:
    from autopilot.services import _within_cost_ceiling, cell_key_of

    # Given one cell whose move cuts its cost (10 → 8) and one whose move raises it (5 → 9)
    rows = [
        _cost_row(IMAGE, 10.0, 8.0, 0.55),
        _cost_row("text/interactive/normal", 5.0, 9.0, 0.45),
    ]
    moves = [(cell_key_of(IMAGE), 0.55), (cell_key_of("text/interactive/normal"), 0.45)]

    # When the objective's ceiling is applied
    objective = AutopilotObjective(cost_ceiling_per_day=ceiling)
    out = _within_cost_ceiling(objective, rows, moves)

    # Then only the moves it allows are kept, and a held cell says why
    assert ["/".join(key) for key, _ in out] == kept
    held = [row for row in rows if row["cell"] not in kept]
    for row in held:
        assert row["threshold_to"] is None
        assert "held: the cells' cost 17.00/day is over the 15.00 ceiling" in row["reason"]
