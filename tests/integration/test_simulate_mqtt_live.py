"""The fleet simulator over MQTT, run as docs/simulator.md documents it, against a real control
plane: `python -m edge_sdk.simulate --transport mixed --mqtt-url … --mqtt-share 0.5` as a
process, a live ASGI server, a real Mosquitto and two `manage.py mqtt_link` processes (the
fixtures of test_mqtt_fleet_live). What a user would notice: the command exits 0 and says its
MQTT share, every simulated device enrolled and acked the version the fleet assigns it (the
rollout API, as a viewer reads it), both transports are in the fleet, and the MQTT devices'
telemetry landed, each event once."""

import re
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from django.db.models import Count

from edge_sdk import mqtt_topics
from routing_policies.models import Device as DeviceRow
from routing_policies.selectors import fleet_assignment
from routing_policies.services import rollout_advance, rollout_start
from telemetry.ingest.services.processing import landed_batches_process
from telemetry.models import Event, EventKey, LandedBatch
from tests.live_server import REPO_ROOT

from .test_mqtt_fleet_live import (  # noqa: F401 (the fixtures)
    CONVERGE_S,
    Fleet,
    _assert_api_counts_every_device_acked,
    broker,
    control_plane,
    sdk_fleet,
    server,
)
from .test_mqtt_link import Links
from .ws_clients import wait_until

pytestmark = pytest.mark.integration

DEVICES = 12
DURATION_S = 20
# The command's outer bound: its duration, the devices' start, and its telemetry flush at the
# end (up to 30 s by docs/simulator.md), with room for a busy machine.
RUN_TIMEOUT_S = DURATION_S + 100


@pytest.fixture
def mqtt_prefix() -> str:
    """The simulator's devices use the SDK's default topic prefix (it has no flag for one)."""
    return mqtt_topics.DEFAULT_PREFIX


def _simulate(server_url: str, fleet_key: str, broker_url: str) -> subprocess.Popen[str]:
    """The documented command, as a user runs it."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edge_sdk.simulate",
            "--url",
            server_url,
            "--fleet-key",
            fleet_key,
            "--devices",
            str(DEVICES),
            "--rate",
            "6",
            "--duration",
            str(DURATION_S),
            "--transport",
            "mixed",
            "--mqtt-url",
            broker_url,
            "--mqtt-share",
            "0.5",
            "--no-offline-spells",
            "--seed",
            "1",
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _devices_api(fleet: Fleet) -> list[dict[str, Any]]:
    """GET /api/v1/fleets/{slug}/devices/ as a viewer reads it (one page: the whole fleet)."""
    response = httpx.get(
        f"{fleet.server.url}/api/v1/fleets/{fleet.fleet.slug}/devices/",
        cookies={"sessionid": fleet.cookie},
        timeout=10,
    )
    assert response.status_code == 200, response.text
    rows: list[dict[str, Any]] = response.json()["results"]
    return rows


def _landed_processed() -> None:
    """Process every landed telemetry batch in this process (what the Celery drain does)."""
    while landed_batches_process().batches:
        pass


def test_simulate_mixed_over_mqtt__every_device_acks_its_version_and_mqtt_telemetry_lands(
    control_plane: Links,  # noqa: F811
    sdk_fleet: Fleet,  # noqa: F811
    fleet_key: str,
    publish_version: Callable[..., Any],
    publisher: Any,
) -> None:
    # Given a fleet with v2 rolled out to 25% over v1, and its MQTT link running
    fleet = sdk_fleet.fleet
    publish_version(fleet, threshold=0.75)
    rollout_start(actor=publisher, fleet=fleet, version=2)
    rollout_advance(actor=publisher, fleet=fleet, to_stage=25)

    # When the simulator runs a dozen devices, half of them over MQTT
    process = _simulate(sdk_fleet.server.url, fleet_key, sdk_fleet.broker.url)
    try:
        # Then, while it runs, every device is enrolled, online, and acked its assigned
        # version, as the rollout API counts them for a viewer
        def converged() -> bool:
            ids = list(DeviceRow.objects.filter(fleet=fleet).values_list("device_id", flat=True))
            if len(ids) < DEVICES:
                return process.poll() is not None
            status = sdk_fleet.status()["convergence"]
            done = status["online"] == DEVICES and status["not_acked"]["count"] == 0
            return done or process.poll() is not None

        wait_until(converged, timeout=CONVERGE_S, interval=0.2, what="the simulated fleet")
        assert process.poll() is None, "the simulator ended before its fleet converged"
        assignment = fleet_assignment(fleet.pk)
        ids = list(DeviceRow.objects.filter(fleet=fleet).values_list("device_id", flat=True))
        wanted = {device_id: assignment.version_for(device_id) for device_id in ids}
        assert len(wanted) == DEVICES
        _assert_api_counts_every_device_acked(sdk_fleet.status(), wanted, online=DEVICES)
        listed = {row["device_id"]: row for row in _devices_api(sdk_fleet)}
        assert set(listed) == set(wanted)
        assert all(row["online"] for row in listed.values())
        assert {d: row["acked_version"] for d, row in listed.items()} == wanted

        # and it exits 0 once its duration is over, having said its MQTT share
        output, _ = process.communicate(timeout=RUN_TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, output
    assert f"simulating {DEVICES} devices at 6 tasks/s against" in output, output
    assert "(50% over MQTT)" in output, output

    # and the fleet has devices on both transports
    transports = dict(DeviceRow.objects.filter(fleet=fleet).values_list("device_id", "transport"))
    mqtt_ids = {d for d, transport in transports.items() if transport == "mqtt"}
    assert set(transports.values()) == {"ws", "mqtt"}, transports

    # and every event the simulator delivered landed once; the MQTT devices' are stored
    summary = re.search(
        r"events delivered (\d+) duplicates (\d+) pending (\d+) dropped (\d+)", output
    )
    assert summary is not None, output
    delivered, _, pending, dropped = map(int, summary.groups())
    assert (pending, dropped) == (0, 0), output
    wait_until(
        lambda: EventKey.objects.count() >= delivered,
        timeout=CONVERGE_S,
        interval=0.2,
        what="the delivered events to land",
    )
    _landed_processed()
    assert not LandedBatch.objects.exists()
    assert EventKey.objects.count() == delivered
    events = Event.objects.filter(fleet=fleet)
    assert events.count() == events.values("event_id").distinct().count() == delivered
    per_device = dict(
        events.values_list("device_id").annotate(n=Count("event_id")).values_list("device_id", "n")
    )
    assert set(per_device) <= set(transports)
    assert mqtt_ids
    assert all(per_device.get(device_id, 0) > 0 for device_id in mqtt_ids), per_device
