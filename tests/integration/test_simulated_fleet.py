"""200 simulated devices (the SDK's `Device`, driven by `edge_sdk.simulate`) against a real
ASGI server, a real Celery worker, PostgreSQL and Redis, through a rollout and a rollback.

Checks what each device ran (the version its bucket gives it at every stage, PROTOCOL.md's
bucket rule) and what it reported (every task's telemetry event stored once, carrying the
version the device ran when the task started; the server's totals per device and version
equal the simulator's; nothing pending, dropped or rejected).
"""

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db.models import Count

from edge_sdk.simulate.fleet import SimulatedFleet, reported_by_device
from routing_policies.assignment import bucket
from routing_policies.services import rollout_advance, rollout_rollback, rollout_start
from telemetry.models import Event, LandedBatch
from tests.live_server import (  # noqa: F401 (asgi_server: a session fixture)
    asgi_server,
    require_postgres_and_redis,
)

from .simulated import buggy_candidate_fleet
from .test_telemetry_durability import Worker
from .ws_clients import BackgroundLoop, wait_until

pytestmark = pytest.mark.integration

DEVICES = 200
RATE = 60.0  # tasks per second for the whole fleet
# Traffic at each stage is counted, not timed (a loaded machine runs fewer tasks a second): the
# tasks the fleet must have reported under a version before the next step. The cloud shares are
# compared with a 0.2-pt margin; v2's (~0.66, against ~0.25 on v1) over at least 140 events has
# a standard error under 0.04, so the margin is over 5 of them. ~20 s of traffic in all.
AT_LEAST = {"v1": 2 * DEVICES, "5%": 20, "25%": 120, "rolled back": DEVICES // 2}
# Outer bounds: each wait ends as soon as what it waits for has happened.
CONNECT_TIMEOUT_S = 240.0  # 200 devices enrolling and connecting on a busy server
STAGE_TIMEOUT_S = 90.0


@pytest.fixture
def worker(transactional_db: None) -> Iterator[Worker]:
    """A real Celery worker (solo pool, beat) draining landed telemetry into events."""
    require_postgres_and_redis("the simulated fleet")
    with Worker({"TELEMETRY_SWEEP_AFTER_S": "1", "TELEMETRY_SWEEP_INTERVAL_S": "1"}) as process:
        yield process


def _versions(fleet: SimulatedFleet) -> dict[str, int | None]:
    return {d: sim.device.policy.version for d, sim in fleet.devices.items()}


def _reported(fleet: SimulatedFleet, version: int) -> int:
    """Tasks the fleet's devices have reported so far under `version`."""
    return sum(sim.reported[version] for sim in list(fleet.devices.values()))


def _run_until_reported(fleet: SimulatedFleet, version: int, count: int, stage: str) -> None:
    """Let the simulated fleet work (its tasks run on the background loop) until its devices
    have reported `count` more tasks under `version`."""
    target = _reported(fleet, version) + count
    wait_until(
        lambda: _reported(fleet, version) >= target,
        timeout=STAGE_TIMEOUT_S,
        interval=0.1,
        what=f"{count} tasks reported under v{version} at {stage}",
    )


def _wait_assigned(
    fleet: SimulatedFleet, expected: dict[str, int], what: str, timeout: float = STAGE_TIMEOUT_S
) -> None:
    """Wait until every device runs its expected version; on failure say which do not, their
    connection states and their last errors."""
    try:
        wait_until(lambda: _versions(fleet) == expected, timeout=timeout, what=what)
    except AssertionError:
        wrong = {d: v for d, v in _versions(fleet).items() if v != expected[d]}
        errors = Counter(str(fleet.devices[d].device.last_error) for d in wrong)
        raise AssertionError(
            f"{what}: {len(wrong)} devices on another version, e.g. {list(wrong.items())[:5]};"
            f" states {dict(fleet.connection_states())}; errors {errors.most_common(3)}"
        ) from None


def test_simulated_fleet__rollout_5_25_and_rollback__devices_run_and_report_their_bucket_version(
    asgi_server: str,  # noqa: F811 (the fixture imported above)
    worker: Worker,
    background: BackgroundLoop,
    fleet: Any,
    fleet_key: str,
    publish_version: Callable[..., Any],
    publisher: Any,
) -> None:
    # Given 200 simulated devices of a fleet on v1, with v2 published (a buggy candidate:
    # devices that run v2 use the less confident model), half of them on protobuf (frames,
    # documents, telemetry), half on JSON (docs/PROTOCOL.md, "Binary frames and compression")
    publish_version(fleet, threshold=0.7)
    sim = buggy_candidate_fleet(
        base_url=asgi_server, fleet_key=fleet_key, devices=DEVICES, rate=RATE, encoding="mixed"
    )
    background.run(sim.start())
    try:
        _wait_assigned(
            sim, dict.fromkeys(sim.devices, 1), "every device to run v1", CONNECT_TIMEOUT_S
        )
        assert {d.encoding for d in sim.devices.values()} == {"json", "protobuf"}
        _run_until_reported(sim, 1, AT_LEAST["v1"], "v1")

        # When v2 starts at 5%, then advances to 25%
        rollout = rollout_start(actor=publisher, fleet=fleet, version=2)
        buckets = {d: bucket(rollout.salt, d) for d in sim.devices}
        at_5 = {d for d, b in buckets.items() if b < 500}
        _wait_assigned(sim, {d: 2 if d in at_5 else 1 for d in sim.devices}, "the 5% stage")
        _run_until_reported(sim, 2, AT_LEAST["5%"], "5%")
        rollout_advance(actor=publisher, fleet=fleet, to_stage=25)
        at_25 = {d for d, b in buckets.items() if b < 2500}
        _wait_assigned(sim, {d: 2 if d in at_25 else 1 for d in sim.devices}, "the 25% stage")
        _run_until_reported(sim, 2, AT_LEAST["25%"], "25%")

        # and is rolled back
        rollout_rollback(actor=publisher, fleet=fleet, reason="cloud share alarm")
        _wait_assigned(sim, dict.fromkeys(sim.devices, 1), "every device back on v1")
        _run_until_reported(sim, 1, AT_LEAST["rolled back"], "the rollback")
    finally:
        background.run(sim.stop(drain_s=STAGE_TIMEOUT_S), timeout=2 * STAGE_TIMEOUT_S)

    # Then each device ran exactly what its bucket gives it, stage by stage
    assert 0 < len(at_5) < len(at_25) < DEVICES
    for device_id, device in sim.devices.items():
        expected = [1, 2, 1] if device_id in at_25 else [1]
        assert device.applied == expected, device_id

    # and reported every task: nothing left unsent, dropped or refused
    for device in sim.devices.values():
        counters = device.device.telemetry.counters()
        assert (counters["pending"], counters["dropped"], counters["rejected"]) == (0, 0, 0)
    reported = reported_by_device(sim)
    sent = sum(sum(per_version.values()) for per_version in reported.values())
    assert sent > DEVICES  # traffic at every stage, not a trickle
    assert sent == sum(
        d.device.telemetry.delivered + d.device.telemetry.duplicates for d in sim.devices.values()
    )

    # and the server holds exactly that, per device and version, each event once
    wait_until(
        lambda: not LandedBatch.objects.exists() and Event.objects.count() >= sent,
        timeout=STAGE_TIMEOUT_S,
        interval=0.2,
        what="the worker to store every accepted event",
    )
    stored: dict[str, dict[int, int]] = {}
    for row in Event.objects.values("device_id", "policy_version").annotate(n=Count("pk")):
        stored.setdefault(row["device_id"], {})[row["policy_version"]] = row["n"]
    assert stored == {d: per_version for d, per_version in reported.items() if per_version}

    # and v2 was reported only by the candidate cohort, whose cloud share shows the alarm
    assert {d for d, per_version in stored.items() if 2 in per_version} <= at_25
    routes = Counter(Event.objects.values_list("policy_version", "route"))
    cloud_share = {
        version: routes[(version, "cloud")] / sum(n for (v, _), n in routes.items() if v == version)
        for version in (1, 2)
    }
    assert cloud_share[2] > cloud_share[1] + 0.2
