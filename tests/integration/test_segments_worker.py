"""Segments through the real pipeline (issue 26): the ASGI server, a Celery worker with its
beat, PostgreSQL and a Redis of the test's own. Devices that reported their attributes post
events over HTTP; the worker counts each in its segments' rollup rows, the metrics API's figures
per segment equal those computed from the events sent, and the guards of a rollout scoped to a
segment, evaluated by the worker, compare the candidate with that segment's stable devices."""

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

from routing_policies.models import Rollout
from routing_policies.segments.services import segment_create
from routing_policies.services import device_enroll
from telemetry.alerts.services import rollout_start_guarded
from telemetry.models import LandedBatch
from tests.factories import iso, make_events
from tests.integration.test_telemetry_durability import (
    OwnRedis,
    Sender,
    Worker,
    _wait_until,
    own_redis,
    start_worker,
)
from tests.live_server import running_asgi_server

__all__ = ["own_redis", "start_worker"]

pytestmark = pytest.mark.integration

METRICS = "/api/v1/metrics/fleets/fleet-a/"
# device id → (platform, accelerator)
DEVICES = {
    "npu-android": ("android", "npu"),
    "npu-ios": ("ios", "npu"),
    "cpu-android": ("android", "cpu"),
}
SEGMENTS = {
    "npu": {"attribute": "accelerator", "equals": "npu"},
    "android": {"attribute": "platform", "equals": "android"},
}
MEMBERS = {"npu": ("npu-android", "npu-ios"), "android": ("npu-android", "cpu-android")}


def _events(device_id: str, version: int, cloud: int, on_device: int) -> list[dict[str, Any]]:
    """Events happening now (after the rollout's start: a candidate's events count in its cohort
    from then on); the cloud ones failed."""
    at = {"ts": iso(datetime.now(UTC)), "policy_version": version}
    events = make_events(cloud, device_id, route="cloud", ok=False, **at)
    return events + make_events(on_device, device_id, **at)


def test_segments_worker__figures_per_segment_and_a_guard_inside_its_segment(
    own_redis: OwnRedis,
    start_worker: Callable[..., Worker],
    transactional_db: None,
    fleet: Any,
    fleet_key: str,
    publisher: Any,
    viewer: Any,
    publish_version: Callable[..., Any],
) -> None:
    # Given segments npu and android, three phones that reported their attributes, and v2
    # rolling out to segment npu under the default guards (cloud share ≤ stable's + 20 pts)
    for name, rule in SEGMENTS.items():
        segment_create(actor=publisher, fleet=fleet, name=name, rule=rule)
    tokens = {
        device_id: device_enroll(
            fleet_key=fleet_key,
            device_id=device_id,
            platform=platform,
            attributes={"accelerator": accelerator},
        )[1]
        for device_id, (platform, accelerator) in DEVICES.items()
    }
    candidate = int(publish_version(fleet, threshold=0.7).number)
    rollout = rollout_start_guarded(
        actor=publisher,
        fleet=fleet,
        version=candidate,
        segment="npu",
        guard_options={"guards": "default", "bake_minutes": 5, "min_samples": 50},
    )
    # The NPU phones' stable v1 never goes to the cloud; the CPU phone's does 60% of the time
    # (the whole fleet's stable: 480 of 1,000, 48%); the candidate, on the NPU phones, 25%.
    sent = {
        "npu-android": _events("npu-android", 1, cloud=0, on_device=200)
        + _events("npu-android", candidate, cloud=15, on_device=45),
        "npu-ios": _events("npu-ios", candidate, cloud=10, on_device=30),
        "cpu-android": _events("cpu-android", 1, cloud=480, on_device=320),
    }

    # When they post their events over HTTP and the worker processes and evaluates them
    start_worker()
    with running_asgi_server(dict(connection.settings_dict)) as base_url:
        for device_id, events in sent.items():
            Sender(base_url, tokens[device_id]).post(events)
        _wait_until(lambda: not LandedBatch.objects.exists(), 60, "events not processed")

        # Then the guard compared 25% with the segment's 0% and rolled the rollout back (the
        # whole fleet's 48% would have kept it)
        _wait_until(
            lambda: Rollout.objects.get(pk=rollout.pk).state == Rollout.State.ROLLED_BACK,
            60,
            "the scoped rollout's guard did not roll it back",
        )
    rollout.refresh_from_db()
    assert rollout.reason.startswith("Guard fired: candidate cloud share 25.0% vs stable 0.0%")

    # …and each segment's figures are its devices' events', the fleet's every event once
    client = APIClient()
    client.force_authenticate(user=viewer)
    for name, members in (*MEMBERS.items(), ("", tuple(DEVICES))):
        events = [event for device_id in members for event in sent[device_id]]
        query = {"window": "1h", **({"segment": name} if name else {})}
        (group,) = client.get(METRICS, query).json()["groups"]
        assert group["events"] == len(events), name
        cloud = sum(event["route"] == "cloud" for event in events)
        assert group["cloud_share"] == pytest.approx(cloud / len(events)), name
        assert group["error_rate"] == pytest.approx(cloud / len(events)), name
