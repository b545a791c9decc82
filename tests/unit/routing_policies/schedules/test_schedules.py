"""Scheduled changes: each runs once at its time through its normal service, or does not run
and says why (the draft changed, another rollout open, the fleet frozen, guards not healthy);
times typed in the user's zone are stored in UTC; cancel and move before it runs."""

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from routing_policies.models import AuditEntry, PolicyVersion, Rollout, ScheduledChange
from routing_policies.reviews.services import fleet_freeze_release
from routing_policies.schedules import services as schedules
from routing_policies.schedules.times import describe_what
from routing_policies.services import (
    policy_draft_create,
    policy_draft_update_cells,
    rollout_rollback,
    rollout_start,
)

pytestmark = pytest.mark.django_db

FLEET = "/api/v1/fleets/fleet-a"
EDIT = {"task_type": "voice", "latency_budget": "interactive", "privacy_tier": "normal"}


@pytest.fixture
def fleet2(fleet: Any, publish_version: Callable[..., Any]) -> Any:
    """fleet-a with v1 stable and v2 published."""
    publish_version(fleet, threshold=0.6)
    return fleet


def _soon(seconds: int = 60) -> datetime:
    return timezone.now() + timedelta(seconds=seconds)


def _run_later(minutes: int = 5) -> int:
    return schedules.scheduled_changes_run_due(now=timezone.now() + timedelta(minutes=minutes))


def _schedule(fleet: Any, actor: Any, kind: str, **params: Any) -> ScheduledChange:
    return schedules.scheduled_change_create(
        actor=actor, fleet=fleet, kind=kind, run_at=_soon(), params=params
    )


def test_scheduled_rollout_start__due__runs_once_as_its_author(fleet2: Any, publisher: Any) -> None:
    schedule = _schedule(fleet2, publisher, "rollout_start", version=2)
    assert schedules.scheduled_changes_run_due() == 0  # not yet due
    assert _run_later() == 1
    assert _run_later() == 0  # never twice
    schedule.refresh_from_db()
    assert schedule.state == "done"
    assert "started rollout" in schedule.outcome
    rollout = Rollout.objects.get(fleet=fleet2)
    assert rollout.started_by == publisher
    assert rollout.stage == 5
    assert AuditEntry.objects.filter(action="scheduled_change.ran").count() == 1


def test_scheduled_rollout_start__with_holdback__the_rollout_holds_it_back(
    fleet2: Any, publisher: Any
) -> None:
    # Given a rollout of v2 scheduled to hold 20% back at 100%
    schedule = _schedule(fleet2, publisher, "rollout_start", version=2, holdback=20)

    # When it runs
    assert _run_later() == 1

    # Then the rollout it started keeps that holdback, and the schedule said so
    assert Rollout.objects.get(fleet=fleet2).holdback == 20
    assert "holding 20% back on stable at 100%" in describe_what(schedule)


def test_scheduled_publish__draft_edited_after_scheduling__does_not_run_and_says_why(
    fleet: Any, publisher: Any
) -> None:
    draft = policy_draft_create(actor=publisher, fleet=fleet)
    schedule = _schedule(fleet, publisher, "publish", note="θ down")
    policy_draft_update_cells(
        actor=publisher,
        fleet=fleet,
        revision=draft.revision,
        edits=[{**EDIT, "values": {"threshold": 0.5}}],
    )
    _run_later()
    schedule.refresh_from_db()
    assert schedule.state == "skipped"
    assert "did not run" in schedule.outcome
    assert "revision" in schedule.outcome
    assert not PolicyVersion.objects.filter(fleet=fleet, number=2).exists()


def test_scheduled_start__another_rollout_open__skipped(
    fleet2: Any, publisher: Any, publish_version: Callable[..., Any]
) -> None:
    publish_version(fleet2, threshold=0.65)  # v3
    schedule = _schedule(fleet2, publisher, "rollout_start", version=3)
    rollout_start(actor=publisher, fleet=fleet2, version=2)
    _run_later()
    schedule.refresh_from_db()
    assert schedule.state == "skipped"
    assert "still open" in schedule.outcome


def test_scheduled_start__fleet_frozen__waits_then_runs_after_release(
    fleet2: Any, publisher: Any, publish_version: Callable[..., Any]
) -> None:
    # Given a fleet frozen by an automatic rollback, and a rollout start due on it
    publish_version(fleet2, threshold=0.65)  # v3
    rollout_start(actor=publisher, fleet=fleet2, version=2)
    rollout_rollback(actor=None, fleet=fleet2, reason="errors")
    schedule = _schedule(fleet2, publisher, "rollout_start", version=3)

    # When the runner comes by while the fleet is frozen
    _run_later()

    # Then the change waits, still pending, and no rollout started
    schedule.refresh_from_db()
    assert schedule.state == "pending"
    assert Rollout.objects.filter(fleet=fleet2, candidate__number=3).count() == 0

    # When a publisher acknowledges the rollback and the runner comes by again
    fleet_freeze_release(actor=publisher, fleet=fleet2, note="looked at the errors")
    _run_later()

    # Then it runs, once
    schedule.refresh_from_db()
    assert schedule.state == "done"
    assert Rollout.objects.filter(fleet=fleet2, candidate__number=3).count() == 1


def test_scheduled_advance__guards_required_but_none__skipped(fleet2: Any, publisher: Any) -> None:
    rollout_start(actor=publisher, fleet=fleet2, version=2)
    schedule = _schedule(
        fleet2, publisher, "rollout_advance", to_stage=25, require_healthy_guards=True
    )
    _run_later()
    schedule.refresh_from_db()
    assert schedule.state == "skipped"
    assert "guards" in schedule.outcome
    assert Rollout.objects.get().stage == 5


def test_stage_plan__steps_at_their_times__start_then_advance(fleet2: Any, publisher: Any) -> None:
    now = timezone.now()
    schedules.stage_plan_create(
        actor=publisher,
        fleet=fleet2,
        version=2,
        steps=[
            {"to_stage": 5, "run_at": now + timedelta(minutes=1)},
            {"to_stage": 25, "run_at": now + timedelta(minutes=10)},
            {"to_stage": 100, "run_at": now + timedelta(minutes=20)},
        ],
    )
    schedules.scheduled_changes_run_due(now=now + timedelta(minutes=2))
    assert Rollout.objects.get().stage == 5
    schedules.scheduled_changes_run_due(now=now + timedelta(minutes=11))
    assert Rollout.objects.get().stage == 25
    assert ScheduledChange.objects.filter(state="pending").count() == 1


def test_cancel__before_it_runs__it_never_runs_and_after__refused(
    fleet2: Any, publisher: Any
) -> None:
    cancelled = _schedule(fleet2, publisher, "switch", version=2)
    schedules.scheduled_change_cancel(actor=publisher, fleet=fleet2, schedule_id=cancelled.pk)
    _run_later()
    assert not Rollout.objects.exists()
    ran = _schedule(fleet2, publisher, "cloud_pressure", theta_offset=0.2, ttl_s=60)
    _run_later()
    with pytest.raises(Exception) as refused:
        schedules.scheduled_change_cancel(actor=publisher, fleet=fleet2, schedule_id=ran.pk)
    assert refused.value.code == "schedule_not_pending"  # type: ignore[attr-defined]


@pytest.mark.django_db(transaction=True)
def test_run_due__two_runners_at_once__each_change_runs_exactly_once(
    fleet2: Any, publisher: Any, requires_postgres: None
) -> None:
    # Given ten due cloud-pressure windows and two runners started at the same moment
    made = [
        _schedule(fleet2, publisher, "cloud_pressure", theta_offset=0.01 * i, ttl_s=60)
        for i in range(10)
    ]
    start = threading.Barrier(2)
    counts: list[int] = []

    def runner() -> None:
        start.wait()
        try:
            counts.append(_run_later())
        finally:
            connection.close()

    threads = [threading.Thread(target=runner) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    # Then every change ran once: ten in all between them, ten audit entries of a run
    assert sum(counts) == 10
    assert ScheduledChange.objects.filter(pk__in=[m.pk for m in made], state="done").count() == 10
    assert AuditEntry.objects.filter(action="fleet.cloud_pressure").count() == 10


# --- API and page ----------------------------------------------------------------------------


def test_schedule_api__offset_time__stored_utc_shown_in_its_zone(
    fleet2: Any, publisher: Any, client_as: Callable[[Any], APIClient]
) -> None:
    api = client_as(publisher)
    when = (timezone.now() + timedelta(days=1)).astimezone(UTC).replace(microsecond=0)
    local = when.astimezone(__import__("zoneinfo").ZoneInfo("Asia/Tokyo"))
    answer = api.post(
        f"{FLEET}/schedules/",
        {"kind": "switch", "version": 2, "run_at": local.isoformat(), "time_zone": "Asia/Tokyo"},
        format="json",
    )
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert ScheduledChange.objects.get().run_at == when
    assert body["run_at_local"] == f"{local:%Y-%m-%d %H:%M} Asia/Tokyo"
    moved = api.patch(
        f"{FLEET}/schedules/{body['id']}",
        {"run_at": (when + timedelta(hours=1)).isoformat()},
        format="json",
    )
    assert moved.status_code == 200
    assert api.delete(f"{FLEET}/schedules/{body['id']}").json()["state"] == "cancelled"
    assert api.get(f"{FLEET}/schedules/").json()["past"][0]["state"] == "cancelled"


FUTURE = "2099-01-01T00:00:00Z"


START_2 = {"kind": "rollout_start", "version": 2, "run_at": FUTURE}


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"kind": "switch", "version": 2, "run_at": "tomorrow"}, 400, "run_at"),
        ({"kind": "switch", "version": 2, "run_at": "2000-01-01T00:00:00Z"}, 409, "run_at"),
        ({"kind": "switch", "version": 99, "run_at": FUTURE}, 404, None),
        ({"kind": "explode", "run_at": FUTURE}, 400, "kind"),
        (
            {"kind": "cloud_pressure", "theta_offset": 5, "ttl_s": 9, "run_at": FUTURE},
            400,
            "theta_offset",
        ),
        ({"kind": "cloud_pressure", "theta_offset": 0.1, "run_at": FUTURE}, 400, "ttl_s"),
        (
            {"kind": "switch", "version": 2, "run_at": FUTURE, "time_zone": "Mars/X"},
            400,
            "time_zone",
        ),
        ({"kind": "switch", "version": 2, "run_at": "x" * 5000}, 400, "run_at"),
        ({"kind": "rollout_advance", "to_stage": 5, "run_at": FUTURE}, 400, "to_stage"),
        (
            {"kind": "rollout_start", "version": 2, "holdback": 51, "run_at": FUTURE},
            400,
            "holdback",
        ),
        (
            {"kind": "rollout_start", "version": 2, "holdback": "5", "run_at": FUTURE},
            400,
            "holdback",
        ),
    ],
    ids=[
        *("not-a-time", "past", "unknown-version", "unknown-kind", "out-of-range"),
        *("missing-ttl", "zone", "huge", "stage-5-is-a-start", "holdback-51", "holdback-text"),
    ],
)
def test_schedule_api__bad_input__4xx_naming_the_field_nothing_stored(
    fleet2: Any,
    publisher: Any,
    client_as: Callable[[Any], APIClient],
    body: dict[str, Any],
    status: int,
    field: str | None,
) -> None:
    answer = client_as(publisher).post(f"{FLEET}/schedules/", body, format="json")
    assert answer.status_code == status, answer.content
    if field is not None:
        assert field in {d["field"] for d in answer.json()["error"]["details"]}
    assert not ScheduledChange.objects.exists()


def test_stage_plan_api__out_of_order__409_nothing_stored(
    fleet2: Any, publisher: Any, client_as: Callable[[Any], APIClient]
) -> None:
    body = {
        "version": 2,
        "start_at": "2099-01-02T00:00:00Z",
        "steps": [{"to_stage": 25, "run_at": "2099-01-01T00:00:00Z"}],
    }
    answer = client_as(publisher).post(f"{FLEET}/schedules/stage-plan", body, format="json")
    assert answer.status_code == 409
    assert answer.json()["error"]["details"][0]["field"] == "steps[1].run_at"
    assert not ScheduledChange.objects.exists()


def test_stage_plan_api__three_steps__a_start_and_two_advances(
    fleet2: Any, publisher: Any, client_as: Callable[[Any], APIClient]
) -> None:
    body = {
        "version": 2,
        "time_zone": "Europe/Berlin",
        "start_at": "2099-01-01T09:00:00+01:00",
        "steps": [
            {"to_stage": 25, "run_at": "2099-01-01T14:00:00+01:00", "require_healthy_guards": True},
            {"to_stage": 100, "run_at": "2099-01-02T09:00:00+01:00"},
        ],
    }
    answer = client_as(publisher).post(f"{FLEET}/schedules/stage-plan", body, format="json")
    assert answer.status_code == 201, answer.content
    upcoming = answer.json()["upcoming"]
    assert [u["kind"] for u in upcoming] == ["rollout_start", "rollout_advance", "rollout_advance"]
    assert upcoming[1]["run_at_local"] == "2099-01-01 14:00 Europe/Berlin"
    assert "if the guards are healthy" in upcoming[1]["what"]


def test_stage_plan_api__holdback__its_start_holds_it_back(
    fleet2: Any, publisher: Any, client_as: Callable[[Any], APIClient]
) -> None:
    body = {"version": 2, "start_at": "2099-01-01T09:00:00Z", "steps": [], "holdback": 10}
    answer = client_as(publisher).post(f"{FLEET}/schedules/stage-plan", body, format="json")
    assert answer.status_code == 201, answer.content
    (start,) = ScheduledChange.objects.filter(fleet=fleet2)
    assert start.params == {"version": 2, "holdback": 10}


def test_schedule_api__editor__refused(
    fleet2: Any, editor: Any, client_as: Callable[[Any], APIClient]
) -> None:
    body = {"kind": "switch", "version": 2, "run_at": "2099-01-01T00:00:00Z"}
    assert client_as(editor).post(f"{FLEET}/schedules/", body, format="json").status_code == 403
    assert client_as(editor).get(f"{FLEET}/schedules/").status_code == 200


def test_schedule_page__local_time__stored_utc_listed_upcoming(fleet2: Any, publisher: Any) -> None:
    browser = Client()
    browser.force_login(publisher)
    answer = browser.post(
        "/fleets/fleet-a/schedules/new/",
        {
            "kind": "rollout_start",
            "version": "2",
            "run_at": "2099-06-01T14:00",
            "time_zone": "Europe/Berlin",
        },
    )
    assert answer.status_code == 302, answer.content.decode()[:2000]
    assert ScheduledChange.objects.get().run_at == datetime(2099, 6, 1, 12, 0, tzinfo=UTC)
    html = browser.get("/fleets/fleet-a/schedules/").content.decode()
    assert "2099-06-01 14:00 Europe/Berlin" in html
    assert "2099-06-01 12:00 UTC" in html


def test_schedule_page__seconds_typed_in_a_far_zone__stored_utc(
    fleet2: Any, publisher: Any
) -> None:
    # Given the page's form with a time typed to the second in Tokyo (+09:00)
    browser = Client()
    browser.force_login(publisher)

    # When a switch is scheduled
    answer = browser.post(
        "/fleets/fleet-a/schedules/new/",
        {
            "kind": "switch",
            "version": "2",
            "run_at": "2099-06-01T14:00:30",
            "time_zone": "Asia/Tokyo",
        },
    )

    # Then it is stored at that moment in UTC
    assert answer.status_code == 302, answer.content.decode()[:2000]
    assert ScheduledChange.objects.get().run_at == datetime(2099, 6, 1, 5, 0, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("posted", "named"),
    [
        ({"kind": "cloud_pressure", "theta_offset": "lots", "ttl_s": "60"}, "Theta offset"),
        ({"kind": "rollout_start", "version": "2", "holdback": "51"}, "Holdback"),
        ({"kind": "switch", "version": "2", "time_zone": "Mars/Olympus"}, "Time zone"),
        ({"kind": "explode"}, "Kind"),
    ],
    ids=["not-a-number", "holdback-51", "unknown-zone", "unknown-kind"],
)
def test_schedule_page__bad_field__400_naming_it_nothing_stored(
    fleet2: Any, publisher: Any, posted: dict[str, str], named: str
) -> None:
    # Given the page's form
    browser = Client()
    browser.force_login(publisher)

    # When a value its kind's serializer refuses is posted
    answer = browser.post(
        "/fleets/fleet-a/schedules/new/",
        {"run_at": "2099-06-01T14:00", "time_zone": "UTC", **posted},
    )

    # Then the page comes back naming the field, and nothing is scheduled
    assert answer.status_code == 400
    assert named in answer.content.decode()
    assert not ScheduledChange.objects.exists()
