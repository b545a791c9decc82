"""The simulator's command lines: bad flags get a clear error before any device starts, and
the app callables a simulated device hands the SDK behave as the models say."""

import asyncio
import random
from collections.abc import Coroutine
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from edge_sdk import Task
from edge_sdk.decision import Decision
from edge_sdk.simulate.__main__ import main
from edge_sdk.simulate.fleet import FleetConfig, SimDevice, SimulatedFleet
from edge_sdk.simulate.models import CloudOverloaded, DeviceFailure
from routing_policies.demo import DEMO_FLEET_KEY, demo_seed

URL = "http://127.0.0.1:9"  # nothing listens there; these tests never start a device


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--devices", "0"], "devices must be at least 1"),
        (["--rate", "0"], "rate must be a positive"),
        (["--rate", "nan"], "rate must be a positive"),
        (["--duration", "-1"], "duration_s must be positive"),
        (["--scenario", "earthquake"], "invalid choice"),
        (["--connect-rate", "0"], "connect_per_s must be positive"),
        (["--transport", "mqtt"], "needs an MQTT broker URL (--mqtt-url)"),
        (["--transport", "carrier-pigeon"], "invalid choice"),
        (
            ["--transport", "mixed", "--mqtt-url", "mqtt://127.0.0.1", "--mqtt-share", "2"],
            "mqtt_share must be in [0, 1]",
        ),
        (["--encoding", "xml"], "invalid choice"),
        (["--encoding", "mixed", "--protobuf-share", "-1"], "protobuf_share must be in [0, 1]"),
    ],
)
def test_cli__bad_flag__exits_2_naming_the_problem(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # When the simulator is started with a bad flag
    with pytest.raises(SystemExit) as exited:
        main(["--url", URL, "--fleet-key", "fk_x", *flags])
    # Then it exits with argparse's usage error naming the flag's problem
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_cli__missing_fleet_key__usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--url", URL])
    assert exited.value.code == 2
    assert "--fleet-key" in capsys.readouterr().err


def test_simulate_fleet_command__unknown_fleet__clear_error(db: None) -> None:
    with pytest.raises(CommandError, match="does not exist"):
        call_command("simulate_fleet", "--fleet", "no-such-fleet", "--url", URL)


def test_simulate_fleet_command__wrong_key__refused_before_any_device_starts(db: None) -> None:
    # Given the demo fleet with its known key
    demo_seed()
    # When the command is given another key
    # Then it refuses it (the key is checked against the stored hash, not tried on the server)
    with pytest.raises(CommandError, match="not fleet voice-assistant-android's current"):
        call_command("simulate_fleet", "--fleet-key", DEMO_FLEET_KEY + "x", "--url", URL)


def test_simulate_fleet_command__other_fleet_without_key__asks_for_it(
    db: None, fleet: Any, fleet_key: str
) -> None:
    with pytest.raises(CommandError, match="pass --fleet-key"):
        call_command("simulate_fleet", "--fleet", fleet.slug, "--url", URL)


def test_simulate_fleet_command__bad_flag_value__command_error(db: None) -> None:
    demo_seed()
    with pytest.raises(CommandError, match="devices must be at least 1"):
        call_command("simulate_fleet", "--devices", "0", "--url", URL)


def _task(task_type: str = "text", tokens: int = 200, upload_bytes: int = 1000) -> Task:
    return Task(
        task_type=task_type,
        latency_budget="interactive",
        privacy_tier="normal",
        tokens=tokens,
        intent_conf=0.8,
        lm_conf=0.7,
        upload_bytes=upload_bytes,
    )


def _decision() -> Decision:
    return Decision(
        route="cloud", decided_by="threshold", base_threshold=0.6, latency_budget_ms=800
    )


async def test_sim_device__callables__readings_in_range_and_inference_sleeps_or_fails() -> None:
    # Given a simulated fleet of 20 devices (created, not started: no network)
    fleet = SimulatedFleet(
        FleetConfig(base_url=URL, fleet_key="fk_x", devices=20, rate=10, cloud_capacity_rps=1000)
    )
    rng = random.Random(4)
    sims = [SimDevice(fleet, index, random.Random(rng.random())) for index in range(20)]
    # When each device reads its sensors
    readings = [sim.readings() for sim in sims]
    # Then the readings are plausible, every device has its own link, and the cloud estimate
    # is the idle cloud's
    assert all(0 <= r.device_load <= 1 for r in readings)
    assert all(r.rtt_ms > 0 and r.bandwidth_kbps > 0 for r in readings)
    assert len({r.rtt_ms for r in readings}) == 20
    assert readings[0].cloud_infer_ms == fleet.cloud.estimate_ms(fleet.elapsed())

    # When every device runs ten inferences on each side, all at once
    async def attempt(call: Coroutine[Any, Any, dict[str, Any]]) -> dict[str, Any] | Exception:
        try:
            return await asyncio.wait_for(call, 10)
        except (DeviceFailure, CloudOverloaded) as error:
            return error

    calls = [
        call
        for sim in sims
        for _ in range(10)
        for call in (sim.device_infer(_task("voice", 10)), sim.cloud_infer(_task(), _decision()))
    ]
    results = await asyncio.gather(*(attempt(call) for call in calls))
    # Then answers say where they ran and how long they took: device tens of ms, cloud longer
    device_ms = sorted(r["ms"] for r in results if isinstance(r, dict) and r["side"] == "device")
    cloud_ms = sorted(r["ms"] for r in results if isinstance(r, dict) and r["side"] == "cloud")
    assert len(device_ms) > 150
    assert len(cloud_ms) > 150
    assert 5 < device_ms[len(device_ms) // 2] < 150
    assert cloud_ms[len(cloud_ms) // 2] > 2 * device_ms[len(device_ms) // 2]
    # and the shared cloud queue counted every cloud call
    assert fleet.cloud.rate(fleet.elapsed()) > 0


@pytest.mark.parametrize(
    ("encoding", "formats"),
    [("json", {"json"}), ("protobuf", {"auto"}), ("mixed", {"json", "auto"})],
)
async def test_sim_device__encoding__each_device_json_or_negotiating_protobuf(
    encoding: str, formats: set[str]
) -> None:
    # Given a fleet of 40 devices (created, not started) with an encoding
    fleet = SimulatedFleet(
        FleetConfig(base_url=URL, fleet_key="fk_x", devices=40, rate=10, encoding=encoding)
    )
    rng = random.Random(4)

    # When its devices are made
    sims = [SimDevice(fleet, index, random.Random(rng.random())) for index in range(40)]

    # Then each is forced to JSON or negotiates protobuf as the flag says (mixed: both)
    assert {sim.device.config.wire_format for sim in sims} == formats
    assert {sim.encoding for sim in sims} == {
        "json" if f == "json" else "protobuf" for f in formats
    }
