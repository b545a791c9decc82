"""Bucketing (PROTOCOL.md): a device's fixed place in a rollout; stages only add devices."""

import random
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from routing_policies.assignment import BUCKETS, FleetAssignment, bucket
from routing_policies.models import Device
from routing_policies.selectors import candidate_cohort_count

# Worked out by hand from PROTOCOL.md's formula:
# int(sha256(f"{salt}:{device_id}".encode()).hexdigest()[:8], 16) % 10000
KNOWN_BUCKETS = [
    ("salt", "device-1", 3416),  # sha256("salt:device-1") starts bd6af538
    ("a1b2c3d4e5f60718", "phone-0042", 6758),  # fa19ad46
    ("", "x", 4660),  # 37469d44
    ("s", "ünïcode-dev", 5365),  # 15a29085: the id is UTF-8 encoded
]

device_ids = st.text(min_size=1, max_size=64)
salts = st.text(alphabet="0123456789abcdef", min_size=16, max_size=16)


def _at(percent: int, salt: str) -> FleetAssignment:
    return FleetAssignment(stable=1, candidate=2, salt=salt, percent=percent, rollout_id=9)


@pytest.mark.parametrize(("salt", "device_id", "expected"), KNOWN_BUCKETS)
def test_bucket__known_inputs__matches_protocol_formula(
    salt: str, device_id: str, expected: int
) -> None:
    # Given a salt and a device id whose hash was worked out by hand
    # When the server buckets the device
    # Then it lands where every SDK computing PROTOCOL.md's formula puts it
    assert bucket(salt, device_id) == expected


@given(salt=salts, device_id=device_ids)
def test_bucket__any_device__in_range_and_stable(salt: str, device_id: str) -> None:
    # Given any device in any rollout
    # When it is bucketed twice
    first, second = bucket(salt, device_id), bucket(salt, device_id)

    # Then it has one fixed place in 0..9999
    assert first == second
    assert 0 <= first < BUCKETS


@given(salt=salts, device_id=device_ids)
def test_fleet_assignment__later_stage__only_adds_devices(salt: str, device_id: str) -> None:
    # Given a device on the candidate at some stage
    stages = [_at(percent, salt) for percent in (5, 25, 100)]
    versions = [stage.version_for(device_id) for stage in stages]

    # When the rollout advances
    # Then it stays on the candidate at every later stage (no device is ever taken back)
    first_on_candidate = versions.index(2)  # 100% puts everyone on the candidate
    assert all(v == 2 for v in versions[first_on_candidate:])
    assert all(v == 1 for v in versions[:first_on_candidate])


@given(salt=salts, device_id=device_ids)
def test_fleet_assignment__stage__candidate_exactly_when_bucket_below_stage(
    salt: str, device_id: str
) -> None:
    # Given a device and its bucket
    place = bucket(salt, device_id)

    # When the rollout is at 5% and at 25%
    # Then it runs the candidate exactly when its bucket is below 500 / 2500
    assert (_at(5, salt).version_for(device_id) == 2) == (place < 500)
    assert (_at(25, salt).version_for(device_id) == 2) == (place < 2500)
    assert _at(100, salt).version_for(device_id) == 2


def test_fleet_assignment__no_rollout__everyone_on_stable() -> None:
    # Given a fleet with no rollout
    assignment = FleetAssignment(stable=3)

    # When any device asks
    # Then it runs the stable version and is not in any cohort
    assert assignment.version_for("phone-1") == 3
    assert not assignment.in_candidate_cohort("phone-1")


def test_fleet_assignment__as_dict_round_trip__same_assignment() -> None:
    # Given an assignment as it travels between processes
    original = _at(25, "00ff00ff00ff00ff")

    # When it is turned into JSON-friendly data and back
    copy = FleetAssignment.from_dict(original.as_dict())

    # Then every device gets the same version from the copy
    assert copy == original


@pytest.mark.parametrize(("percent", "low", "high"), [(5, 0.04, 0.06), (25, 0.235, 0.265)])
def test_fleet_assignment__10000_random_devices__stage_share_lands_in_cohort(
    percent: int, low: float, high: float
) -> None:
    # Given 10,000 random device ids and a random salt
    rng = random.Random(20261129)
    salt = f"{rng.getrandbits(64):016x}"
    ids = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(10_000)]

    # When the rollout is at `percent`
    on_candidate = sum(_at(percent, salt).in_candidate_cohort(d) for d in ids)

    # Then about that share of the fleet runs the candidate (loose bounds, ~5 sigma)
    assert low * len(ids) <= on_candidate <= high * len(ids)


@pytest.mark.django_db
@pytest.mark.parametrize("percent", [5, 25, 100])
def test_candidate_cohort_count__database__counts_the_devices_the_servers_push_to(
    fleet: Any, requires_postgres: None, percent: int
) -> None:
    # Given 2,000 enrolled devices and a rollout of v2 at `percent`
    Device.objects.bulk_create(
        Device(fleet=fleet, device_id=f"dev-{i:05d}", token_hash=f"{i:064x}") for i in range(2000)
    )
    assignment = _at(percent, "9c1e4d2b7a03f5e8")

    # When the dashboard counts the cohort in SQL
    counted = candidate_cohort_count(fleet, assignment)

    # Then it is exactly the number of devices the bucket rule puts on the candidate
    expected = sum(assignment.in_candidate_cohort(f"dev-{i:05d}") for i in range(2000))
    assert counted == expected


def _held(percent: int, salt: str, holdback: int = 10) -> FleetAssignment:
    return FleetAssignment(
        stable=1, candidate=2, salt=salt, percent=percent, rollout_id=9, holdback=holdback
    )


@given(salt=salts, device_id=device_ids)
def test_fleet_assignment__holdback_at_100__top_buckets_stay_on_stable(
    salt: str, device_id: str
) -> None:
    # Given a device and a rollout holding 10% back
    place = bucket(salt, device_id)

    # When it is at 5, 25 and 100%
    versions = [_held(percent, salt).version_for(device_id) for percent in (5, 25, 100)]

    # Then the stages below 100 are unchanged, at 100 the buckets from 9000 up stay on stable,
    # and the stages still only add devices
    assert (versions[0] == 2) == (place < 500)
    assert (versions[1] == 2) == (place < 2500)
    assert (versions[2] == 2) == (place < 9000)
    first_on_candidate = versions.index(2) if 2 in versions else len(versions)
    assert all(v == 2 for v in versions[first_on_candidate:])


def test_fleet_assignment__holdback__share_and_round_trip() -> None:
    held = _held(100, "00ff00ff00ff00ff", holdback=5)
    assert (held.candidate_share, held.splits, held.candidate_buckets) == (95, True, 9500)
    assert FleetAssignment.from_dict(held.as_dict()) == held
    assert _held(25, "00ff00ff00ff00ff", holdback=5).candidate_share == 25
    assert FleetAssignment(stable=3, holdback=5).candidate_share == 0


@pytest.mark.django_db
def test_candidate_cohort_count__holdback_at_100__sql_matches_the_bucket_rule(
    fleet: Any, requires_postgres: None
) -> None:
    # Given 2,000 devices and a rollout at 100% holding 20% back
    Device.objects.bulk_create(
        Device(fleet=fleet, device_id=f"dev-{i:05d}", token_hash=f"{i:064x}") for i in range(2000)
    )
    assignment = _held(100, "9c1e4d2b7a03f5e8", holdback=20)

    # When the cohort is counted in SQL
    counted = candidate_cohort_count(fleet, assignment)

    # Then it is the devices the bucket rule puts on the candidate: about 80%, not all
    expected = sum(assignment.in_candidate_cohort(f"dev-{i:05d}") for i in range(2000))
    assert counted == expected
    assert 0.75 * 2000 < counted < 0.85 * 2000
