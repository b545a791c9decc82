"""Rollouts scoped to a segment (docs/segments.md, "Rollouts scoped to a segment"): the one
assignment function with a scope, the start (API, bad input, the rule pinned), convergence
within the scope, completion, and the MQTT state's encoding that an older device reads as
"stable"."""

import json
import random
from collections.abc import Callable
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from rest_framework.test import APIClient

from edge_sdk.assignment import FleetAssignment
from edge_sdk.segments import ATTRIBUTES, device_attributes, rule_matches
from edge_sdk.transport.mqtt import parse_state
from routing_policies.models import AuditEntry, Device, FleetRouting, Rollout, RolloutEvent
from routing_policies.mqtt.publish import state_payload
from routing_policies.rollouts.selectors import fleet_assignment, rollout_status
from routing_policies.segments.services import segment_delete, segment_update
from routing_policies.services import rollout_advance, rollout_start
from tests.factories import NPU_RULE as NPU
from tests.factories import npu_and_cpu_fleet

pytestmark = pytest.mark.django_db

START = "/api/v1/fleets/fleet-a/rollout/start"
COMPLETE = "/api/v1/fleets/fleet-a/rollout/complete"


def assert_names(response: Any, field: str) -> None:
    """The refusal's details name `field`."""
    fields = [detail["field"] for detail in response.json()["error"]["details"]]
    assert field in fields, response.content


# --- the one function ----------------------------------------------------------------------------


def _random_attributes(rng: random.Random) -> dict[str, Any]:
    attributes: dict[str, Any] = {}
    if rng.random() < 0.8:
        attributes["accelerator"] = rng.choice(ATTRIBUTES["accelerator"].choices)
    if rng.random() < 0.5:
        attributes["memory_gb"] = rng.choice([2, 4, 8, 12, 16])
    return attributes


@pytest.mark.parametrize("stage", [5, 25, 100])
@pytest.mark.parametrize("holdback", [0, 10])
def test_version_for__scoped__bucket_rule_inside_stable_outside(stage: int, holdback: int) -> None:
    # Given the same rollout over the whole fleet and scoped to NPU devices
    rng = random.Random(stage * 100 + holdback)
    rule = {"any_of": [NPU, {"attribute": "memory_gb", "range": {"gte": 12}}]}
    whole = FleetAssignment(6, 7, "salt-1", percent=stage, rollout_id=3, holdback=holdback)
    scoped = FleetAssignment(
        6, 7, "salt-1", percent=stage, rollout_id=3, holdback=holdback, scope=rule
    )
    for index in range(2000):
        device_id = f"d-{index}"
        attributes = _random_attributes(rng)
        # Then inside the scope the version is the whole-fleet rollout's (the bucket rule
        # unchanged), outside it is stable; unknown attributes are outside
        expected = whole.version_for(device_id) if rule_matches(rule, attributes) else 6
        assert scoped.version_for(device_id, attributes) == expected
        assert scoped.version_for(device_id) == 6
        # and the push tier's cached form agrees
        assert FleetAssignment.from_dict(scoped.as_dict()) == scoped


# --- the start -----------------------------------------------------------------------------------


@pytest.fixture
def npu_fleet(
    fleet: Any, fleet_key: str, publish_version: Callable[..., Any], publisher: Any
) -> Any:
    """fleet-a with v1 stable, v2 published, 40 NPU phones and 60 CPU phones, and a segment
    `npu` (accelerator = npu)."""
    publish_version(fleet, threshold=0.7)
    npu_and_cpu_fleet(fleet=fleet, fleet_key=fleet_key, actor=publisher, npu=40, total=100)
    return fleet


@pytest.fixture
def as_publisher(client_as: Callable[[Any], APIClient], publisher: Any) -> APIClient:
    return client_as(publisher)


def _stored() -> tuple[Any, ...]:
    return (
        list(Rollout.objects.values_list("pk", "state", "segment_name")),
        RolloutEvent.objects.count(),
        AuditEntry.objects.filter(action__startswith="rollout").count(),
        list(FleetRouting.objects.values_list("stable_version_id", flat=True)),
    )


def test_start__segment__only_its_buckets_assigned_and_counted(
    as_publisher: APIClient, npu_fleet: Any
) -> None:
    # Given 40 NPU and 60 CPU phones; When a publisher starts v2 for segment npu at 25%
    response = as_publisher.post(START, {"version": 2, "segment": "npu"}, format="json")
    assert response.status_code == 200, response.content
    rollout_advance(actor=None, fleet=npu_fleet, to_stage=25)
    # Then the API shows the scope with its rule as pinned
    status = as_publisher.get("/api/v1/fleets/fleet-a/rollout/").json()
    assert status["rollout"]["segment"] == "npu"
    assert status["rollout"]["segment_rule"] == NPU
    # and exactly the NPU phones whose bucket is below 2500 are assigned v2: counted by the
    # server in SQL, equal to each device's own computation
    assignment = fleet_assignment(npu_fleet.pk)
    expected = {
        device.device_id
        for device in Device.objects.filter(fleet=npu_fleet)
        if assignment.version_for(
            device.device_id,
            device_attributes(
                platform=device.platform, model=device.model, reported=device.attributes
            ),
        )
        == 2
    }
    assert expected
    assert all(name.startswith("npu-") for name in expected)
    whole = FleetAssignment(1, 2, assignment.salt, percent=25, rollout_id=assignment.rollout_id)
    assert expected == {f"npu-{i}" for i in range(40) if whole.version_for(f"npu-{i}") == 2}
    versions = {row["version"]: row for row in status["convergence"]["versions"]}
    assert versions[2]["assigned"] == len(expected)
    assert versions[1]["assigned"] == 100 - len(expected)
    # and the devices not acked name only in-scope candidates as assigned v2
    listed = status["convergence"]["not_acked"]["devices"]
    assert all(
        row["device_id"].startswith("npu-") for row in listed if row["assigned_version"] == 2
    )


def test_start__segment_edited_or_deleted__rollout_keeps_its_snapshot(
    npu_fleet: Any, publisher: Any
) -> None:
    # Given a rollout scoped to npu
    rollout = rollout_start(actor=publisher, fleet=npu_fleet, version=2, segment="npu")
    # When the segment's rule changes, then the segment is deleted
    segment_update(
        actor=publisher,
        fleet=npu_fleet,
        name="npu",
        revision=1,
        rule={"attribute": "accelerator", "equals": "gpu"},
    )
    segment_delete(actor=publisher, fleet=npu_fleet, name="npu")
    # Then the rollout still runs on the rule it started with
    rollout.refresh_from_db()
    assert (rollout.segment_name, rollout.segment_rule) == ("npu", NPU)
    assert fleet_assignment(npu_fleet.pk).scope == NPU
    assert rollout_status(npu_fleet)["rollout"]["segment"] == "npu"


@pytest.mark.parametrize(
    ("segment", "status", "code"),
    [
        ("gpus", 400, "validation_failed"),  # unknown
        ("cars", 409, "segment_matches_none"),  # matches no enrolled device
        ("npu\u0000", 400, "validation_failed"),
        ("n" * 65, 400, "validation_failed"),
        ("NPU", 400, "validation_failed"),
        (7, 400, "validation_failed"),
        (["npu"], 400, "validation_failed"),
        ({"name": {"deep": ["npu"]}}, 400, "validation_failed"),
    ],
    ids=["unknown", "matches-none", "nul", "oversized", "upper-case", "number", "list", "nested"],
)
def test_start__bad_segment__refused_naming_it_nothing_stored(
    as_publisher: APIClient, npu_fleet: Any, segment: Any, status: int, code: str
) -> None:
    # Given the fleet as it is; When a start names a bad segment
    before = _stored()
    response = as_publisher.post(START, {"version": 2, "segment": segment}, format="json")
    # Then a 4xx names `segment`, and nothing is stored
    assert response.status_code == status, response.content
    assert response.json()["error"]["code"] == code
    assert_names(response, "segment")
    assert _stored() == before


def test_start__segment_by_viewer__403_nothing_stored(
    client_as: Callable[[Any], APIClient], viewer: Any, npu_fleet: Any
) -> None:
    before = _stored()
    response = client_as(viewer).post(START, {"version": 2, "segment": "npu"}, format="json")
    assert response.status_code == 403
    assert _stored() == before


def test_start__repeated__no_op_and_other_scope_conflicts(
    as_publisher: APIClient, npu_fleet: Any
) -> None:
    # Given a started scoped rollout; When the same start is sent again
    first = as_publisher.post(START, {"version": 2, "segment": "npu"}, format="json")
    again = as_publisher.post(START, {"version": 2, "segment": "npu"}, format="json")
    # Then nothing changes; the same version for the whole fleet is a conflict, not a no-op
    assert again.status_code == 200
    assert again.json()["rollout"]["id"] == first.json()["rollout"]["id"]
    assert RolloutEvent.objects.count() == 1
    whole = as_publisher.post(START, {"version": 2}, format="json")
    assert whole.status_code == 409


def test_complete__scoped__needs_fleet_wide_confirmation(
    as_publisher: APIClient, npu_fleet: Any, publisher: Any
) -> None:
    # Given a scoped rollout at 100%
    rollout_start(actor=publisher, fleet=npu_fleet, version=2, segment="npu")
    rollout_advance(actor=publisher, fleet=npu_fleet, to_stage=100)
    # When it is completed without the confirmation: 409 naming fleet_wide, nothing changes
    refused = as_publisher.post(COMPLETE, {}, format="json")
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "scoped_rollout"
    assert_names(refused, "fleet_wide")
    assert Rollout.objects.get().state == "active"
    # When a non-boolean is sent: 400 naming it
    assert as_publisher.post(COMPLETE, {"fleet_wide": "yes"}, format="json").status_code == 400
    # When confirmed: v2 is the whole fleet's stable version
    done = as_publisher.post(COMPLETE, {"fleet_wide": True}, format="json")
    assert done.status_code == 200, done.content
    assert done.json()["stable_version"] == 2
    assert fleet_assignment(npu_fleet.pk).version_for("cpu-50", {"accelerator": "cpu"}) == 2


# --- the MQTT state ------------------------------------------------------------------------------


def test_mqtt_state__scoped__old_reader_stays_stable_new_reader_scopes() -> None:
    # Given a scoped rollout at 100%
    assignment = FleetAssignment(6, 7, "s", percent=100, rollout_id=3, scope=NPU, scope_name="npu")
    payload = state_payload("fleet-a", assignment, 7)
    # Then the fields an older device reads say "no rollout": it stays on stable
    assert payload["candidate"] is None
    assert payload["rollout"] is None
    old = FleetAssignment(payload["stable"], payload["candidate"])
    assert old.version_for("any") == 6
    # and the SDK reads the scoped rollout: NPU devices take v7, the others stay
    raw = json.dumps({"seq": 4, **payload}).encode()
    state = parse_state(raw, "fleet-a")
    assert not isinstance(state, str)
    assert state.assignment == assignment
    assert state.assignment.version_for("d1", {"accelerator": "npu"}) == 7
    assert state.assignment.version_for("d1", {"accelerator": "cpu"}) == 6


@pytest.mark.parametrize(
    "scoped",
    [
        {"id": 3, "stage": 5, "salt": "s", "candidate": 7, "segment": "npu", "rule": {"x": 1}},
        {"id": 3, "stage": 5, "salt": "s", "candidate": None, "segment": "npu", "rule": NPU},
        {"id": 3, "stage": 5, "salt": "s", "candidate": 7, "rule": NPU},
        "npu",
    ],
    ids=["bad-rule", "no-candidate", "no-segment", "not-object"],
)
def test_mqtt_state__malformed_scoped_rollout__dropped(scoped: Any) -> None:
    payload = {"seq": 4, "fleet": "fleet-a", "stable": 6, "candidate": None, "rollout": None}
    raw = json.dumps({**payload, "scoped_rollout": scoped}).encode()
    assert parse_state(raw, "fleet-a") == "malformed"


# --- the command ---------------------------------------------------------------------------------


def test_rollout_command__segment_and_fleet_wide__scoped_then_completed(npu_fleet: Any) -> None:
    # Given the fleet; When `manage.py rollout start --segment npu` runs, then 100%
    run = ["--fleet", "fleet-a"]
    out = StringIO()
    call_command("rollout", "start", *run, "--policy-version", "2", "--segment", "npu", stdout=out)
    # Then the rollout is scoped, and says so
    assert json.loads(out.getvalue())["rollout"]["segment"] == "npu"
    call_command("rollout", "advance", *run, "--to-stage", "100", stdout=StringIO())
    # When completed without --fleet-wide: refused, naming the confirmation
    with pytest.raises(CommandError, match="scoped_rollout"):
        call_command("rollout", "complete", *run, stdout=StringIO())
    # When confirmed: completed
    call_command("rollout", "complete", *run, "--fleet-wide", stdout=StringIO())
    assert Rollout.objects.get().state == "completed"
    # And an unknown segment is refused naming it
    with pytest.raises(CommandError, match="segment"):
        call_command(
            "rollout", "start", *run, "--policy-version", "1", "--segment", "gpu", stdout=out
        )


def test_start__segment_with_guards__guarded_inside_the_segment(
    as_publisher: APIClient, npu_fleet: Any
) -> None:
    # Given the fleet; When a scoped start asks for guards (which compare candidate with
    # stable inside the segment: the rollups keep the segment, docs/alerts.md)
    body = {"version": 2, "segment": "npu", "guards": "default"}
    response = as_publisher.post(START, body, format="json")
    # Then it starts, scoped and guarded, the start and the guards as one
    assert response.status_code in (200, 201), response.content
    rollout = Rollout.objects.get()
    assert rollout.segment_name == "npu"
    assert rollout.guard_set.guards.count() > 0  # type: ignore[attr-defined]
