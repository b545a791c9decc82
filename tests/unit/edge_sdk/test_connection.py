"""Connection with a transport other than the WebSocket: the seam a second push channel
(e.g. MQTT) plugs into, and how a Device picks its transport (`transport=`). The WebSocket
itself is tested against a real server in tests/integration/test_sdk_client.py."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import pytest

from edge_sdk import Device, DeviceConfig, PolicyStore, Router
from edge_sdk.backoff import Backoff
from edge_sdk.connection import Connection
from edge_sdk.listeners import Listeners
from edge_sdk.policy_sync import PolicySync
from edge_sdk.transport import Link, SessionEnd
from edge_sdk.transport.websocket import WebSocketTransport

from .sdk_helpers import Inference, policy_document, readings


class InMemoryTransport:
    """A push channel held in memory: delivers the given frames in one session, then ends."""

    def __init__(self, frames: list[str]) -> None:
        self.frames = frames
        self.sent: list[dict[str, Any]] = []
        self.channel: InMemoryTransport | None = None

    async def send(self, text: str, /) -> None:
        self.sent.append(json.loads(text))

    async def session(self, link: Link, backoff: Backoff) -> SessionEnd:
        self.channel = self
        link.opened()
        await self.send(json.dumps(link.hello()))
        for frame in self.frames:
            if await link.on_frame(self, frame):
                backoff.reset()
        link.stopping = True  # one session is all this test needs
        self.channel = None
        return "closed"

    async def close(self) -> None:
        self.channel = None


def _config() -> DeviceConfig:
    return DeviceConfig(
        base_url="http://127.0.0.1:9",
        fleet_key="fk",
        device_id="phone-1",
        platform="android",
        model="pixel",
        backoff_base_s=0.01,
    )


async def test_connection__another_transport__hello_sent_policy_applied_and_acked() -> None:
    # Given a connection (already enrolled, online) over a transport that is not the socket
    config = _config()
    store = PolicyStore()
    store.apply(policy_document(3))
    listeners = Listeners()
    events: list[tuple[str, dict[str, Any]]] = []
    listeners.add(lambda name, details: events.append((name, details)))
    transport = InMemoryTransport(
        [
            json.dumps({"type": "policy", **policy_document(4), "rollout": {"id": 2, "stage": 5}}),
            '{"type":"cloud_pressure","theta_offset":0.1,"ttl_s":300}',
        ]
    )
    router = Router(store, readings=readings)
    connection = Connection(
        config,
        transport=transport,
        readings=readings,
        policy=PolicySync(store, device_id="phone-1", persist=False, on_applied=lambda: None),
        router=router,
        listeners=listeners,
        rng=random.Random(1),
        http=None,
    )
    connection.token = "tok"

    # When its loop runs the transport's session
    await connection.run()

    # Then the transport carried the hello with the version the device ran, and the ack of
    # the new version; the policy and the pressure were applied and announced
    assert transport.sent == [
        {
            "type": "hello",
            "device_id": "phone-1",
            "policy_version": 3,
            "sdk": config.sdk,
            "platform": "android",
            "model": "pixel",
            "delta": True,
        },
        {"type": "ack", "version": 4},
    ]
    assert (store.version, store.rollout, router.cloud_pressure) == (4, {"id": 2, "stage": 5}, 0.1)
    assert [name for name, _ in events] == ["state", "state", "policy", "cloud_pressure", "state"]
    assert [d["state"] for name, d in events if name == "state"] == [
        "connecting",
        "connected",
        "connecting",  # the session ended: lost, back off
    ]
    assert (connection.reconnects, connection.server_errors) == (0, 0)


def _device(**transport: Any) -> Device:
    inference = Inference()
    return Device(
        _config(),
        readings=readings,
        device_infer=inference.on_device,
        cloud_infer=inference.on_cloud,
        **transport,
    )


def test_device__no_transport_named__the_websocket() -> None:
    # Given / When a device built without saying how its push channel is carried
    device = _device()

    # Then its sessions go over the device socket
    assert isinstance(device._connection.transport, WebSocketTransport)
    assert isinstance(_device(transport="websocket")._connection.transport, WebSocketTransport)


@pytest.mark.parametrize("name", ["amqp", "WebSocket", "MQTT", ""])
def test_device__unknown_transport_name__refused_naming_the_known_ones(name: str) -> None:
    # Given / When / Then a transport name this SDK does not have: refused at construction
    known = "websocket, mqtt"
    with pytest.raises(ValueError, match=f"unknown transport {name!r}: this SDK has {known}"):
        _device(transport=name)


async def test_device__transport_of_the_apps_own__carries_the_sessions() -> None:
    # Given a device (already enrolled) given a transport object instead of a name
    transport = InMemoryTransport([json.dumps({"type": "policy", **policy_document(4)})])
    device = _device(transport=transport)
    device.token = "tok"

    # When it starts and its connection loop runs a session
    await device.start()
    for _ in range(200):
        if device.policy.version == 4:
            break
        await asyncio.sleep(0.01)
    await device.stop()

    # Then the session went over that transport: hello, then the ack of the policy applied
    assert [message["type"] for message in transport.sent] == ["hello", "ack"]
    assert (device.policy.version, device.reconnects) == (4, 0)
