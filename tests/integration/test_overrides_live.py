"""Overrides by segment (issue 26) reach the right devices over both transports: the real
control plane (uvicorn, PostgreSQL, Redis; the MQTT link on, publishing on commit, two
`manage.py mqtt_link` processes) and real SDK devices, two over the WebSocket and two over a
real Mosquitto. A version whose override raises θ for NPU devices is rolled out to everyone:
each device receives the same document (one ETag), and the NPU devices route with the
overridden θ while the others keep the base θ; each runs exactly the cells the server's
resolution says it runs (GET /api/v1/fleets/{slug}/devices/{id}/table)."""

from typing import Any

import httpx
import pytest

from edge_sdk import Device, DeviceConfig, Task
from routing_policies.models import PolicyVersion, Segment
from routing_policies.services import (
    policy_draft_create,
    policy_draft_override_set,
    policy_version_publish,
    rollout_advance,
    rollout_start,
)
from tests.unit.edge_sdk.sdk_helpers import Inference, readings

from .test_mqtt_fleet_live import (  # noqa: F401  (fixtures used by name)
    PREFIX,
    Fleet,
    broker,
    control_plane,
    mqtt_prefix,
    sdk_fleet,
    server,
)

pytestmark = pytest.mark.integration

VOICE = ("voice", "interactive", "normal")
NPU_THETA = 0.95
# (transport, accelerator) of each device
DEVICES = {
    "ws-npu": ("websocket", "npu"),
    "ws-cpu": ("websocket", "cpu"),
    "mqtt-npu": ("mqtt", "npu"),
    "mqtt-cpu": ("mqtt", "cpu"),
}


def _add(fleet: Fleet, device_id: str, transport: str, accelerator: str) -> Device:
    """A device of `fleet` that reports its accelerator (what `Fleet.add` makes, plus that)."""
    inference = Inference()
    device = Device(
        DeviceConfig(
            base_url=fleet.server.url,
            fleet_key=fleet.fleet_key,
            device_id=device_id,
            platform="android",
            model="pixel-9",
            attributes={"accelerator": accelerator, "os_version": "14"},
            state_dir=fleet.directory / device_id,
            mqtt_url=fleet.broker.url,
            mqtt_ca_file=str(fleet.broker.tls.ca) if fleet.broker.tls else "",
            mqtt_prefix=PREFIX,
            backoff_base_s=0.05,
            backoff_max_s=0.5,
            online_check_s=0.1,
            mqtt_document_wait_s=0.5,
        ),
        readings=readings,
        device_infer=inference.on_device,
        cloud_infer=inference.on_cloud,
        transport=transport,
    )
    fleet.devices[device_id] = device
    fleet.applied[device_id] = []
    return device


async def _route(device: Device, task: Task) -> Any:
    return device.router.route(task)


def test_overrides__rolled_out__npu_devices_route_with_the_override_others_with_the_base(
    sdk_fleet: Fleet,  # noqa: F811  (the fixture, imported above)
    fleet: Any,
    publisher: Any,
    editor: Any,
) -> None:
    # Given four devices on v1, two NPU and two CPU, half over the socket and half over MQTT
    for device_id, (transport, accelerator) in DEVICES.items():
        _add(sdk_fleet, device_id, transport, accelerator)
    sdk_fleet.start()
    sdk_fleet.converged("v1")
    base_theta = 0.65  # the demo table's voice/interactive/normal

    # When v2 overrides θ of that cell for the segment `npu` and is rolled out to every device
    Segment.objects.create(
        fleet=fleet, name="npu", rule={"attribute": "accelerator", "equals": "npu"}
    )
    draft = policy_draft_create(actor=editor, fleet=fleet)
    draft = policy_draft_override_set(
        actor=editor,
        fleet=fleet,
        revision=draft.revision,
        segment="npu",
        cells={"/".join(VOICE): {"threshold": NPU_THETA}},
    )
    v2 = policy_version_publish(actor=publisher, fleet=fleet, revision=draft.revision, note="npu")
    rollout_start(actor=publisher, fleet=fleet, version=2)
    rollout_advance(actor=publisher, fleet=fleet, to_stage=100)
    sdk_fleet.converged("v2")

    # Then every device holds the one document of v2 (its ETag), and a voice task scoring 0.7
    # stays on an NPU device by θ (0.95) and is past θ (0.65) on a CPU one
    task = Task(
        task_type=VOICE[0],
        latency_budget=VOICE[1],
        privacy_tier=VOICE[2],
        tokens=400,
        intent_conf=0.5,
        lm_conf=0.5,
    )
    assert PolicyVersion.objects.get(fleet=fleet, number=2).overrides[0]["rule"] is not None
    for device_id, (transport, accelerator) in DEVICES.items():
        device = sdk_fleet.devices[device_id]
        assert device.policy.etag == v2.etag, device_id
        assert device.policy.document is not None
        assert [o["segment"] for o in device.policy.document["overrides"]] == ["npu"]
        decision = sdk_fleet.background.run(_route(device, task))
        expected = NPU_THETA if accelerator == "npu" else base_theta
        assert decision.base_threshold == expected, (device_id, transport, decision)
        # (the score 0.7 is under θ only with the override; past θ, the latency check decides)
        assert (decision.score < decision.threshold) == (accelerator == "npu"), device_id

        # And the server's resolution for the device is what it runs, cell by cell
        table = httpx.get(
            f"{sdk_fleet.server.url}/api/v1/fleets/{fleet.slug}/devices/{device_id}/table",
            cookies={"sessionid": sdk_fleet.cookie},
            timeout=10,
        ).json()
        assert table["version"] == 2
        assert table["overrides"] == (["npu"] if accelerator == "npu" else [])
        for cell in table["cells"]:
            runs = device.policy.cells[tuple(cell["cell"].split("/"))]  # type: ignore[index]
            assert runs.threshold == cell["values"]["threshold"], (device_id, cell["cell"])
            assert runs.mode == cell["values"]["mode"]
