"""An autopilot objective for one segment (docs/lab.md, "The autopilot", "Per segment"): the
cycle calibrates on the segment's events, moves θ in the draft's override for the segment (the
base cells untouched), rolls out to the segment alone and measures the segment's rows; an
unknown segment, another fleet's, or a malformed name is a 400 naming `segment`, nothing stored.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from autopilot.models import AutopilotCycle, AutopilotObjective
from autopilot.services import autopilot_tick, objective_set
from controlplane.exceptions import Conflict, ValidationFailed
from routing_policies.devices.services import device_enroll
from routing_policies.models import (
    AuditEntry,
    ChangeRequest,
    Device,
    Fleet,
    PolicyVersion,
    ReviewSettings,
    Rollout,
)
from routing_policies.segments.services import segment_create
from routing_policies.selectors import version_table
from routing_policies.services import rollout_advance, rollout_rollback
from tests.autopilot_events import IMAGE, OBJECTIVE, approve_then_tick, image_events, ingest
from tests.factories import make_fleet

BASE = "/api/v1/fleets/fleet-a/autopilot"
PAGE = "/fleets/fleet-a/lab/autopilot/"
PAGE_SET = f"{PAGE}objective/"
Client = Callable[[Any], APIClient]
NPU = {"attribute": "accelerator", "equals": "npu"}


@pytest.fixture
def npu_phone(fleet: Fleet, fleet_key: str, publisher: Any) -> Device:
    """Segment `npu` of the fleet and its one phone, whose image events carry the reports."""
    segment_create(actor=publisher, fleet=fleet, name="npu", rule=NPU)
    device, _ = device_enroll(
        fleet_key=fleet_key,
        device_id="npu-1",
        platform="android",
        attributes={"accelerator": "npu"},
    )
    ingest(device, _of(device, image_events(3000, seed=4)))
    return device


def _of(device: Device, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events as `device` sends them (image_events are phone-1's)."""
    return [{**event, "device_id": device.device_id} for event in events]


def _segment_cycle(fleet: Fleet, publisher: Any) -> AutopilotCycle:
    """The autopilot turned on for the image cell of segment npu, and a cycle run now."""
    objective_set(actor=publisher, fleet=fleet, values={**OBJECTIVE, "segment": "npu"})
    cycle = autopilot_tick(fleet=fleet, force=True)
    assert cycle is not None
    return cycle


def _state() -> tuple[Any, ...]:
    return (
        AuditEntry.objects.count(),
        list(AutopilotObjective.objects.values()),
        AutopilotCycle.objects.count(),
        PolicyVersion.objects.count(),
    )


def test_cycle__segment__moves_its_override_only_and_rolls_out_to_it(
    npu_phone: Device, fleet: Fleet, publisher: Any
) -> None:
    # Given the autopilot on for the image cell of segment npu (whose phone has the reports)
    # When a cycle runs now
    cycle = _segment_cycle(fleet, publisher)

    # Then it is the segment's cycle: θ moved up by the largest step
    assert cycle.state == AutopilotCycle.State.ROLLING_OUT, cycle.reason
    assert cycle.segment == "npu"
    (row,) = cycle.cells
    assert row["cell"] == IMAGE
    assert row["threshold_from"] == 0.6
    assert row["threshold_to"] == pytest.approx(0.65)
    assert row["quality_low"] >= 0.5
    # in v2's override for npu, while v2's base image cell keeps v1's θ
    v1 = PolicyVersion.objects.get(fleet=fleet, number=1)
    v2 = PolicyVersion.objects.get(fleet=fleet, number=2)
    (override,) = v2.overrides
    assert override["segment"] == "npu"
    assert override["cells"][IMAGE]["threshold"] == pytest.approx(0.65)
    assert version_table(version=v2) == version_table(version=v1)
    assert v2.published_by.username == "autopilot"
    # rolled out to the segment alone, guarded, with the holdback
    rollout = Rollout.objects.get(pk=cycle.rollout)
    assert rollout.candidate_id == v2.pk
    assert rollout.segment_name == "npu"
    assert rollout.holdback == 10
    assert rollout.guard_set.guards.exists()  # type: ignore[attr-defined]
    # and the audit log says which segment
    written = AuditEntry.objects.get(action="autopilot.draft_written")
    assert "segment npu" in written.summary
    started = AuditEntry.objects.get(action="autopilot.rollout_started")
    assert started.after["segment"] == "npu"
    assert "to segment npu" in cycle.reason


def test_cycle__segment__checked_on_its_rows_then_its_rollout_completed(
    npu_phone: Device, phone: tuple[Device, Any], fleet: Fleet, publisher: Any
) -> None:
    # Given a segment cycle whose rollout reached 100% of the segment
    cycle = _segment_cycle(fleet, publisher)
    rollout = rollout_advance(actor=publisher, fleet=fleet, to_stage=100)
    # it stays open at 100% of the segment until it has baked there
    assert autopilot_tick(fleet=fleet).state == AutopilotCycle.State.ROLLING_OUT  # type: ignore[union-attr]
    baked = rollout.stage_changed_at + timedelta(minutes=30)
    measuring = autopilot_tick(fleet=fleet, now=baked)
    assert measuring is not None
    assert measuring.state == AutopilotCycle.State.MEASURING, measuring.reason
    assert "100% of segment npu" in measuring.reason
    rollout.refresh_from_db()
    assert rollout.state == Rollout.State.ACTIVE
    # and v2's events: 3,000 from the segment's phone, 900 from a phone outside it (cloud only)
    ingest(
        npu_phone,
        _of(npu_phone, image_events(3000, seed=12, version=2, now=True, threshold=0.65)),
    )
    ingest(phone[0], image_events(900, seed=8, version=2, now=True, mode="cloud_only"))

    # When the measuring window has passed
    later = baked + timedelta(minutes=OBJECTIVE["measure_minutes"] + 1)
    cycle = autopilot_tick(fleet=fleet, now=later)

    # Then the realized figures are the segment's own (its phone's 3,000 events, not 3,900),
    # within the tolerance of the prediction
    assert cycle is not None
    (row,) = cycle.cells
    assert row["realized"]["events"] == 3000, row
    assert cycle.state == AutopilotCycle.State.COMPLETED, row["misses"]
    # and the autopilot completed the segment's rollout (confirmed fleet-wide): v2 is stable,
    # the segment keeps its θ in the override and every other device v1's base cells
    rollout.refresh_from_db()
    assert rollout.state == Rollout.State.COMPLETED
    fleet.routing.refresh_from_db()  # type: ignore[attr-defined]
    assert fleet.routing.stable_version.number == 2  # type: ignore[attr-defined]
    entry = AuditEntry.objects.get(action="autopilot.segment_rollout_completed")
    assert entry.after["segment"] == "npu"


def test_cycle__segment__rolled_back_while_measuring__stops(
    npu_phone: Device, fleet: Fleet, publisher: Any
) -> None:
    cycle = _segment_cycle(fleet, publisher)
    rollout = rollout_advance(actor=publisher, fleet=fleet, to_stage=100)
    autopilot_tick(fleet=fleet, now=rollout.stage_changed_at + timedelta(minutes=30))

    # When a person rolls the segment's rollout back during the check
    rollout_rollback(actor=publisher, fleet=fleet, reason="looks wrong")
    autopilot_tick(fleet=fleet)

    # Then the autopilot stopped, saying why
    objective = AutopilotObjective.objects.get(fleet=fleet)
    assert objective.state == AutopilotObjective.State.STOPPED
    assert "rolled back: looks wrong" in objective.state_reason
    cycle.refresh_from_db()
    assert cycle.state == AutopilotCycle.State.STOPPED


def test_objective__segment_shown_in_the_api_and_the_page(
    npu_phone: Device, fleet: Fleet, publisher: Any, client_as: Client, client: Any
) -> None:
    api = client_as(publisher)
    set_ = api.put(BASE, {**OBJECTIVE, "segment": "npu"}, format="json")
    assert set_.status_code == 200, set_.content
    assert set_.json()["objective"]["segment"] == "npu"
    run = api.post(f"{BASE}/run", format="json")
    (cycle,) = run.json()["cycles"]
    assert cycle["segment"] == "npu"
    assert api.get(f"{BASE}/cycles/1").json()["segment"] == "npu"

    client.force_login(publisher)
    html = client.get(PAGE).content.decode()
    assert 'data-field="segment">npu<' in html
    assert 'data-field="cycle-segment">segment npu<' in html
    assert '<option value="npu" selected>' in html

    # and back to the whole fleet: null clears it
    cleared = api.put(BASE, {"segment": None}, format="json")
    assert cleared.json()["objective"]["segment"] is None
    assert AutopilotObjective.objects.get(fleet=fleet).segment == ""


def test_page__sets_the_segment_and_blank_is_the_whole_fleet(
    npu_phone: Device, fleet: Fleet, publisher: Any, client: Any
) -> None:
    client.force_login(publisher)
    saved = client.post(PAGE_SET, {"segment": "npu"})
    assert saved.status_code == 302, saved.content
    assert AutopilotObjective.objects.get(fleet=fleet).segment == "npu"
    cleared = client.post(PAGE_SET, {"segment": ""})
    assert cleared.status_code == 302
    assert AutopilotObjective.objects.get(fleet=fleet).segment == ""


@pytest.mark.parametrize(
    "segment",
    [
        "gpu",  # the fleet has no such segment
        "other-npu",  # another fleet's segment
        "NPU",  # not a segment name
        "npu\u0000",
        "n" * 65,
        7,
        ["npu"],
        {"name": "npu"},
        True,
    ],
)
def test_put__bad_segment__400_naming_segment_nothing_stored(
    npu_phone: Device,
    fleet: Fleet,
    publisher: Any,
    client_as: Client,
    make_user: Any,
    segment: Any,
) -> None:
    other = make_fleet(slug="fleet-b", actor=publisher)
    segment_create(actor=publisher, fleet=other, name="other-npu", rule=NPU)
    before = _state()
    response = client_as(publisher).put(BASE, {**OBJECTIVE, "segment": segment}, format="json")
    assert response.status_code == 400, response.content
    fields = [detail["field"] for detail in response.json()["error"]["details"]]
    assert "segment" in fields
    assert _state() == before


def test_page__unknown_segment__400_naming_it_nothing_stored(
    npu_phone: Device, fleet: Fleet, publisher: Any, client: Any
) -> None:
    client.force_login(publisher)
    before = _state()
    refused = client.post(PAGE_SET, {"segment": "gpu"})
    assert refused.status_code == 400
    html = refused.content.decode()
    assert "segment" in html
    assert "The objective was not changed." in html
    assert _state() == before


def test_put__segment__editor_403_nothing_stored(
    npu_phone: Device, fleet: Fleet, editor: Any, client_as: Client
) -> None:
    before = _state()
    response = client_as(editor).put(BASE, {"segment": "npu"}, format="json")
    assert response.status_code == 403
    assert _state() == before


def test_service__segment_deleted_since__refused_naming_it(fleet: Fleet, publisher: Any) -> None:
    with pytest.raises(ValidationFailed) as refused:
        objective_set(actor=publisher, fleet=fleet, values={"segment": "npu"})
    assert refused.value.details[0]["field"] == "segment"
    assert not AutopilotObjective.objects.filter(fleet=fleet).exists()


def test_objective__segment_without_its_own_reports__409_naming_the_cell(
    phone: tuple[Device, Any], fleet: Fleet, fleet_key: str, publisher: Any
) -> None:
    # Given the reports all from a phone outside segment npu (whose one phone sent none)
    segment_create(actor=publisher, fleet=fleet, name="npu", rule=NPU)
    device_enroll(
        fleet_key=fleet_key,
        device_id="npu-1",
        platform="android",
        attributes={"accelerator": "npu"},
    )
    ingest(phone[0], image_events(3000, seed=4))
    before = _state()

    # When the autopilot is turned on for the segment
    with pytest.raises(Conflict) as refused:
        objective_set(actor=publisher, fleet=fleet, values={**OBJECTIVE, "segment": "npu"})

    # Then refused on the segment's own reports (none), naming the cell; nothing stored
    assert refused.value.code == "too_little_quality_data"
    (detail,) = refused.value.details
    assert detail["cell"] == IMAGE
    assert detail["reports"] == 0
    assert _state() == before
    # while the whole fleet has the reports it needs
    assert objective_set(actor=publisher, fleet=fleet, values=OBJECTIVE).state == "active"


def test_cycle__segment__publish_needs_approval__request_then_a_scoped_rollout(
    npu_phone: Device, fleet: Fleet, publisher: Any, client_as: Client
) -> None:
    ReviewSettings.objects.create(fleet=fleet, publish_needs_approval=True)
    cycle = _segment_cycle(fleet, publisher)
    assert cycle.state == AutopilotCycle.State.AWAITING_APPROVAL
    request = ChangeRequest.objects.get(pk=cycle.change_request)
    assert request.author_name == "autopilot"
    assert "segment npu" in request.note

    # When a publisher approves it
    cycle = approve_then_tick(client_as(publisher), fleet, request)

    # Then published through the request and rolled out to the segment alone
    assert cycle is not None
    assert cycle.state == AutopilotCycle.State.ROLLING_OUT, cycle.reason
    assert Rollout.objects.get(pk=cycle.rollout).segment_name == "npu"


def test_command__status_says_the_segment(npu_phone: Device, fleet: Fleet, publisher: Any) -> None:
    _segment_cycle(fleet, publisher)
    out = StringIO()
    call_command("autopilot", "status", fleet.slug, stdout=out)
    assert "autopilot of fleet-a (segment npu): active" in out.getvalue()
    assert "cycle 1 (segment npu): rolling_out" in out.getvalue()
