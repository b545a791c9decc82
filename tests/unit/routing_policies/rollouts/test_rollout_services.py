"""Gray release writes: start, advance, pause, resume, complete, roll back, switch, cloud pressure.

Every transition is idempotent, audited and pushes only after commit; the `rollout` command
drives the same services.
"""

import json
from collections.abc import Callable
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from controlplane.exceptions import Conflict, NotFound
from routing_policies.models import AuditEntry, Device, FleetRouting, Rollout, RolloutEvent
from routing_policies.rollouts.selectors import fleet_running
from routing_policies.selectors import fleet_assignment, fleet_convergence, rollout_status
from routing_policies.services import (
    cloud_pressure_set,
    device_ack,
    fleet_switch_version,
    rollout_advance,
    rollout_complete,
    rollout_pause,
    rollout_resume,
    rollout_rollback,
    rollout_start,
)

pytestmark = pytest.mark.django_db

Capture = Callable[..., Any]


@pytest.fixture
def fleet3(fleet: Any, publish_version: Callable[..., Any]) -> Any:
    """`fleet` with v1 (stable), v2 and v3 published."""
    publish_version(fleet, threshold=0.7)
    publish_version(fleet, threshold=0.8)
    return fleet


def _stable(fleet: Any) -> int | None:
    routing = FleetRouting.objects.select_related("stable_version").get(fleet=fleet)
    return routing.stable_version.number if routing.stable_version else None


def _trail(fleet: Any) -> tuple[int, int]:
    """What a no-op must leave alone: rollout events and audit entries."""
    return (
        RolloutEvent.objects.filter(rollout__fleet=fleet).count(),
        AuditEntry.objects.filter(fleet=fleet).count(),
    )


def _last_audit(fleet: Any) -> AuditEntry:
    return AuditEntry.objects.filter(fleet=fleet).order_by("-id").first()  # type: ignore[return-value]


# --- start -----------------------------------------------------------------------------------


def test_rollout_start__published_version__at_5_percent_with_salt_and_push_after_commit(
    fleet3: Any, publisher: Any, django_capture_on_commit_callbacks: Capture
) -> None:
    # Given a fleet on v1 with v2 published
    # When a publisher starts rolling v2 out
    with django_capture_on_commit_callbacks() as pushes:
        rollout = rollout_start(actor=publisher, fleet=fleet3, version=2)

    # Then 5% of buckets get v2 under a fresh salt, the rest stay on v1, one push is queued
    assert (rollout.stage, rollout.state) == (5, Rollout.State.ACTIVE)
    assert len(rollout.salt) >= 16
    assignment = fleet_assignment(fleet3.pk)
    assert (assignment.stable, assignment.candidate, assignment.percent) == (1, 2, 5)
    assert assignment.salt == rollout.salt
    assert len(pushes) == 1
    assert _stable(fleet3) == 1


# A rollout's start reads the fleet's routing row (locked), then its target in one query (the
# version, an open rollout, an open freeze, the review setting, whether the version has an open
# change request: only then is the request read, and consumed if approved); it writes the
# rollout, its event and its audit entry. bench/mqtt times the start against a bare broker
# publish: each query here is a millisecond before the publish.
ROLLOUT_START_QUERIES = 5
# Inside a test's transaction the service's own becomes a savepoint: two statements more.
SAVEPOINT = 2


def test_rollout_start__five_queries__the_freeze_review_and_request_read_with_the_version(
    fleet3: Any, publisher: Any, django_assert_num_queries: Any
) -> None:
    # Given a fleet on v1 with v2 published, nothing frozen, no review needed
    # When a rollout of v2 starts
    with django_assert_num_queries(ROLLOUT_START_QUERIES + SAVEPOINT):
        rollout = rollout_start(actor=publisher, fleet=fleet3, version=2)

    # Then it is open at 5%
    assert (rollout.stage, rollout.state) == (5, Rollout.State.ACTIVE)


def test_rollout_start__two_rollouts__different_salts(fleet3: Any, publisher: Any) -> None:
    # Given a rollout of v2 that was rolled back
    first = rollout_start(actor=publisher, fleet=fleet3, version=2)
    rollout_rollback(actor=publisher, fleet=fleet3)

    # When v2 is rolled out again
    second = rollout_start(actor=publisher, fleet=fleet3, version=2)

    # Then the new rollout picks a new 5% of the fleet (another salt)
    assert second.pk != first.pk
    assert second.salt != first.salt


def test_rollout_start__same_version_again__no_op(
    fleet3: Any, publisher: Any, django_capture_on_commit_callbacks: Capture
) -> None:
    # Given v2 rolling out
    rollout = rollout_start(actor=publisher, fleet=fleet3, version=2)
    trail = _trail(fleet3)

    # When start is clicked again for v2
    with django_capture_on_commit_callbacks() as pushes:
        again = rollout_start(actor=publisher, fleet=fleet3, version=2)

    # Then it is the same rollout, nothing recorded, nothing pushed
    assert (again.pk, again.salt, again.stage) == (rollout.pk, rollout.salt, 5)
    assert _trail(fleet3) == trail
    assert pushes == []


def test_rollout_start__other_version_while_one_open__409(fleet3: Any, publisher: Any) -> None:
    # Given v2 rolling out
    rollout_start(actor=publisher, fleet=fleet3, version=2)

    # When someone starts v3 too
    with pytest.raises(Conflict) as refused:
        rollout_start(actor=publisher, fleet=fleet3, version=3)

    # Then it is refused: one rollout per fleet at a time
    assert refused.value.code == "rollout_in_progress"
    assert Rollout.objects.filter(fleet=fleet3).count() == 1


def test_rollout_start__stable_version__409(fleet3: Any, publisher: Any) -> None:
    # Given a fleet on v1
    # When v1 is "rolled out"
    with pytest.raises(Conflict) as refused:
        rollout_start(actor=publisher, fleet=fleet3, version=1)

    # Then it is refused: it already runs everywhere
    assert refused.value.code == "already_stable"


def test_rollout_start__unpublished_number__404(fleet3: Any, publisher: Any) -> None:
    # Given a fleet with v1..v3
    # When v9 is rolled out
    # Then it is refused, nothing started
    with pytest.raises(NotFound):
        rollout_start(actor=publisher, fleet=fleet3, version=9)
    assert not Rollout.objects.exists()


@pytest.mark.parametrize("number", [0, -1, 2**31, 2**63])
def test_start_and_switch__a_number_no_version_can_have__404(
    fleet3: Any, publisher: Any, number: int
) -> None:
    # Given a fleet with v1..v3
    # When a number outside any version's column is rolled out, or switched to
    # Then both are refused as an unknown version (not a database error), nothing changed
    with pytest.raises(NotFound):
        rollout_start(actor=publisher, fleet=fleet3, version=number)
    with pytest.raises(NotFound):
        fleet_switch_version(actor=publisher, fleet=fleet3, version=number)
    assert not Rollout.objects.exists()
    assert _stable(fleet3) == 1


# --- advance, pause, resume ------------------------------------------------------------------


def test_rollout_advance__5_25_100__stage_and_assignment_follow(
    fleet3: Any, publisher: Any
) -> None:
    # Given v2 at 5%
    rollout = rollout_start(actor=publisher, fleet=fleet3, version=2)
    started_stage_at = rollout.stage_changed_at

    # When it is advanced twice
    at_25 = rollout_advance(actor=publisher, fleet=fleet3)
    percent_25 = fleet_assignment(fleet3.pk).percent
    at_100 = rollout_advance(actor=publisher, fleet=fleet3, to_stage=100)

    # Then it goes 5 → 25 → 100, each stage timestamped, and every device runs v2 at 100%
    assert (at_25.stage, percent_25, at_100.stage) == (25, 25, 100)
    assert at_100.stage_changed_at > started_stage_at
    assert fleet_assignment(fleet3.pk).version_for("any-device") == 2
    events = list(
        RolloutEvent.objects.filter(rollout=rollout).values_list(
            "action", "stage_before", "stage_after"
        )
    )
    assert events == [("started", None, 5), ("advanced", 5, 25), ("advanced", 25, 100)]
    assert rollout_status(fleet3)["rollout"]["next"] == "complete"


@pytest.mark.parametrize("to_stage", [5, 25])
def test_rollout_advance__stage_already_reached__no_op(
    fleet3: Any, publisher: Any, django_capture_on_commit_callbacks: Capture, to_stage: int
) -> None:
    # Given v2 advanced to 25%
    rollout_start(actor=publisher, fleet=fleet3, version=2)
    rollout_advance(actor=publisher, fleet=fleet3, to_stage=25)
    trail = _trail(fleet3)

    # When a second click (or a stale page) asks for a stage already reached
    with django_capture_on_commit_callbacks() as pushes:
        rollout = rollout_advance(actor=publisher, fleet=fleet3, to_stage=to_stage)

    # Then nothing moves: no new event, no audit entry, no push
    assert rollout.stage == 25
    assert _trail(fleet3) == trail
    assert pushes == []


def test_rollout_advance__at_100_without_stage__409_complete_it(
    fleet3: Any, publisher: Any
) -> None:
    # Given v2 at 100%
    rollout_start(actor=publisher, fleet=fleet3, version=2)
    rollout_advance(actor=publisher, fleet=fleet3, to_stage=100)

    # When "advance" is clicked again
    with pytest.raises(Conflict) as refused:
        rollout_advance(actor=publisher, fleet=fleet3)

    # Then it says to complete instead
    assert refused.value.code == "at_last_stage"


def test_rollout_advance__no_rollout__409(fleet3: Any, publisher: Any) -> None:
    # Given no rollout
    # When someone advances
    # Then it is refused
    with pytest.raises(Conflict) as refused:
        rollout_advance(actor=publisher, fleet=fleet3)
    assert refused.value.code == "no_rollout"


def test_rollout_pause__twice__one_transition_and_advance_refused(
    fleet3: Any, publisher: Any
) -> None:
    # Given v2 at 5%
    rollout_start(actor=publisher, fleet=fleet3, version=2)

    # When paused twice
    rollout_pause(actor=publisher, fleet=fleet3)
    trail = _trail(fleet3)
    paused = rollout_pause(actor=publisher, fleet=fleet3)

    # Then it is paused once, devices keep what they run, and advancing is refused
    assert paused.state == Rollout.State.PAUSED
    assert _trail(fleet3) == trail
    assert fleet_assignment(fleet3.pk).percent == 5
    with pytest.raises(Conflict) as refused:
        rollout_advance(actor=publisher, fleet=fleet3)
    assert refused.value.code == "paused"
    assert rollout_status(fleet3)["rollout"]["next"] == "resume"


def test_rollout_resume__twice__one_transition_then_advance_works(
    fleet3: Any, publisher: Any
) -> None:
    # Given a paused rollout
    rollout_start(actor=publisher, fleet=fleet3, version=2)
    rollout_pause(actor=publisher, fleet=fleet3)

    # When resumed twice
    rollout_resume(actor=publisher, fleet=fleet3)
    trail = _trail(fleet3)
    resumed = rollout_resume(actor=publisher, fleet=fleet3)

    # Then it is active, the second click changed nothing, and it can advance
    assert resumed.state == Rollout.State.ACTIVE
    assert _trail(fleet3) == trail
    assert rollout_advance(actor=publisher, fleet=fleet3).stage == 25


# --- complete --------------------------------------------------------------------------------


@pytest.mark.parametrize("stage", [5, 25])
def test_rollout_complete__before_100__409_and_stable_unchanged(
    fleet3: Any, publisher: Any, stage: int
) -> None:
    # Given v2 below 100%
    rollout_start(actor=publisher, fleet=fleet3, version=2)
    rollout_advance(actor=publisher, fleet=fleet3, to_stage=stage)

    # When someone completes it
    with pytest.raises(Conflict) as refused:
        rollout_complete(actor=publisher, fleet=fleet3)

    # Then it is refused and v1 is still stable
    assert refused.value.code == "not_at_full_stage"
    assert _stable(fleet3) == 1


def test_rollout_complete__at_100__candidate_becomes_stable_repeat_no_op(
    fleet3: Any, publisher: Any, django_capture_on_commit_callbacks: Capture
) -> None:
    # Given v2 at 100%
    rollout_start(actor=publisher, fleet=fleet3, version=2)
    rollout_advance(actor=publisher, fleet=fleet3, to_stage=100)

    # When completed (twice)
    done = rollout_complete(actor=publisher, fleet=fleet3)
    trail = _trail(fleet3)
    with django_capture_on_commit_callbacks() as pushes:
        again = rollout_complete(actor=publisher, fleet=fleet3)

    # Then v2 is the stable version, no rollout is open, and the repeat did nothing
    assert done.state == again.state == Rollout.State.COMPLETED
    assert _stable(fleet3) == 2
    assignment = fleet_assignment(fleet3.pk)
    assert (assignment.stable, assignment.candidate) == (2, None)
    assert _trail(fleet3) == trail
    assert pushes == []


def test_rollout_holdback__at_100__a_share_stays_on_stable_until_completion(
    fleet3: Any, publisher: Any
) -> None:
    # Given v2 rolled out holding 10% back, advanced to 100%
    rollout = rollout_start(actor=publisher, fleet=fleet3, version=2, holdback=10)
    started = _last_audit(fleet3)
    rollout_advance(actor=publisher, fleet=fleet3, to_stage=100)
    advanced = _last_audit(fleet3)

    # When devices ask at 100%, and after completion
    at_100 = fleet_assignment(fleet3.pk)
    ids = [f"phone-{i}" for i in range(400)]
    held = [d for d in ids if at_100.version_for(d) == 1]
    status = rollout_status(fleet3)["rollout"]
    running = fleet_running(fleet=fleet3)
    rollout_complete(actor=publisher, fleet=fleet3)
    after = fleet_assignment(fleet3.pk)

    # Then at 100% the devices with buckets from 9000 up still run v1 (about 10%), the start
    # and the advance say so in the audit log, the status shows it, and completion moves them
    assert (at_100.percent, at_100.holdback, at_100.candidate_share) == (100, 10, 90)
    assert 20 <= len(held) <= 60
    assert started.after["holdback"] == 10
    assert "holding 10% back" in started.summary
    assert "10% held back on v1" in advanced.summary
    assert (status["stage"], status["holdback"], status["candidate_share"]) == (100, 10, 90)
    assert running["stable_share"] == 10
    assert all(after.version_for(d) == 2 for d in held)
    rollout.refresh_from_db()
    assert rollout.holdback == 10


# --- rollback --------------------------------------------------------------------------------


@pytest.mark.parametrize("stage", [5, 25, 100])
def test_rollout_rollback__from_any_stage__everyone_back_on_stable(
    fleet3: Any, publisher: Any, stage: int
) -> None:
    # Given v2 at `stage`
    rollout_start(actor=publisher, fleet=fleet3, version=2)
    rollout_advance(actor=publisher, fleet=fleet3, to_stage=stage)

    # When rolled back
    rollout = rollout_rollback(actor=publisher, fleet=fleet3, reason="error rate up")

    # Then every device runs v1 again, which is still the stable version
    assert rollout.state == Rollout.State.ROLLED_BACK
    assert rollout.reason == "error rate up"
    assert _stable(fleet3) == 1
    assignment = fleet_assignment(fleet3.pk)
    assert (assignment.stable, assignment.candidate) == (1, None)
    assert assignment.version_for("any-device") == 1


def test_rollout_rollback__twice__second_is_no_op(
    fleet3: Any, publisher: Any, django_capture_on_commit_callbacks: Capture
) -> None:
    # Given a rolled-back rollout
    rollout_start(actor=publisher, fleet=fleet3, version=2)
    first = rollout_rollback(actor=publisher, fleet=fleet3)
    trail = _trail(fleet3)

    # When rollback is clicked again
    with django_capture_on_commit_callbacks() as pushes:
        second = rollout_rollback(actor=publisher, fleet=fleet3)

    # Then nothing happens twice
    assert second.pk == first.pk
    assert _trail(fleet3) == trail
    assert pushes == []


def test_rollout_rollback__paused__works(fleet3: Any, publisher: Any) -> None:
    # Given a paused rollout at 25%
    rollout_start(actor=publisher, fleet=fleet3, version=2)
    rollout_advance(actor=publisher, fleet=fleet3, to_stage=25)
    rollout_pause(actor=publisher, fleet=fleet3)

    # When rolled back
    rollout = rollout_rollback(actor=publisher, fleet=fleet3)

    # Then it is rolled back (pausing never blocks the emergency exit)
    assert rollout.state == Rollout.State.ROLLED_BACK


def test_rollout_rollback__after_completion__409(fleet3: Any, publisher: Any) -> None:
    # Given a completed rollout
    rollout_start(actor=publisher, fleet=fleet3, version=2)
    rollout_advance(actor=publisher, fleet=fleet3, to_stage=100)
    rollout_complete(actor=publisher, fleet=fleet3)

    # When someone rolls back
    with pytest.raises(Conflict):
        rollout_rollback(actor=publisher, fleet=fleet3)

    # Then v2 stays stable (going back is a new rollout or a switch)
    assert _stable(fleet3) == 2


# --- switch and going back to an earlier version ---------------------------------------------


def test_fleet_switch_version__no_rollout__whole_fleet_at_once_repeat_no_op(
    fleet3: Any, publisher: Any, django_capture_on_commit_callbacks: Capture
) -> None:
    # Given a fleet on v1
    # When switched to v3 (twice)
    with django_capture_on_commit_callbacks() as pushes:
        fleet_switch_version(actor=publisher, fleet=fleet3, version=3)
    trail = _trail(fleet3)
    with django_capture_on_commit_callbacks() as repeat_pushes:
        fleet_switch_version(actor=publisher, fleet=fleet3, version=3)

    # Then every device runs v3 at once; the repeat changed nothing
    assert _stable(fleet3) == 3
    assert fleet_assignment(fleet3.pk).version_for("any-device") == 3
    assert len(pushes) == 1
    assert repeat_pushes == []
    assert _trail(fleet3) == trail


def test_fleet_switch_version__during_rollout__409(fleet3: Any, publisher: Any) -> None:
    # Given v2 rolling out
    rollout_start(actor=publisher, fleet=fleet3, version=2)

    # When someone switches the fleet to v3
    with pytest.raises(Conflict) as refused:
        fleet_switch_version(actor=publisher, fleet=fleet3, version=3)

    # Then it is refused and nothing moved
    assert refused.value.code == "rollout_in_progress"
    assert _stable(fleet3) == 1


def test_fleet_switch_version__back_to_earlier_version__fleet_runs_it(
    fleet3: Any, publisher: Any
) -> None:
    # Given v3 completed as stable
    rollout_start(actor=publisher, fleet=fleet3, version=3)
    rollout_advance(actor=publisher, fleet=fleet3, to_stage=100)
    rollout_complete(actor=publisher, fleet=fleet3)

    # When the operator switches the fleet back to v1
    fleet_switch_version(actor=publisher, fleet=fleet3, version=1)

    # Then every device runs v1
    assert _stable(fleet3) == 1
    assert fleet_assignment(fleet3.pk).version_for("any-device") == 1


def test_rollout_start__earlier_version__rolls_back_in_stages(fleet3: Any, publisher: Any) -> None:
    # Given v3 completed as stable
    rollout_start(actor=publisher, fleet=fleet3, version=3)
    rollout_advance(actor=publisher, fleet=fleet3, to_stage=100)
    rollout_complete(actor=publisher, fleet=fleet3)

    # When the operator rolls v1 out again, carefully, as a new rollout
    rollout = rollout_start(actor=publisher, fleet=fleet3, version=1)
    rollout_advance(actor=publisher, fleet=fleet3, to_stage=100)
    rollout_complete(actor=publisher, fleet=fleet3)

    # Then it went through the stages from v3 and v1 is stable again
    assert (rollout.stable.number, rollout.candidate.number) == (3, 1)
    assert _stable(fleet3) == 1


# --- audit -----------------------------------------------------------------------------------


def test_rollout_transitions__each__audited_with_actor_before_after(
    fleet3: Any, publisher: Any
) -> None:
    # Given a fleet on v1
    # When a publisher goes through every transition
    steps: list[tuple[str, Callable[[], Any]]] = [
        ("rollout.started", lambda: rollout_start(actor=publisher, fleet=fleet3, version=2)),
        ("rollout.advanced", lambda: rollout_advance(actor=publisher, fleet=fleet3)),
        ("rollout.paused", lambda: rollout_pause(actor=publisher, fleet=fleet3)),
        ("rollout.resumed", lambda: rollout_resume(actor=publisher, fleet=fleet3)),
        ("rollout.advanced", lambda: rollout_advance(actor=publisher, fleet=fleet3)),
        ("rollout.completed", lambda: rollout_complete(actor=publisher, fleet=fleet3)),
        ("fleet.switched", lambda: fleet_switch_version(actor=publisher, fleet=fleet3, version=3)),
        ("rollout.started", lambda: rollout_start(actor=publisher, fleet=fleet3, version=1)),
        ("rollout.rolled_back", lambda: rollout_rollback(actor=publisher, fleet=fleet3)),
    ]
    # Then each one leaves one entry naming who did it, and what was before and after
    for action, step in steps:
        step()
        entry = _last_audit(fleet3)
        assert entry.action == action
        assert entry.actor == publisher
        assert entry.actor_name == "publisher"
        assert entry.before is not None
        assert entry.after is not None
        assert entry.before != entry.after
    switched = AuditEntry.objects.get(fleet=fleet3, action="fleet.switched")
    assert (switched.before, switched.after) == ({"stable": 2}, {"stable": 3})


def test_rollout_advance__named_stage_or_next__same_event_audit_and_push(
    fleet3: Any, publisher: Any, django_capture_on_commit_callbacks: Capture
) -> None:
    # Given two rollouts of v2 at 5%, one advanced to a named stage (PostgreSQL: one
    # statement) and one to "the next stage" (the ORM path)
    def advance_and_trail(to_stage: int | None) -> tuple[Any, ...]:
        rollout = rollout_start(actor=publisher, fleet=fleet3, version=2)
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            advanced = rollout_advance(actor=publisher, fleet=fleet3, to_stage=to_stage)
        event = RolloutEvent.objects.filter(rollout=rollout).order_by("-id").first()
        entry = _last_audit(fleet3)
        rollout_rollback(actor=publisher, fleet=fleet3)
        assert event is not None
        return (
            (advanced.pk, advanced.stage) == (rollout.pk, 25),
            len(callbacks),
            (event.action, event.stage_before, event.stage_after, event.actor_name),
            (entry.action, entry.actor, entry.actor_name, entry.target == f"rollout {rollout.pk}"),
            (entry.summary, entry.before, entry.after, entry.diff),
        )

    # Then both leave the same event and audit rows and schedule one push each
    named, following = advance_and_trail(25), advance_and_trail(None)
    assert named == following
    assert named[0] is True
    assert named[1] == 1
    assert named[4] == (
        "Advanced v2 from 5% to 25%",
        {"stage": 5},
        {"stage": 25},
        [{"field": "stage", "before": 5, "after": 25}],
    )


# --- cloud pressure --------------------------------------------------------------------------


def test_cloud_pressure_set__valid__live_until_ttl_and_audited(fleet: Any, publisher: Any) -> None:
    # Given a fleet
    # When cloud pressure of +0.1 for 5 minutes is set
    before = timezone.now()
    cloud_pressure_set(actor=publisher, fleet=fleet, theta_offset=0.1, ttl_s=300)

    # Then it is live for 5 minutes, and audited
    pressure = rollout_status(fleet)["cloud_pressure"]
    assert pressure["theta_offset"] == 0.1
    assert (
        before + timedelta(seconds=299)
        < pressure["until"]
        <= timezone.now() + timedelta(seconds=300)
    )
    assert _last_audit(fleet).action == "fleet.cloud_pressure"


# --- convergence -----------------------------------------------------------------------------


def _enrol(fleet: Any, count: int) -> list[Device]:
    return Device.objects.bulk_create(
        Device(fleet=fleet, device_id=f"dev-{i:03d}", token_hash=f"{i:064x}") for i in range(count)
    )


def test_fleet_convergence__acks_after_stage_change__counted_with_p50_p95(
    fleet3: Any, publisher: Any
) -> None:
    # Given 40 devices, v2 at 100%, and 20 of them acking v2
    devices = _enrol(fleet3, 40)
    rollout_start(actor=publisher, fleet=fleet3, version=2)
    rollout_advance(actor=publisher, fleet=fleet3, to_stage=100)
    for device in devices[:20]:
        device_ack(device_pk=device.pk, version=2)

    # When the convergence is read
    convergence = fleet_convergence(fleet3)

    # Then v2 is assigned to all 40, acked by 20, with a propagation time for those 20
    v2 = next(v for v in convergence["versions"] if v["version"] == 2)
    assert (v2["role"], v2["assigned"], v2["acked"]) == ("candidate", 40, 20)
    propagation = convergence["propagation"]
    assert propagation["count"] == 20
    assert 0 <= propagation["p50_ms"] <= propagation["p95_ms"] < 60_000
    # and the slowest: P99 and the last device's time to apply it
    assert propagation["p95_ms"] <= propagation["p99_ms"] <= propagation["last_ms"] < 60_000


def test_fleet_convergence__some_devices_behind__counted_and_the_first_20_named(
    fleet3: Any, publisher: Any
) -> None:
    # Given 30 devices, v2 at 25% over v1, each cohort's first half acking its version and one
    # stable device still acking v1 (it runs what it was assigned: not behind)
    devices = _enrol(fleet3, 30)
    rollout_start(actor=publisher, fleet=fleet3, version=2)
    rollout_advance(actor=publisher, fleet=fleet3, to_stage=25)
    assignment = fleet_assignment(fleet3.pk)
    wanted = {d.device_id: assignment.version_for(d.device_id) for d in devices}
    assert set(wanted.values()) == {1, 2}
    for version in (1, 2):
        cohort = [d for d in devices if wanted[d.device_id] == version]
        for device in cohort[: len(cohort) // 2]:
            device_ack(device_pk=device.pk, version=version)
    acked = {d.device_id for d in Device.objects.filter(fleet=fleet3, acked_version__isnull=False)}
    # and one stable device that ran the candidate at 5% and has not come back to v1
    on_stable = sorted(d for d in wanted if wanted[d] == 1 and d not in acked)[0]
    Device.objects.filter(fleet=fleet3, device_id=on_stable).update(acked_version=2)

    # When the convergence is read
    behind = fleet_convergence(fleet3)["not_acked"]

    # Then every device not acking its own version is counted, the first 20 named by id with
    # what each was told and runs
    expected = sorted(d for d in wanted if d not in acked)
    assert behind["count"] == len(expected) >= 14
    assert [row["device_id"] for row in behind["devices"]] == expected[:20]
    for row in behind["devices"]:
        assert row["assigned_version"] == wanted[row["device_id"]]
        assert row["acked_version"] == (2 if row["device_id"] == on_stable else None)
        assert row["online"] is False

    # When every device acks its version
    for device in devices:
        device_ack(device_pk=device.pk, version=wanted[device.device_id])

    # Then no one is behind
    assert fleet_convergence(fleet3)["not_acked"] == {"count": 0, "devices": []}


def test_fleet_convergence__more_than_20_behind__20_named_all_counted(
    fleet3: Any, publisher: Any
) -> None:
    # Given 25 devices told v2 at 100% and none acking it yet
    _enrol(fleet3, 25)
    rollout_start(actor=publisher, fleet=fleet3, version=2)
    rollout_advance(actor=publisher, fleet=fleet3, to_stage=100)

    # When the convergence is read
    behind = fleet_convergence(fleet3)["not_acked"]

    # Then all 25 are counted and the first 20 named
    assert behind["count"] == 25
    assert [row["device_id"] for row in behind["devices"]] == [f"dev-{i:03d}" for i in range(20)]
    assert {row["assigned_version"] for row in behind["devices"]} == {2}


@pytest.mark.parametrize(
    "unrelated_write",
    [
        pytest.param(
            lambda fleet, actor: rollout_complete(actor=actor, fleet=fleet), id="complete"
        ),
        pytest.param(
            lambda fleet, actor: cloud_pressure_set(
                actor=actor, fleet=fleet, theta_offset=0.2, ttl_s=60
            ),
            id="cloud-pressure",
        ),
        pytest.param(
            lambda fleet, actor: call_command(
                "rollout", "pause", "--fleet", fleet.slug, stdout=StringIO()
            ),
            id="pause",
        ),
    ],
)
def test_fleet_convergence__write_that_moves_no_device__propagation_kept(
    fleet3: Any, publisher: Any, unrelated_write: Callable[[Any, Any], Any]
) -> None:
    # Given v2 at 100% acked by 10 devices
    devices = _enrol(fleet3, 10)
    rollout_start(actor=publisher, fleet=fleet3, version=2)
    rollout_advance(actor=publisher, fleet=fleet3, to_stage=100)
    for device in devices:
        device_ack(device_pk=device.pk, version=2)
    before = fleet_convergence(fleet3)

    # When a write that sends no device a new version happens
    unrelated_write(fleet3, publisher)

    # Then the propagation numbers still describe the last stage change
    after = fleet_convergence(fleet3)
    assert after["propagation"] == before["propagation"]
    assert after["propagation"]["count"] == 10
    assert after["last_change_at"] == before["last_change_at"]


# --- the management command ------------------------------------------------------------------


def _command(*args: str) -> dict[str, Any]:
    out = StringIO()
    call_command("rollout", *args, stdout=out)
    status: dict[str, Any] = json.loads(out.getvalue())
    return status


def test_rollout_command__every_action__drives_the_rollout(fleet3: Any, publisher: Any) -> None:
    # Given a fleet on v1 with v2 and v3 published
    slug = ["--fleet", fleet3.slug, "--as-user", "publisher"]

    # When a script goes through every action
    started = _command("start", *slug, "--policy-version", "2")
    paused = _command("pause", *slug)
    resumed = _command("resume", *slug)
    advanced = _command("advance", *slug)
    full = _command("advance", *slug, "--to-stage", "100")
    completed = _command("complete", *slug)
    switched = _command("switch", *slug, "--policy-version", "3")
    _command("start", *slug, "--policy-version", "1")
    rolled_back = _command("rollback", *slug, "--reason", "canary alarms")
    status = _command("status", "--fleet", fleet3.slug)

    # Then each printed the state it left, and the audit names the user
    assert (started["rollout"]["candidate"], started["rollout"]["stage"]) == (2, 5)
    assert paused["rollout"]["state"] == "paused"
    assert resumed["rollout"]["state"] == "active"
    assert advanced["rollout"]["stage"] == 25
    assert full["rollout"]["stage"] == 100
    assert (completed["rollout"]["state"], completed["stable_version"]) == ("completed", 2)
    assert switched["stable_version"] == 3
    assert rolled_back["rollout"]["state"] == "rolled_back"
    assert rolled_back["rollout"]["reason"] == "canary alarms"
    assert status == {**rolled_back, "convergence": status["convergence"]}
    assert set(
        AuditEntry.objects.filter(fleet=fleet3, action__startswith="rollout.").values_list(
            "actor_name", flat=True
        )
    ) == {"publisher"}


def test_rollout_command__start_with_holdback__kept_on_stable_at_100(fleet3: Any) -> None:
    slug = ["--fleet", fleet3.slug]
    started = _command("start", *slug, "--policy-version", "2", "--holdback", "15")
    full = _command("advance", *slug, "--to-stage", "100")
    assert started["rollout"]["holdback"] == 15
    assert (full["rollout"]["stage"], full["rollout"]["candidate_share"]) == (100, 85)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["launch", "--fleet", "fleet-a"], "invalid choice"),
        (["start", "--fleet", "fleet-a"], "--policy-version"),
        (["start", "--fleet", "no-such-fleet", "--policy-version", "2"], "not_found"),
        (["advance", "--fleet", "fleet-a"], "no_rollout"),
        (["advance", "--fleet", "fleet-a", "--to-stage", "50"], "invalid choice"),
        (["start", "--fleet", "fleet-a", "--policy-version", "1"], "already_stable"),
        (["status", "--fleet", "fleet-a", "--as-user", "ghost"], "ghost"),
        (["start", "--fleet", "fleet-a", "--policy-version", "2", "--holdback", "60"], "holdback"),
        (["start", "--fleet", "fleet-a", "--policy-version", "2", "--holdback", "-1"], "holdback"),
        (["start", "--fleet", "fleet-a", "--policy-version", "0"], "version"),
        (["switch", "--fleet", "fleet-a", "--policy-version", "0"], "version"),
    ],
)
def test_rollout_command__bad_request__command_error(
    fleet3: Any, args: list[str], message: str
) -> None:
    # Given a fleet on v1
    # When the command is run with a bad action or a refused transition
    with pytest.raises(CommandError) as refused:
        call_command("rollout", *args, stdout=StringIO())

    # Then it fails with a message saying why, and nothing started
    assert message in str(refused.value)
    assert not Rollout.objects.exists()
