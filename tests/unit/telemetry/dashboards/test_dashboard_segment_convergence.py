"""The dashboard's convergence panel with a segment filter (issue 26): it counts the live
devices the segment's rule matches now (their attributes as the registry holds them), what
each is assigned by the rollout's own rule and what it acked, never the whole fleet's."""

from typing import Any

import pytest
from django.utils import timezone

from edge_sdk.segments import device_attributes
from routing_policies.models import Device
from routing_policies.segments.services import segment_create
from routing_policies.selectors import fleet_assignment
from routing_policies.services import device_enroll, device_revoke, rollout_advance, rollout_start
from telemetry.dashboards.selectors import DashboardView, fleet_dashboard

pytestmark = pytest.mark.django_db

API = "/api/v1/fleets/fleet-a/dashboard"
# device id → (attributes, acked version, online now)
DEVICES: dict[str, tuple[dict[str, Any], int | None, bool]] = {
    "npu-big": ({"accelerator": "npu", "memory_gb": 12}, 2, True),
    "npu-small": ({"accelerator": "npu", "memory_gb": 4}, 1, True),
    "npu-gone": ({"accelerator": "npu", "memory_gb": 12}, 2, False),  # revoked below
    "cpu-big": ({"accelerator": "cpu", "memory_gb": 16}, 2, True),
    "cpu-small": ({"accelerator": "cpu", "memory_gb": 4}, 1, False),
    "plain": ({}, None, False),
}
SEGMENTS = {
    "npu": {"attribute": "accelerator", "equals": "npu"},
    "big-memory": {"attribute": "memory_gb", "range": {"gte": 8}},
}
# Who is in segment npu and live, written out (not computed with the rule evaluation).
NPU_LIVE = ("npu-big", "npu-small")


@pytest.fixture
def rolled_out(fleet: Any, fleet_key: str, publisher: Any, publish_version: Any) -> Any:
    """Six phones (one revoked) with their acks and sockets; segments npu and big-memory; v2
    rolling out to the big-memory segment at 100% (the rest stays on v1)."""
    for name, rule in SEGMENTS.items():
        segment_create(actor=publisher, fleet=fleet, name=name, rule=rule)
    now = timezone.now()
    for device_id, (attributes, acked, online) in DEVICES.items():
        device, _ = device_enroll(
            fleet_key=fleet_key, device_id=device_id, platform="android", attributes=attributes
        )
        Device.objects.filter(pk=device.pk).update(
            acked_version=acked, connected=online, last_seen_at=now if online else None
        )
    device_revoke(actor=publisher, device=Device.objects.get(fleet=fleet, device_id="npu-gone"))
    publish_version(fleet)
    rollout_start(actor=publisher, fleet=fleet, version=2, segment="big-memory")
    rollout_advance(actor=publisher, fleet=fleet, to_stage=100)
    return fleet


def _expected(fleet: Any, device_ids: tuple[str, ...]) -> dict[str, Any]:
    """The panel's figures counted device by device: what the rollout's rule (the SDK's)
    assigns each, what each acked, and whether it is online."""
    assignment = fleet_assignment(fleet.pk)
    # Both versions of the rollout are listed, assigned to nobody or not
    versions = {
        number: {"assigned": 0, "acked": 0, "online": 0}
        for number in (assignment.stable, assignment.candidate)
        if number is not None
    }
    for device_id in device_ids:
        device = Device.objects.get(fleet=fleet, device_id=device_id)
        _, acked, online = DEVICES[device_id]
        attributes = device_attributes(
            platform=device.platform, model=device.model, reported=device.attributes
        )
        assigned = assignment.version_for(device_id, attributes)
        for number in {assigned, acked} - {None}:
            versions.setdefault(number, {"assigned": 0, "acked": 0, "online": 0})
        if assigned is not None:
            versions[assigned]["assigned"] += 1
        if acked is not None:
            versions[acked]["acked"] += 1
            versions[acked]["online"] += online
    return {
        "devices": len(device_ids),
        "online": sum(DEVICES[d][2] for d in device_ids),
        "versions": {number: versions[number] for number in sorted(versions, reverse=True)},
    }


def _figures(convergence: dict[str, Any]) -> dict[str, Any]:
    return {
        "devices": convergence["devices"],
        "online": convergence["online"],
        "versions": {
            row["version"]: {k: row[k] for k in ("assigned", "acked", "online")}
            for row in convergence["versions"]
        },
    }


def test_dashboard__segment_filter__convergence_counts_its_devices_only(
    rolled_out: Any, viewer: Any, client_as: Any
) -> None:
    # Given v2 rolling out to big-memory phones; two live NPU phones, one of them big

    # When the dashboard is asked for segment npu, and for the whole fleet
    client = client_as(viewer)
    segment = client.get(API, {"window": "1h", "segment": "npu"})
    whole = client.get(API, {"window": "1h"})

    # Then the segment's panel counts its two live phones: the big one assigned v2 by the
    # rollout's rule and acked it, the other on v1, both online; and names the segment
    assert segment.status_code == 200, segment.content
    convergence = segment.json()["convergence"]
    assert convergence["segment"] == "npu"
    assert _figures(convergence) == _expected(rolled_out, NPU_LIVE)
    assert convergence["devices"] == 2
    # while the whole fleet's counts its five live phones, naming no segment
    live = tuple(d for d in DEVICES if d != "npu-gone")
    assert whole.json()["convergence"]["segment"] is None
    assert _figures(whole.json()["convergence"]) == _expected(rolled_out, live)
    assert whole.json()["convergence"]["devices"] == 5


def test_dashboard__segment_filter__convergence_follows_the_attributes_now(
    rolled_out: Any, viewer: Any, client_as: Any
) -> None:
    # Given npu-small now reports a GPU (as at its next hello)
    Device.objects.filter(fleet=rolled_out, device_id="npu-small").update(
        attributes={"accelerator": "gpu", "memory_gb": 4}
    )

    # When the dashboard is asked for segment npu
    response = client_as(viewer).get(API, {"window": "15m", "segment": "npu"})

    # Then the panel counts the one phone that is in it now (events keep their rows; devices
    # are counted as the device page and the segment editor count them)
    assert _figures(response.json()["convergence"]) == _expected(rolled_out, ("npu-big",))


def test_fleet_dashboard__segment_filter__two_queries_more(
    rolled_out: Any, django_assert_num_queries: Any
) -> None:
    # Given the fleet during its scoped rollout
    fleet_dashboard(fleet=rolled_out, view=DashboardView(window="1h"))

    # When the last hour's dashboard is computed for the whole fleet, then for segment npu
    # Then the segment costs two queries more, whatever the fleet's size: its id and rule
    # (one lookup), and its members now (one GROUP BY over distinct attributes)
    with django_assert_num_queries(9):
        fleet_dashboard(fleet=rolled_out, view=DashboardView(window="1h"))
    with django_assert_num_queries(11):
        payload = fleet_dashboard(fleet=rolled_out, view=DashboardView(window="1h", segment="npu"))
    assert payload["convergence"]["devices"] == len(NPU_LIVE)
