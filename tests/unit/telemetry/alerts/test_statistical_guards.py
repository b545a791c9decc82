"""Statistical rollout guards on real events and PostgreSQL: a regression in one cell rolls
back with its interval in the reason, a candidate like stable advances, a sample ratio
mismatch holds, too little exposure extends and then rolls back."""

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from controlplane.exceptions import ValidationFailed
from routing_policies.models import AuditEntry, Device, Rollout
from telemetry.alerts.models import AlertEvent, RolloutGuard, RolloutGuardSet
from telemetry.alerts.selectors import guard_status
from telemetry.alerts.services import alerts_evaluate, rollout_start_guarded
from telemetry.alerts.services.guards import guard_options_validate
from telemetry.ingest.services import landed_batches_process, telemetry_batch_ingest
from tests.factories import iso, make_events

pytestmark = pytest.mark.usefixtures("requires_postgres")

VOICE = {"task_type": "voice", "latency_budget": "interactive", "privacy_tier": "normal"}


@pytest.fixture(autouse=True)
def _no_rate_limit(settings: Any) -> None:
    settings.TELEMETRY_RATE_LIMIT_BATCHES = 0


@pytest.fixture
def device(phone: tuple[Device, str]) -> Device:
    return phone[0]


@pytest.fixture
def candidate(fleet: Any, publish_version: Any) -> int:
    return int(publish_version(fleet, threshold=0.7).number)


def report(device: Device, *, version: int, cloud: int, device_side: int, **cell: Any) -> None:
    """Events of `version` now, `cloud` of them in the cloud, in batches of at most 1,000."""
    at = iso(datetime.now(UTC))
    events = make_events(cloud, ts=at, policy_version=version, route="cloud", **cell)
    events += make_events(device_side, ts=at, policy_version=version, **cell)
    for start in range(0, len(events), 1000):
        body = json.dumps({"events": events[start : start + 1000]}).encode()
        telemetry_batch_ingest(device=device, body=body)
    landed_batches_process()


def start(fleet: Any, version: int, publisher: Any, **options: Any) -> Rollout:
    defaults = {"guards": "statistical", "bake_minutes": 0, "min_samples": 50}
    return rollout_start_guarded(
        actor=publisher, fleet=fleet, version=version, guard_options={**defaults, **options}
    )


def test_statistical_guards__one_cell_jumps_30_to_70_percent__rolled_back_with_its_interval(
    fleet: Any, device: Device, candidate: int, publisher: Any
) -> None:
    # Given a statistical rollout; fleet-wide the candidate's cloud share is like stable's,
    # but in the voice cell it is 70% against stable's 30%
    rollout = start(fleet, candidate, publisher)
    report(device, version=1, cloud=600, device_side=1400)
    report(device, version=1, cloud=300, device_side=700, **VOICE)
    report(device, version=candidate, cloud=30, device_side=70)
    report(device, version=candidate, cloud=70, device_side=30, **VOICE)

    # When the fleet is evaluated
    result = alerts_evaluate(fleet_id=fleet.pk)

    # Then the rollout is rolled back on the voice cell's evidence, said in the audit entry
    rollout.refresh_from_db()
    assert result.guard_action == "rolled_back"
    assert rollout.state == Rollout.State.ROLLED_BACK
    audit = AuditEntry.objects.get(action="rollout.rolled_back", fleet=fleet)
    assert "cloud share in voice/interactive/normal" in audit.summary
    assert "wholly beyond the tolerated +5.0 pts" in audit.summary
    status = guard_status(rollout_id=rollout.pk)
    assert status is not None
    cloud = next(g for g in status["guards"] if g["metric"] == "cloud_share")
    assert (cloud["kind"], cloud["state"], cloud["scope"]) == (
        "sequential",
        "regressed",
        "voice/interactive/normal",
    )
    assert cloud["lower"] > 0.05
    assert cloud["series"]
    assert cloud["series"][-1]["state"] == "regressed"


def test_statistical_guards__candidate_like_stable__healthy_and_advanced(
    fleet: Any, device: Device, candidate: int, publisher: Any
) -> None:
    # Given one statistical guard (cloud share, 20 pts tolerated) and 5% of events on v2
    rollout = start(
        fleet,
        candidate,
        publisher,
        guards=[{"kind": "sequential", "metric": "cloud_share", "tolerance": 0.2}],
        auto_advance=True,
    )
    report(device, version=1, cloud=1140, device_side=2660)
    report(device, version=candidate, cloud=60, device_side=140)

    # When evaluated
    result = alerts_evaluate(fleet_id=fleet.pk)

    # Then the interval lies within the tolerance and the rollout moves on to 25%
    rollout.refresh_from_db()
    assert result.guard_action == "advanced"
    assert rollout.stage == 25
    history = AlertEvent.objects.get(rollout=rollout, kind="advanced")
    assert history.message.startswith("Advanced v2 to 25%")


def test_statistical_guards__candidate_drops_half_its_telemetry__held_for_sample_ratio(
    fleet: Any, device: Device, candidate: int, publisher: Any
) -> None:
    # Given 5% expected on the candidate and 2.5% of the events arriving from it
    rollout = start(fleet, candidate, publisher, auto_advance=True)
    report(device, version=1, cloud=1170, device_side=2730)
    report(device, version=candidate, cloud=30, device_side=70)

    # When judged within the first minutes (devices still applying it), then after them
    alerts_evaluate(fleet_id=fleet.pk)
    early = RolloutGuardSet.objects.get(rollout=rollout).verdict
    alerts_evaluate(fleet_id=fleet.pk, now=rollout.stage_changed_at + timedelta(minutes=3))

    # Then the stage is held, says why, and the history has it
    rollout.refresh_from_db()
    guard_set = RolloutGuardSet.objects.get(rollout=rollout)
    assert early != "srm"
    assert (rollout.state, rollout.stage, guard_set.verdict) == ("active", 5, "srm")
    assert "sample ratio mismatch in events: candidate has 2.5%" in guard_set.verdict_reason
    assert AlertEvent.objects.filter(rollout=rollout, kind="held").exists()


def test_statistical_guards__srm_p_value_near_threshold__one_held_entry_until_clearly_back(
    fleet: Any, device: Device, candidate: int, publisher: Any
) -> None:
    # Given 5% expected on the candidate, held for 2.5% of the events
    rollout = start(fleet, candidate, publisher, auto_advance=False)
    report(device, version=1, cloud=585, device_side=1365)
    report(device, version=candidate, cloud=15, device_side=35)
    minutes = iter(range(3, 10))

    def look() -> RolloutGuardSet:
        at = rollout.stage_changed_at + timedelta(minutes=next(minutes))
        alerts_evaluate(fleet_id=fleet.pk, now=at)
        return RolloutGuardSet.objects.get(rollout=rollout)

    held = look()

    # When the p-value wanders just above the hold's threshold (3.8% of 3,000, p ≈ 0.003),
    # back below it (3.4% of 4,020), then the share comes back (5.1% of 5,020)
    report(device, version=1, cloud=280, device_side=655)
    report(device, version=candidate, cloud=20, device_side=45)
    near = look()
    report(device, version=1, cloud=300, device_side=700)
    report(device, version=candidate, cloud=6, device_side=14)
    again = look()
    report(device, version=1, cloud=264, device_side=616)
    report(device, version=candidate, cloud=36, device_side=84)
    back = look()

    # Then the stage stays held through the wandering, with one "held" entry in the history,
    # and the hold says when it is released; it is released once the share is clearly back
    assert (held.verdict, near.verdict, again.verdict) == ("srm", "srm", "srm")
    assert "p = 0.0034" in near.verdict_reason
    assert "released once p ≥ 0.01" in near.verdict_reason
    assert AlertEvent.objects.filter(rollout=rollout, kind="held").count() == 1
    assert back.verdict != "srm"
    assert "sample ratio" not in back.verdict_reason


def _at_pace(per_minute: float, minutes: float) -> int:
    """Events of `minutes` at `per_minute`, in whole tens (3 in 10 to the cloud, as before)."""
    return max(10, round(per_minute * minutes / 10) * 10)


def test_statistical_guards__healthy_candidate_inconclusive__says_when_it_will_know_honestly(
    fleet: Any,
    device: Device,
    candidate: int,
    publisher: Any,
    viewer: Any,
    client_as: Any,
    client: Any,
) -> None:
    # Given a candidate like stable (30% cloud on both) at 5%, judged by one statistical
    # guard (cloud share, +5 pts tolerated), after 5 minutes with 200 candidate events
    guard = {"kind": "sequential", "metric": "cloud_share", "tolerance": 0.05}
    rollout = start(fleet, candidate, publisher, guards=[guard], auto_advance=False)
    report(device, version=1, cloud=1140, device_side=2660)
    report(device, version=candidate, cloud=60, device_side=140)
    stage_start = rollout.stage_changed_at

    # When the guard is judged, and the rollout page and the guards API are read
    alerts_evaluate(fleet_id=fleet.pk, now=stage_start + timedelta(minutes=5))
    api = client_as(viewer).get("/api/v1/fleets/fleet-a/rollout/guards").json()
    client.force_login(viewer)
    page = client.get(f"/fleets/{fleet.slug}/rollout/").content.decode()

    # Then it is inconclusive and says, at the current rate, about when it will know and
    # what would shorten it, on the page as in the API
    (cloud,) = api["guards"]["guards"]
    decide = cloud["decide"]
    assert cloud["state"] == "inconclusive"
    assert decide["minutes"] > 5
    assert decide["text"].startswith("decides in about ")
    # (the pace: the stage's events over the minutes since its first minute, 5 to 6 here)
    pace_c, pace_s = decide["candidate_per_minute"], decide["stable_per_minute"]
    assert 200 / 6 <= pace_c <= 200 / 5
    assert 3800 / 6 <= pace_s <= 3800 / 5
    assert decide["text"].endswith(
        f"at the current rate ({pace_c:.1f} candidate and {pace_s:.1f} stable events a minute)"
    )
    assert decide["shorter"][0].startswith("a larger stage (25% on the candidate): about ")
    assert any(line.startswith("twice the traffic: about ") for line in decide["shorter"])
    assert "When it will know:" in page
    assert decide["text"] in page
    assert "Sooner with a larger stage (25% on the candidate)" in page

    # and the estimate is the test's own boundary: at 90% of it, events still coming at that
    # pace, the guard is still inconclusive; just past it, it is healthy
    minutes = decide["minutes"]
    states = []
    for share in (0.9, 1.03):
        have = RolloutGuard.objects.get(guard_set__rollout=rollout)
        more_c = _at_pace(pace_c, minutes * share) - (have.candidate_samples - 200)
        more_s = _at_pace(pace_s, minutes * share) - (have.stable_samples - 3800)
        report(device, version=1, cloud=more_s * 3 // 10, device_side=more_s * 7 // 10)
        report(device, version=candidate, cloud=more_c * 3 // 10, device_side=more_c * 7 // 10)
        at = stage_start + timedelta(minutes=5 + minutes * share)
        alerts_evaluate(fleet_id=fleet.pk, now=at)
        states.append(RolloutGuard.objects.get(guard_set__rollout=rollout).state)
    assert states == ["inconclusive", "healthy"]


def test_statistical_guards__too_slow_for_the_stage_limit__says_it_cannot_decide_at_this_rate(
    fleet: Any, device: Device, candidate: int, publisher: Any, viewer: Any, client_as: Any
) -> None:
    # Given the same healthy candidate, but a stage limit of 10 minutes without extensions
    guard = {"kind": "sequential", "metric": "cloud_share", "tolerance": 0.05}
    rollout = start(
        fleet, candidate, publisher, guards=[guard], stage_limit_minutes=10, max_extensions=0
    )
    report(device, version=1, cloud=1140, device_side=2660)
    report(device, version=candidate, cloud=60, device_side=140)

    # When judged after 5 minutes
    alerts_evaluate(fleet_id=fleet.pk, now=rollout.stage_changed_at + timedelta(minutes=5))

    # Then the API says it cannot decide in the stage's window at this rate, and what would
    # let it (a larger stage decides within the limit)
    api = client_as(viewer).get("/api/v1/fleets/fleet-a/rollout/guards").json()
    decide = api["guards"]["guards"][0]["decide"]
    assert decide["minutes"] is None
    assert decide["text"].startswith("cannot decide at this rate within the stage's 10 min limit")
    assert decide["shorter"][0].startswith("a larger stage (25% on the candidate): about ")


def test_statistical_guards__exposure_never_reached__extended_then_rolled_back(
    fleet: Any, device: Device, candidate: int, publisher: Any
) -> None:
    # Given 500 candidate events needed within 10 min (one extension), and only 100 arriving
    rollout = start(fleet, candidate, publisher, min_events=500, stage_limit_minutes=10)
    report(device, version=1, cloud=570, device_side=1330)
    report(device, version=candidate, cloud=30, device_side=70)
    began = rollout.stage_changed_at

    # When evaluated before the limit, after it, and after the extension
    alerts_evaluate(fleet_id=fleet.pk, now=began + timedelta(minutes=1))
    first = RolloutGuardSet.objects.get(rollout=rollout).verdict
    alerts_evaluate(fleet_id=fleet.pk, now=began + timedelta(minutes=10, seconds=5))
    second = RolloutGuardSet.objects.get(rollout=rollout)
    alerts_evaluate(fleet_id=fleet.pk, now=began + timedelta(minutes=20, seconds=5))

    # Then it collected, was extended once, then rolled back, saying so
    rollout.refresh_from_db()
    assert first == "collecting"
    assert second.verdict == "extended"
    assert "100 of 500 events" in second.verdict_reason
    assert rollout.state == Rollout.State.ROLLED_BACK
    assert rollout.reason.startswith("Stage limit of 20 min passed without a verdict")


def test_statistical_guards__bad_options__400_naming_each_field(
    fleet: Any, candidate: int, publisher: Any
) -> None:
    bad = [
        {"kind": "sequential", "metric": "events", "tolerance": 2, "confidence": 1.5},
        {"kind": "bayesian", "metric": "alpha"},
        {"kind": "sequential", "metric": "alpha", "tolerance": 0.1, "per_cell": "yes", "x": 1},
    ]
    with pytest.raises(ValidationFailed) as refused:
        guard_options_validate({"guards": bad})
    fields = {d["field"] for d in refused.value.details}
    assert fields == {
        "guards[0].metric",
        "guards[0].tolerance",
        "guards[0].confidence",
        "guards[1].kind",
        "guards[2].per_cell",
        "guards[2].x",
    }
    with pytest.raises(ValidationFailed) as refused:
        rollout_start_guarded(
            actor=publisher, fleet=fleet, version=candidate, guard_options={"min_devices": -1}
        )
    assert refused.value.details[0]["field"] == "min_devices"


def _at_100_with_holdback(fleet: Any, candidate: int, publisher: Any, **options: Any) -> Rollout:
    from routing_policies.services import rollout_advance

    rollout = rollout_start_guarded(
        actor=publisher,
        fleet=fleet,
        version=candidate,
        guard_options={"guards": "statistical", "bake_minutes": 0, "min_samples": 50, **options},
        holdback=10,
    )
    rollout_advance(actor=publisher, fleet=fleet, to_stage=100)
    rollout.refresh_from_db()
    return rollout


def test_statistical_guards__holdback_at_100__a_regression_still_rolls_back(
    fleet: Any, device: Device, candidate: int, publisher: Any
) -> None:
    # Given a rollout at 100% holding 10% back on v1, whose voice cell goes 30% → 70% cloud
    rollout = _at_100_with_holdback(fleet, candidate, publisher)
    report(device, version=1, cloud=30, device_side=70)
    report(device, version=1, cloud=60, device_side=140, **VOICE)
    report(device, version=candidate, cloud=300, device_side=700)
    report(device, version=candidate, cloud=1400, device_side=600, **VOICE)

    # When the fleet is evaluated
    result = alerts_evaluate(fleet_id=fleet.pk)

    # Then the held-back devices are the comparison group: the candidate is rolled back at 100%
    rollout.refresh_from_db()
    assert result.guard_action == "rolled_back"
    assert rollout.state == Rollout.State.ROLLED_BACK
    history = AlertEvent.objects.get(rollout=rollout, kind="rolled_back")
    assert history.state_before == "100"
    assert "cloud share in voice/interactive/normal" in history.message


def test_statistical_guards__holdback_at_100__healthy_candidate_completes_on_its_own(
    fleet: Any, device: Device, candidate: int, publisher: Any
) -> None:
    # Given a rollout at 100% holding 10% back, advancing on its own, the candidate like stable
    rollout = _at_100_with_holdback(
        fleet,
        candidate,
        publisher,
        guards=[{"kind": "sequential", "metric": "cloud_share", "tolerance": 0.2}],
        auto_advance=True,
    )
    report(device, version=1, cloud=120, device_side=280)
    report(device, version=candidate, cloud=1080, device_side=2520)

    # When evaluated
    result = alerts_evaluate(fleet_id=fleet.pk)

    # Then the guards judged it against the held-back group and completed it
    rollout.refresh_from_db()
    assert result.guard_action == "completed"
    assert rollout.state == Rollout.State.COMPLETED
    history = AlertEvent.objects.get(rollout=rollout, kind="completed")
    assert "quiet for 0 min at 100%" in history.message
