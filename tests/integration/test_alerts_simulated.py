"""The simulator's buggy-candidate scenario against a real ASGI server, a real Celery worker
(with beat), PostgreSQL and Redis: the guarded rollout of the buggy version rolls back with no
one clicking, and when an operator then switches the whole fleet to it, the cloud-share jump
rule fires.

The simulated devices are the SDK's `Device` (edge_sdk.simulate); devices running v2 use the
less confident model, so their cloud share goes from about 30% to about 70%.
"""

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from edge_sdk.simulate.fleet import SimulatedFleet
from routing_policies.assignment import bucket
from routing_policies.models import AuditEntry, Rollout, RolloutEvent
from routing_policies.reviews.services import fleet_freeze_release
from routing_policies.services import fleet_switch_version
from telemetry.alerts.models import AlertRule, RolloutGuardSet
from telemetry.alerts.services import alert_rule_create, rollout_start_guarded
from tests.live_server import asgi_server, empty_test_redis, require_postgres_and_redis

from .simulated import buggy_candidate_fleet
from .test_telemetry_durability import Worker
from .ws_clients import BackgroundLoop, wait_until

__all__ = ["asgi_server"]

pytestmark = pytest.mark.integration

# The 5% cohort is drawn by the rollout's random salt: of 60 devices it was empty one time in
# 20 (0.95^60), and the guards then had nothing to judge. Of 200 it is empty one time in 30,000
# and holds ~10 devices, ~5% of the traffic whatever the count.
DEVICES = 200
RATE = 40.0  # tasks per second for the whole fleet
# The guards judge the candidate's cloud share (~0.66) against the stable one (~0.25) with a
# 0.2-pt threshold. With n candidate events its standard error is sqrt(p(1-p)/n): 0.10 at n=20,
# where the first judgement missed the breach one time in ~50 and a latency guard (slow on a
# busy machine) could roll back alone; 0.06 at n=60, so the margin is over 3 standard errors.
# ~2 candidate events a second: about 30 s of traffic.
GUARD_MIN_SAMPLES = 60
# Outer bounds: each wait ends as soon as its condition holds.
CONNECT_TIMEOUT_S = 240.0  # 200 devices enrolling at 25/s, slower on a busy server
GUARDS_TIMEOUT_S = 300.0


@pytest.fixture
def worker(transactional_db: None) -> Iterator[Worker]:
    """A real Celery worker with beat, judging alerts every second."""
    require_postgres_and_redis("the simulated fleet")
    empty_test_redis()
    with Worker(
        {
            "TELEMETRY_SWEEP_AFTER_S": "1",
            "TELEMETRY_SWEEP_INTERVAL_S": "1",
            "TELEMETRY_RATE_LIMIT_BATCHES": "0",
            "ALERT_EVALUATE_INTERVAL_S": "1",
        }
    ) as process:
        yield process


def _wait_for_the_start_of_a_minute(latest_second: float = 5.0) -> None:
    """Return within the first `latest_second` seconds of a wall-clock minute."""
    now = datetime.now(UTC)
    into = now.second + now.microsecond / 1e6
    if into > latest_second:
        time.sleep(60 - into + 1.0)


def _all_on(sim: SimulatedFleet, version: int) -> bool:
    return all(d.device.policy.version == version for d in sim.devices.values())


def _guards_read(rollout: Rollout) -> str:
    """What the guards last said (for a failure message): verdict, and each guard's reading."""
    guard_set = RolloutGuardSet.objects.filter(rollout=rollout).first()
    if guard_set is None:
        return "no guard set"
    guards = [
        (g.metric, g.state, g.candidate_value, g.stable_value, g.candidate_samples)
        for g in guard_set.guards.all()
    ]
    return f"verdict {guard_set.verdict} at {guard_set.evaluated_at}: {guards}"


def test_buggy_candidate__guarded_rollout_rolls_back_then_jump_rule_fires_on_the_switch(
    asgi_server: str,
    worker: Worker,
    background: BackgroundLoop,
    fleet: Any,
    fleet_key: str,
    publish_version: Any,
    publisher: Any,
) -> None:
    # Given a simulated fleet on v1, v2 published (the buggy candidate), and a cloud-share
    # jump rule comparing each minute with the one before
    publish_version(fleet, threshold=0.7)
    jump = alert_rule_create(
        actor=publisher,
        fleet=fleet,
        name="Cloud share jump",
        metric="cloud_share",
        condition="rises_by",
        # With the whole fleet on v2 the simulated cloud saturates, the devices' cloud-latency
        # estimates rise and the fleet settles near 55% cloud: the minute-over-minute rise peaks
        # at ~0.25, so 0.2 fired or not by chance (it missed once in a loaded CI run).
        threshold=0.15,
        window_minutes=1,
        min_samples=100,
    )
    sim = buggy_candidate_fleet(
        base_url=asgi_server, fleet_key=fleet_key, devices=DEVICES, rate=RATE
    )
    background.run(sim.start())
    try:
        wait_until(
            lambda: _all_on(sim, 1),
            timeout=CONNECT_TIMEOUT_S,
            interval=0.2,
            what="every device on v1",
        )

        # When v2 is rolled out at 5% with the default guards
        rollout = rollout_start_guarded(
            actor=publisher,
            fleet=fleet,
            version=2,
            guard_options={
                "guards": "default",
                "min_samples": GUARD_MIN_SAMPLES,
                "window_minutes": 10,
            },
        )
        cohort = {d for d in sim.devices if bucket(rollout.salt, d) < 500}
        assert cohort, "no simulated device fell in the 5% cohort"

        # Then, with no one clicking, the guards roll it back and every device returns to v1
        try:
            wait_until(
                lambda: Rollout.objects.get(pk=rollout.pk).state == Rollout.State.ROLLED_BACK,
                timeout=GUARDS_TIMEOUT_S,
                interval=0.5,
                what="the guards to roll the buggy candidate back",
            )
        except AssertionError as failure:
            raise AssertionError(f"{failure}; {_guards_read(rollout)}") from None
        wait_until(
            lambda: _all_on(sim, 1), timeout=CONNECT_TIMEOUT_S, interval=0.2, what="all on v1"
        )

        # When an operator then switches the whole fleet to v2 at once (no guards), with a
        # whole minute of traffic behind (the rule compares the current minute with the one
        # before: in the fleet's first minute it has nothing to compare with) and early in a
        # minute (a switch late in a minute splits the rise between two minutes, each below
        # the threshold: this test failed that way in a CI run)
        wait_until(
            lambda: AlertRule.objects.get(pk=jump.pk).last_previous is not None,
            timeout=240,
            interval=0.5,
            what="the jump rule to have a previous minute to compare with",
        )
        _wait_for_the_start_of_a_minute()
        # (the automatic rollback froze the fleet's rollouts: a publisher acknowledges it first)
        fleet_freeze_release(actor=publisher, fleet=fleet, note="seen: the candidate's cloud jump")
        fleet_switch_version(actor=publisher, fleet=fleet, version=2)

        # Then the cloud-share jump rule fires
        seen: list[tuple[Any, ...]] = []

        def jump_fired() -> bool:
            rule = AlertRule.objects.get(pk=jump.pk)
            reading = (rule.state, rule.last_previous, rule.last_value, rule.last_samples)
            if not seen or seen[-1] != reading:
                seen.append(reading)
            return rule.state == "firing"

        try:
            wait_until(jump_fired, timeout=180, interval=0.5, what="the jump rule to fire")
        except AssertionError as failure:
            # (state, previous window's cloud share, this window's, samples) as they went by
            raise AssertionError(f"{failure}; the rule read {seen[:6]} … {seen[-6:]}") from None
    finally:
        background.run(sim.stop(), timeout=60)

    rollout.refresh_from_db()
    # (the saturated cloud may also push the candidate's P95 over a budget: both are named)
    assert rollout.reason.startswith("Guard fired: ")
    assert "candidate cloud share" in rollout.reason
    assert RolloutEvent.objects.get(rollout=rollout, action="rolled_back").actor_name == "system"
    assert AuditEntry.objects.filter(action="rollout.rolled_back", actor=None).exists()
    guard = RolloutGuardSet.objects.get(rollout=rollout).guards.get(metric="cloud_share")
    assert guard.state == "firing"
    assert guard.candidate_value is not None
    assert guard.stable_value is not None
    assert guard.candidate_value - guard.stable_value > 0.2
    jump.refresh_from_db()
    assert jump.last_previous is not None
    assert jump.last_value is not None
    assert jump.last_value - jump.last_previous >= 0.15
