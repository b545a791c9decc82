"""Guarded rollouts on real events and PostgreSQL: a firing guard rolls back on its own, quiet
guards advance after the bake time, too few events is never quiet."""

import json
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from routing_policies.models import AuditEntry, Device, Rollout, RolloutEvent
from telemetry.alerts.models import AlertEvent, RolloutGuardSet
from telemetry.alerts.services import alerts_evaluate, rollout_start_guarded
from telemetry.ingest.services import landed_batches_process, telemetry_batch_ingest
from tests.factories import iso, make_events

pytestmark = pytest.mark.usefixtures("requires_postgres")


@pytest.fixture(autouse=True)
def _no_rate_limit(settings: Any) -> None:
    settings.TELEMETRY_RATE_LIMIT_BATCHES = 0


@pytest.fixture
def device(phone: tuple[Device, str]) -> Device:
    return phone[0]


@pytest.fixture
def candidate(fleet: Any, publish_version: Any) -> int:
    """v2 published beside the stable v1."""
    return int(publish_version(fleet, threshold=0.7).number)


def report_mix(device: Device, *, version: int, cloud: int, device_side: int, **extra: Any) -> None:
    """Events of `version` happening now: `cloud` in the cloud, `device_side` on the device."""
    at = iso(datetime.now(UTC))
    events = make_events(cloud, ts=at, policy_version=version, route="cloud", latency_ms=300.0)
    events += make_events(device_side, ts=at, policy_version=version, **extra)
    telemetry_batch_ingest(device=device, body=json.dumps({"events": events}).encode())
    landed_batches_process()


def start(fleet: Any, version: int, publisher: Any, **options: Any) -> Rollout:
    defaults = {"guards": "default", "bake_minutes": 5, "window_minutes": 10, "min_samples": 50}
    return rollout_start_guarded(
        actor=publisher, fleet=fleet, version=version, guard_options={**defaults, **options}
    )


def test_guards__candidate_cloud_share_jumps__rolled_back_without_a_click(
    fleet: Any, device: Device, candidate: int, publisher: Any
) -> None:
    # Given a guarded rollout of v2, stable at 30% cloud and the candidate at 70%
    rollout = start(fleet, candidate, publisher)
    report_mix(device, version=1, cloud=60, device_side=140)
    report_mix(device, version=candidate, cloud=70, device_side=30)

    # When the fleet is evaluated (as after the rollups, or by the beat)
    result = alerts_evaluate(fleet_id=fleet.pk)

    # Then the rollout is rolled back by the system, with the guard's reason everywhere
    rollout.refresh_from_db()
    assert result.guard_action == "rolled_back"
    assert rollout.state == Rollout.State.ROLLED_BACK
    assert rollout.reason.startswith("Guard fired: candidate cloud share 70.0% vs stable 30.0%")
    event = RolloutEvent.objects.get(rollout=rollout, action="rolled_back")
    assert event.actor_name == "system"
    audit = AuditEntry.objects.get(action="rollout.rolled_back", fleet=fleet)
    assert "Guard fired" in audit.summary
    assert audit.actor is None
    guard_set = RolloutGuardSet.objects.get(rollout=rollout)
    assert guard_set.verdict == "rolled_back"
    states = {g.metric: g.state for g in guard_set.guards.all()}
    assert states["cloud_share"] == "firing"
    assert states["fallback_rate"] == "ok"
    assert AlertEvent.objects.filter(rollout=rollout, kind="rolled_back").exists()

    # When evaluated again: nothing more happens (the rollout is over)
    assert alerts_evaluate(fleet_id=fleet.pk).guard_action == ""


def test_guards__quiet_for_the_bake_time__advance_then_complete(
    fleet: Any, device: Device, candidate: int, publisher: Any
) -> None:
    # Given a guarded rollout with auto-advance and a 5-minute bake; both cohorts alike
    rollout = start(fleet, candidate, publisher, auto_advance=True)
    report_mix(device, version=1, cloud=30, device_side=70)
    report_mix(device, version=candidate, cloud=30, device_side=70)

    # When evaluated now: quiet, but not baked yet
    now = datetime.now(UTC)
    alerts_evaluate(fleet_id=fleet.pk, now=now)
    rollout.refresh_from_db()
    guard_set = RolloutGuardSet.objects.get(rollout=rollout)
    assert (rollout.stage, guard_set.verdict) == (5, "quiet")
    assert guard_set.verdict_reason == "quiet for 0 of 5 min at 5%"

    # When evaluated 5 minutes later, still quiet
    result = alerts_evaluate(fleet_id=fleet.pk, now=now + timedelta(minutes=5))

    # Then it advanced to 25% on its own, audited as the system
    rollout.refresh_from_db()
    assert result.guard_action == "advanced"
    assert rollout.stage == 25
    assert RolloutEvent.objects.get(rollout=rollout, action="advanced").actor_name == "system"
    assert AlertEvent.objects.get(rollout=rollout, kind="advanced").message.startswith(
        "Advanced v2 to 25%: guards quiet for 5 min at 5%"
    )


def test_guards__too_few_candidate_events__insufficient_never_advances(
    fleet: Any, device: Device, candidate: int, publisher: Any
) -> None:
    # Given auto-advance with no bake at all, but only 10 candidate events (50 needed)
    rollout = start(fleet, candidate, publisher, auto_advance=True, bake_minutes=0)
    report_mix(device, version=1, cloud=30, device_side=70)
    report_mix(device, version=candidate, cloud=3, device_side=7)

    # When evaluated, twice
    alerts_evaluate(fleet_id=fleet.pk)
    alerts_evaluate(fleet_id=fleet.pk)

    # Then it stays at 5%, saying it cannot judge
    rollout.refresh_from_db()
    guard_set = RolloutGuardSet.objects.get(rollout=rollout)
    assert rollout.stage == 5
    assert rollout.state == Rollout.State.ACTIVE
    assert guard_set.verdict == "insufficient"
    assert "too few candidate events to judge: 10 of the 50 needed" in guard_set.verdict_reason
    assert guard_set.quiet_since is None


def test_guards__one_privacy_violation__rolls_back_even_with_few_events(
    fleet: Any, device: Device, candidate: int, publisher: Any
) -> None:
    # Given a guarded rollout and 3 candidate events, one of them a sensitive task sent raw
    rollout = start(fleet, candidate, publisher)
    report_mix(device, version=1, cloud=30, device_side=70)
    report_mix(device, version=candidate, cloud=0, device_side=2)
    at = iso(datetime.now(UTC))
    leak = make_events(
        1,
        ts=at,
        policy_version=candidate,
        route="cloud",
        privacy_tier="sensitive",
        deidentified=False,
    )
    telemetry_batch_ingest(device=device, body=json.dumps({"events": leak}).encode())
    landed_batches_process()

    # When evaluated
    alerts_evaluate(fleet_id=fleet.pk)

    # Then rolled back: a violation is conclusive however few the events
    rollout.refresh_from_db()
    assert rollout.state == Rollout.State.ROLLED_BACK
    assert "privacy violations 1" in rollout.reason


def test_rollout_command__start_with_guards__guarded(
    fleet: Any, candidate: int, publisher: Any
) -> None:
    # When started from the command line with guards, a per-stage bake and auto-advance
    out = StringIO()
    call_command(
        "rollout",
        "start",
        "--fleet",
        fleet.slug,
        "--policy-version",
        str(candidate),
        "--guards",
        "default",
        "--bake-minutes",
        "5:10,25:20,100:30",
        "--auto-advance",
        stdout=out,
    )

    # Then the rollout carries them, and the printed status shows them
    guard_set = RolloutGuardSet.objects.get(rollout__fleet=fleet)
    assert guard_set.bake_minutes == {"5": 10, "25": 20, "100": 30}
    assert guard_set.auto_advance is True
    assert guard_set.guards.count() == 4
    assert json.loads(out.getvalue())["guards"]["verdict"] == "watching"


def test_rollout_command__bad_guards__refused_nothing_started(
    fleet: Any, candidate: int, publisher: Any
) -> None:
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="guards"):
        call_command(
            "rollout",
            "start",
            "--fleet",
            fleet.slug,
            "--policy-version",
            str(candidate),
            "--guards",
            '[{"metric": "colour", "comparison": "above", "threshold": 1}]',
            stdout=StringIO(),
        )
    assert not Rollout.objects.filter(fleet=fleet).exists()


def test_rollout_page__guarded_start__guards_and_verdict_shown(
    fleet: Any, device: Device, candidate: int, publisher: Any, client: Any
) -> None:
    # Given a publisher starting v2 from the rollout page with "Guard it" ticked
    client.force_login(publisher)
    response = client.post(
        f"/fleets/{fleet.slug}/rollout/start/",
        {
            "version": str(candidate),
            "guarded": "on",
            "bake_minutes": "15",
            "auto_advance": "on",
            "window_minutes": "10",
            "min_samples": "50",
        },
    )
    assert response.status_code == 302

    # When too few candidate events have come in and the guards are judged
    report_mix(device, version=candidate, cloud=1, device_side=4)
    alerts_evaluate(fleet_id=fleet.pk)

    # Then the page shows the guards, each saying it cannot judge yet
    page = client.get(f"/fleets/{fleet.slug}/rollout/").content.decode()
    assert 'data-verdict="insufficient"' in page
    assert "too few events to judge" in page
    assert page.count('data-guard-state="insufficient"') == 4
    assert "bake 15/15/15 min at 5/25/100%" in page
    assert "auto-advance on" in page


def test_rollout_page__bad_bake_time__refused_nothing_started(
    fleet: Any, candidate: int, publisher: Any, client: Any
) -> None:
    client.force_login(publisher)
    response = client.post(
        f"/fleets/{fleet.slug}/rollout/start/",
        {
            "version": str(candidate),
            "guarded": "on",
            "bake_minutes": "soon",
            "window_minutes": "10",
            "min_samples": "50",
        },
    )
    assert response.status_code == 400
    assert "The bake time: a whole number of minutes" in response.content.decode()
    assert not Rollout.objects.filter(fleet=fleet).exists()


def test_guard_status__rollout_ended_by_a_person__shown_finished_not_quiet(
    fleet: Any, device: Device, candidate: int, publisher: Any
) -> None:
    from routing_policies.services import rollout_rollback
    from telemetry.alerts.selectors import guard_status

    # Given guards judged quiet, then a person rolls the rollout back
    rollout = start(fleet, candidate, publisher)
    report_mix(device, version=1, cloud=30, device_side=70)
    report_mix(device, version=candidate, cloud=30, device_side=70)
    alerts_evaluate(fleet_id=fleet.pk)
    assert guard_status(rollout_id=rollout.pk)["verdict"] == "quiet"  # type: ignore[index]
    rollout_rollback(actor=publisher, fleet=fleet, reason="changed my mind")

    # Then the guards' last word no longer stands
    status = guard_status(rollout_id=rollout.pk)
    assert status is not None
    assert (status["verdict"], status["verdict_label"]) == ("finished", "rollout finished")
