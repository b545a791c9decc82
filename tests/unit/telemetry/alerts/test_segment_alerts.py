"""Alert rules scoped to a segment, and the guards of a rollout scoped to a segment (issue 26):
both judged on the segment's rollup rows, so what happens on other devices never moves them.
Bad segment names on a rule are refused naming the field, with nothing stored."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from routing_policies.models import Device, Rollout
from routing_policies.segments.services import segment_create, segment_delete
from routing_policies.services import device_enroll, rollout_advance
from telemetry.alerts.models import AlertRule, RolloutGuardSet
from telemetry.alerts.services import alert_rule_create, alerts_evaluate, rollout_start_guarded
from telemetry.ingest.services import landed_batches_process, telemetry_batch_ingest
from tests.factories import iso, make_events, make_fleet

pytestmark = pytest.mark.usefixtures("requires_postgres")

RULES = "/api/v1/fleets/fleet-a/alerts/rules/"
NPU = {"attribute": "accelerator", "equals": "npu"}


@pytest.fixture(autouse=True)
def _no_rate_limit(settings: Any) -> None:
    settings.TELEMETRY_RATE_LIMIT_BATCHES = 0


@pytest.fixture
def phones(fleet: Any, fleet_key: str, publisher: Any) -> dict[str, Device]:
    """An NPU phone (in segment `npu`) and a CPU phone (not in it)."""
    segment_create(actor=publisher, fleet=fleet, name="npu", rule=NPU)
    return {
        name: device_enroll(
            fleet_key=fleet_key,
            device_id=f"{name}-1",
            platform="android",
            attributes={"accelerator": name},
        )[0]
        for name in ("npu", "cpu")
    }


def report(
    device: Device, *, version: int = 1, cloud: int = 0, on_device: int = 0, **extra: Any
) -> None:
    """Events of `version` happening now: `cloud` in the cloud, `on_device` on the device."""
    at = iso(datetime.now(UTC))
    events = make_events(
        cloud, device.device_id, ts=at, policy_version=version, route="cloud", **extra
    )
    events += make_events(on_device, device.device_id, ts=at, policy_version=version, **extra)
    telemetry_batch_ingest(device=device, body=json.dumps({"events": events}).encode())
    landed_batches_process()


# --- alert rules -------------------------------------------------------------------------------


def test_rule_on_a_segment__judged_on_its_devices_only(
    fleet: Any, phones: dict[str, Device], editor: Any
) -> None:
    # Given two rules, cloud share above 50%: one on segment npu, one on every device
    common = {"metric": "cloud_share", "condition": "above", "threshold": 0.5, "min_samples": 20}
    on_npu = alert_rule_create(actor=editor, fleet=fleet, name="npu cloud", segment="npu", **common)
    everyone = alert_rule_create(actor=editor, fleet=fleet, name="fleet cloud", **common)

    # When the NPU phone sends 80% of its tasks to the cloud, and the CPU phone none of 300
    report(phones["npu"], cloud=40, on_device=10)
    report(phones["cpu"], on_device=300)
    alerts_evaluate(fleet_id=fleet.pk)

    # Then the segment's rule fires on the segment's 80%; the fleet's sees 40 of 350
    on_npu.refresh_from_db()
    everyone.refresh_from_db()
    assert (on_npu.state, on_npu.last_value, on_npu.last_samples) == ("firing", 0.8, 50)
    assert everyone.state == "ok"
    assert everyone.last_value == pytest.approx(40 / 350)


def test_rule_on_a_deleted_segment__no_data_saying_why(
    fleet: Any, phones: dict[str, Device], editor: Any, publisher: Any
) -> None:
    # Given a rule on segment npu, and events of its phone
    rule = alert_rule_create(
        actor=editor,
        fleet=fleet,
        name="npu errors",
        metric="error_rate",
        condition="above",
        threshold=0.2,
        min_samples=1,
        segment="npu",
    )
    report(phones["npu"], on_device=10, ok=False)

    # When the segment is deleted, then the fleet is evaluated
    segment_delete(actor=publisher, fleet=fleet, name="npu")
    alerts_evaluate(fleet_id=fleet.pk)

    # Then the rule has no data and says why, rather than judging every device
    rule.refresh_from_db()
    assert rule.state == "no_data"
    assert "segment 'npu' is no longer one of the fleet's segments" in rule.last_message


def test_rule_api__segment_shown_and_changed(
    phones: dict[str, Device], editor: Any, client_as: Any
) -> None:
    # Given / When an editor adds a rule on segment npu, then moves it to every device
    client = client_as(editor)
    body = {"name": "npu p95", "metric": "p95_budget", "condition": "above", "threshold": 1.0}
    created = client.post(RULES, {**body, "segment": "npu"}, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["segment"] == "npu"
    rule = created.json()
    changed = client.patch(
        f"{RULES}{rule['id']}/", {"revision": rule["revision"], "segment": ""}, format="json"
    )

    # Then the rule answers with its segment each time
    assert changed.status_code == 200, changed.content
    assert changed.json()["segment"] == ""
    assert AlertRule.objects.get(pk=rule["id"]).segment == ""


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("gpu", "unknown segment"),
        ("n" * 65, "oversized"),
        ("npu\x00", "NUL"),
        ("NPU", "not a name"),
        (["npu"], "not a string"),
        (7, "a number"),
        ("other-npu", "another fleet's segment"),
    ],
)
def test_rule_api__bad_segment__400_naming_it_nothing_stored(
    phones: dict[str, Device], editor: Any, publisher: Any, client_as: Any, value: Any, why: str
) -> None:
    # Given another fleet with a segment of its own
    other = make_fleet(slug="fleet-b", actor=publisher)
    segment_create(actor=publisher, fleet=other, name="other-npu", rule=NPU)
    body = {"name": "bad", "metric": "error_rate", "condition": "above", "threshold": 0.1}

    # When a rule names a segment that is not one of this fleet's
    response = client_as(editor).post(RULES, {**body, "segment": value}, format="json")

    # Then 400 naming `segment`, and no rule is stored
    assert response.status_code == 400, (why, response.content)
    assert "segment" in [d["field"] for d in response.json()["error"]["details"]], why
    assert not AlertRule.objects.exists()


# --- guards of a scoped rollout -----------------------------------------------------------------


@pytest.fixture
def candidate(fleet: Any, publish_version: Any) -> int:
    return int(publish_version(fleet, threshold=0.7).number)


def _start_scoped(fleet: Any, version: int, publisher: Any, **options: Any) -> Rollout:
    return rollout_start_guarded(
        actor=publisher,
        fleet=fleet,
        version=version,
        segment="npu",
        guard_options={
            "guards": "default",
            "bake_minutes": 5,
            "window_minutes": 10,
            "min_samples": 50,
            **options,
        },
    )


def test_scoped_guard__candidate_like_its_segment__quiet_though_the_fleet_differs(
    fleet: Any, phones: dict[str, Device], candidate: int, publisher: Any
) -> None:
    # Given a guarded rollout of v2 scoped to npu; the NPU phone's stable and candidate both
    # at 30% cloud, the CPU phone's stable at 0% (the whole fleet's stable: 60 of 1000, 6%)
    rollout = _start_scoped(fleet, candidate, publisher)
    report(phones["npu"], cloud=60, on_device=140)
    report(phones["cpu"], on_device=800)
    report(phones["npu"], version=candidate, cloud=30, on_device=70)

    # When the fleet is evaluated
    result = alerts_evaluate(fleet_id=fleet.pk)

    # Then the cloud-share guard compares 30% with the segment's 30%, not the fleet's 6%
    rollout.refresh_from_db()
    assert result.guard_action == ""
    assert rollout.state == Rollout.State.ACTIVE
    guard_set = RolloutGuardSet.objects.get(rollout=rollout)
    states = {g.metric: g.state for g in guard_set.guards.all()}
    assert states["cloud_share"] == "ok"
    assert guard_set.verdict == "quiet"


def test_scoped_guard__candidate_worse_than_its_segment__rolled_back_though_the_fleet_is_worse(
    fleet: Any, phones: dict[str, Device], candidate: int, publisher: Any
) -> None:
    # Given a guarded rollout of v2 scoped to npu; the NPU phone's stable at 0% cloud, the CPU
    # phone's stable at 60% (the whole fleet's stable: 480 of 1000, 48%), the candidate at 25%
    rollout = _start_scoped(fleet, candidate, publisher)
    report(phones["npu"], on_device=200)
    report(phones["cpu"], cloud=480, on_device=320)
    report(phones["npu"], version=candidate, cloud=25, on_device=75)

    # When the fleet is evaluated
    result = alerts_evaluate(fleet_id=fleet.pk)

    # Then the guard fires on 25% against the segment's 0% (the fleet's 48% would hide it)
    rollout.refresh_from_db()
    assert result.guard_action == "rolled_back"
    assert rollout.state == Rollout.State.ROLLED_BACK
    assert rollout.reason.startswith("Guard fired: candidate cloud share 25.0% vs stable 0.0%")


def test_scoped_guard__quiet_at_100_percent__held_there_never_completed_fleet_wide(
    fleet: Any, phones: dict[str, Device], candidate: int, publisher: Any
) -> None:
    # Given a guarded, auto-advancing rollout scoped to npu at 100% of the segment, its
    # candidate like the segment's stable, quiet there for longer than the bake
    rollout = _start_scoped(fleet, candidate, publisher, auto_advance=True)
    rollout_advance(actor=publisher, fleet=fleet, to_stage=100)
    stable = rollout.stable_id
    report(phones["npu"], cloud=60, on_device=140)
    report(phones["npu"], version=candidate, cloud=30, on_device=70)
    alerts_evaluate(fleet_id=fleet.pk)
    guard_set = RolloutGuardSet.objects.get(rollout=rollout)
    assert guard_set.verdict == "quiet", guard_set.verdict_reason

    # When the guards are evaluated after the bake
    result = alerts_evaluate(fleet_id=fleet.pk, now=guard_set.quiet_since + timedelta(minutes=6))

    # Then the rollout stays at 100% of the segment, open (completing it would move the whole
    # fleet: a confirmed step, not the guards'), and the guards say so
    rollout.refresh_from_db()
    assert rollout.state == Rollout.State.ACTIVE
    assert rollout.stage == 100
    assert result.guard_action == ""
    guard_set.refresh_from_db()
    assert guard_set.verdict == "quiet"
    assert "100% of segment npu" in guard_set.verdict_reason
    fleet.routing.refresh_from_db()
    assert fleet.routing.stable_version_id == stable
