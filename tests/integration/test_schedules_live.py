"""Scheduled changes on real Celery workers with beat (PostgreSQL, Redis): two workers with a
beat each (two beats by mistake) carry out every due change exactly once, and a change due
while the only worker is down runs once after it is restarted."""

import time
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from controlplane.roles import Role
from routing_policies.models import AuditEntry, ScheduledChange
from routing_policies.schedules.services import scheduled_change_create
from tests.factories import UserFactory, make_fleet
from tests.integration.test_telemetry_durability import Worker, _wait_until
from tests.live_server import empty_test_redis

pytestmark = pytest.mark.integration

WAIT_S = 90.0  # an outer bound: each wait ends as soon as its condition holds
FAST = {"SCHEDULE_RUN_INTERVAL_S": "0.5", "ALERT_EVALUATE_INTERVAL_S": "60"}


@pytest.fixture
def fleet_and_publisher(transactional_db: None, requires_postgres: None) -> tuple[Any, Any]:
    empty_test_redis()
    publisher = UserFactory(role=Role.PUBLISHER, username="pia")
    return make_fleet(slug="scheduled", actor=publisher), publisher


def _windows(fleet: Any, publisher: Any, count: int, in_s: float) -> list[int]:
    return [
        scheduled_change_create(
            actor=publisher,
            fleet=fleet,
            kind="cloud_pressure",
            run_at=timezone.now() + timedelta(seconds=in_s),
            params={"theta_offset": 0.01 * (i + 1), "ttl_s": 600},
        ).pk
        for i in range(count)
    ]


def _done(ids: list[int]) -> int:
    return ScheduledChange.objects.filter(pk__in=ids, state="done").count()


def test_schedules__two_beats_at_once__each_change_runs_exactly_once(
    fleet_and_publisher: Any,
) -> None:
    fleet, publisher = fleet_and_publisher
    # Given two workers, each with its own beat, running the round every 0.5 s
    with Worker(FAST), Worker(FAST):
        # When twenty changes fall due at once
        ids = _windows(fleet, publisher, 20, in_s=1)
        _wait_until(lambda: _done(ids) == 20, WAIT_S, "the scheduled changes did not run")
        time.sleep(2)  # a few more rounds of both beats
    # Then each ran once: twenty audited runs, twenty cloud-pressure changes
    assert AuditEntry.objects.filter(fleet=fleet, action="scheduled_change.ran").count() == 20
    assert AuditEntry.objects.filter(fleet=fleet, action="fleet.cloud_pressure").count() == 20


def test_schedules__due_while_the_worker_is_down__runs_once_after_restart(
    fleet_and_publisher: Any,
) -> None:
    fleet, publisher = fleet_and_publisher
    # Given a worker that runs one change, then is killed (SIGKILL, beat with it)
    worker = Worker(FAST)
    with worker:
        first = _windows(fleet, publisher, 1, in_s=0.5)
        _wait_until(lambda: _done(first) == 1, WAIT_S, "the first change did not run")
        worker.sigkill()
        # When a change falls due while no worker runs
        later = _windows(fleet, publisher, 1, in_s=0.5)
        time.sleep(1.5)
        assert _done(later) == 0
        # Then a restarted worker runs it once, and the first one not again
        with Worker(FAST):
            _wait_until(lambda: _done(later) == 1, WAIT_S, "the late change did not run")
            time.sleep(2)
    runs = AuditEntry.objects.filter(fleet=fleet, action="scheduled_change.ran")
    assert runs.count() == 2
