"""The push tier's frames and the version it picks for a connected device: each built in one
place, and the connected device's choice is the bucket rule of `FleetAssignment`."""

import json

from hypothesis import given
from hypothesis import strategies as st

from routing_policies.assignment import DeviceBucket, FleetAssignment
from routing_policies.push import frames

device_ids = st.text(min_size=1, max_size=64)
salts = st.text(alphabet="0123456789abcdef", min_size=16, max_size=16)
stages = st.sampled_from([0, 5, 25, 100])


@given(
    device_id=device_ids,
    first_salt=salts,
    second_salt=salts,
    percents=st.lists(stages),
    holdback=st.sampled_from([0, 5, 50]),
)
def test_device_bucket__stages_and_rollouts__same_version_as_the_assignment_rule(
    device_id: str, first_salt: str, second_salt: str, percents: list[int], holdback: int
) -> None:
    # Given a connected device whose bucket is kept across pushes
    kept = DeviceBucket(device_id)

    # When its fleet goes through stages of one rollout, then of another (a new salt)
    for salt in (first_salt, second_salt):
        for percent in percents:
            assignment = FleetAssignment(
                stable=1, candidate=2, salt=salt, percent=percent, rollout_id=7, holdback=holdback
            )

            # Then it runs what the assignment gives any device with its id
            assert kept.version_under(assignment) == assignment.version_for(device_id)


def test_device_bucket__no_rollout__the_stable_version() -> None:
    # Given a fleet on v3 with no rollout
    # When a connected device is told its version
    # Then it is v3 (and nothing is hashed: no salt)
    assert DeviceBucket("phone-1").version_under(FleetAssignment(stable=3)) == 3


def test_policy_frame__open_rollout__document_spliced_with_the_rollout_id_and_stage() -> None:
    # Given a fleet at 25% of rollout 7 and a cached document body
    assignment = FleetAssignment(stable=1, candidate=2, salt="s", percent=25, rollout_id=7)
    body = json.dumps({"version": 2, "fleet": "f"}, separators=(",", ":"))[1:-1]

    # When the policy frame is built
    frame = json.loads(frames.policy_frame(body, frames.rollout_of(assignment)))

    # Then it is PROTOCOL.md's `policy` frame naming the rollout and its stage
    rollout = {"id": 7, "stage": 25}
    assert frame == {"type": "policy", "version": 2, "fleet": "f", "rollout": rollout}


def test_rollout_of__no_open_rollout__null() -> None:
    # Given a fleet without a rollout, and one just completed (its candidate is stable now)
    # When the frame's rollout is built
    # Then it is null
    assert frames.rollout_of(FleetAssignment(stable=2)) is None


def test_cloud_pressure_frame__seconds_left__ttl_counted_down_or_nothing() -> None:
    # Given a nudge of +0.1 that ends at t=100
    # When the frame is built at t=40, and at t=99.5
    live = frames.cloud_pressure_frame(theta_offset=0.1, until=100.0, now=40.0)
    ending = frames.cloud_pressure_frame(theta_offset=0.1, until=100.0, now=99.5)

    # Then the first says 60 s are left; less than a second left sends nothing
    assert live is not None
    assert json.loads(live) == {"type": "cloud_pressure", "theta_offset": 0.1, "ttl_s": 60}
    assert ending is None


def test_assignment_message__reconcile__carries_the_assignment_and_its_rollout() -> None:
    # Given a fleet at 5% of rollout 3
    assignment = FleetAssignment(stable=1, candidate=2, salt="s", percent=5, rollout_id=3)

    # When a process's reconcile builds the message
    message = frames.assignment_message(fleet_id=9, assignment=assignment, reconcile=True)

    # Then it carries ids and numbers only, and survives the trip through JSON
    decoded = json.loads(json.dumps(message))
    assert FleetAssignment.from_dict(decoded["assignment"]) == assignment
    assert (decoded["kind"], decoded["fleet_id"], decoded["rollout"]) == (
        "assignment",
        9,
        {"id": 3, "stage": 5},
    )
    assert decoded["reconcile"] is True


def test_rollout_of__holdback__named_beside_the_stage() -> None:
    # Given a rollout at 100% holding 5% back, and one without a holdback
    held = FleetAssignment(stable=1, candidate=2, salt="s", percent=100, rollout_id=7, holdback=5)
    plain = FleetAssignment(stable=1, candidate=2, salt="s", percent=100, rollout_id=7)

    # Then the frame's rollout names the holdback (an added field), and only when there is one
    assert frames.rollout_of(held) == {"id": 7, "stage": 100, "holdback": 5}
    assert frames.rollout_of(plain) == {"id": 7, "stage": 100}
