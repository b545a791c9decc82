"""A rollout scoped to a segment, end to end (issue 26): the real control plane (uvicorn,
PostgreSQL, Redis, its MQTT publisher, two `mqtt_link` processes), a real Mosquitto, and SDK
devices on both transports reporting their attributes. WebSocket devices are told their
version by the server from what they reported; MQTT devices compute it themselves from the
retained state's `scoped_rollout` with the same function. Exactly the segment's devices move
with the stages; the others never apply (nor are pushed) the candidate.
"""

from collections.abc import Callable
from typing import Any

import pytest

from edge_sdk.segments import device_attributes
from routing_policies.models import Device as DeviceRow
from routing_policies.segments.services import segment_create
from routing_policies.selectors import fleet_assignment
from routing_policies.services import rollout_advance, rollout_start

from .test_mqtt_fleet_live import (  # noqa: F401  # the fixtures this test runs on
    CONVERGE_S,
    Fleet,
    broker,
    control_plane,
    mqtt_prefix,
    sdk_fleet,
    server,
)
from .ws_clients import wait_until

pytestmark = pytest.mark.integration

NPU = {"attribute": "accelerator", "equals": "npu"}


def _attributes(fleet: Fleet) -> dict[str, dict[str, Any]]:
    return {
        device_id: device_attributes(
            platform=device.config.platform,
            model=device.config.model,
            reported=device.config.attributes,
        )
        for device_id, device in fleet.devices.items()
    }


def _converged(fleet: Fleet, what: str) -> dict[str, int | None]:
    """Wait until every device runs the version the server assigns it from its attributes,
    and its ack of it has landed; that assignment."""
    assignment = fleet_assignment(fleet.fleet.pk)
    attributes = _attributes(fleet)
    wanted = {d: assignment.version_for(d, attributes[d]) for d in fleet.devices}
    wait_until(
        lambda: all(fleet.devices[d].policy.version == wanted[d] for d in fleet.devices),
        timeout=CONVERGE_S,
        what=f"every device to run its version ({what})",
    )
    wait_until(
        lambda: (
            dict(
                DeviceRow.objects.filter(fleet=fleet.fleet).values_list(
                    "device_id", "acked_version"
                )
            )
            == wanted
        ),
        timeout=CONVERGE_S,
        interval=0.1,
        what=f"every device's ack to land ({what})",
    )
    return wanted


def test_scoped_rollout__websocket_and_mqtt__exactly_the_segments_buckets_move(
    sdk_fleet: Fleet,  # noqa: F811  # the fixture imported above
    publish_version: Callable[..., Any],
    publisher: Any,
) -> None:
    # Given v2 published and 12 SDK devices, 6 on each transport, half of each with an NPU
    fleet = sdk_fleet.fleet
    publish_version(fleet, threshold=0.75)
    ids = {
        (transport, accelerator): [f"{transport[:2]}-{accelerator}-{n}" for n in range(3)]
        for transport in ("websocket", "mqtt")
        for accelerator in ("npu", "cpu")
    }
    for (transport, accelerator), device_ids in ids.items():
        for device_id in device_ids:
            sdk_fleet.add(device_id, transport, attributes={"accelerator": accelerator})
    sdk_fleet.start()
    _converged(sdk_fleet, "v1")
    segment_create(actor=publisher, fleet=fleet, name="npu", rule=NPU)
    npu = {d for (_, accelerator), group in ids.items() if accelerator == "npu" for d in group}
    cpu = set(sdk_fleet.devices) - npu

    # When v2 rolls out to segment npu, at 25%
    rollout_start(actor=publisher, fleet=fleet, version=2, segment="npu")
    rollout_advance(actor=publisher, fleet=fleet, to_stage=25)

    # Then each device runs what the one function gives it: the NPU devices of the stage's
    # buckets v2, everyone else v1, on both transports
    wanted = _converged(sdk_fleet, "25% of npu")
    assignment = fleet_assignment(fleet.pk)
    whole = type(assignment)(1, 2, assignment.salt, percent=25, rollout_id=assignment.rollout_id)
    assert {d for d, v in wanted.items() if v == 2} == {d for d in npu if whole.version_for(d) == 2}

    # When it advances to 100% of the segment
    rollout_advance(actor=publisher, fleet=fleet, to_stage=100)

    # Then exactly the NPU devices run v2, and the rollout API counts it so
    wanted = _converged(sdk_fleet, "100% of npu")
    assert {d for d, v in wanted.items() if v == 2} == npu
    status = sdk_fleet.status()
    assert status["rollout"]["segment"] == "npu"
    versions = {row["version"]: row for row in status["convergence"]["versions"]}
    assert (versions[2]["assigned"], versions[2]["acked"]) == (6, 6)
    assert (versions[1]["assigned"], versions[1]["acked"]) == (6, 6)
    assert status["convergence"]["not_acked"]["count"] == 0

    # and the devices outside the segment never applied the candidate: v1 is all they ran
    # (a WebSocket device applies every `policy` frame it is sent, an MQTT one every version
    # its state assigns it)
    assert all(sdk_fleet.applied[d] == [1] for d in cpu), {d: sdk_fleet.applied[d] for d in cpu}
    assert all(sdk_fleet.applied[d] == [1, 2] for d in npu)
