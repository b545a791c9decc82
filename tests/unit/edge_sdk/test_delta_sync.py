"""The device's side of policy deltas (edge_sdk.delta_sync; docs/PROTOCOL.md, "Policy deltas"):
`policy_delta` frames through `Connection.on_frame`, and what a weak link changes. The network
paths run against a real server in tests/integration/test_sdk_client_delta.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from edge_sdk import delta_sync
from edge_sdk.delta import canonical_bytes, make_delta

from .sdk_helpers import Inference, policy_document
from .test_device import Network, Socket, _device


@pytest.fixture(autouse=True)
def _no_recent_deltas() -> None:
    delta_sync._RECENT.clear()


def _delta_frame(base: dict[str, Any], target: dict[str, Any]) -> dict[str, Any]:
    delta = make_delta(base, target)
    assert delta is not None
    return {"type": "policy_delta", **delta, "rollout": {"id": 2, "stage": 25}}


async def test_frame__policy_delta__applied_byte_equal_acked() -> None:
    # Given a device on v1 and a delta frame to v2
    device = _device(Inference(), document=policy_document(1))
    target = policy_document(2, **{"image/background/normal": {"threshold": 0.2}})
    socket = Socket()

    # When it arrives
    in_sync = await device._connection.on_frame(
        socket, json.dumps(_delta_frame(device.policy.document, target))
    )

    # Then v2 is applied (with the frame's rollout), byte-equal to the target, and acked
    assert in_sync
    assert (device.policy.version, device.policy.rollout) == (2, {"id": 2, "stage": 25})
    assert canonical_bytes(device.policy.document) == canonical_bytes(target)
    assert socket.sent == [{"type": "ack", "version": 2}]
    assert (device.deltas_applied, device.deltas_refused) == (1, 0)


@pytest.mark.parametrize("damage", ["hash", "patch", "base", "no_document"])
async def test_frame__bad_policy_delta__not_applied_hello_again_without_deltas(damage: str) -> None:
    # Given a delta frame that does not apply: corrupted on the way (its hash or its patch), from
    # another base, or sent to a device that holds no document
    base = policy_document(1)
    frame = _delta_frame(
        base, policy_document(2, **{"voice/interactive/normal": {"threshold": 0.3}})
    )
    if damage == "hash":
        frame["hash"] = "sha256:" + "0" * 64
    elif damage == "patch":
        frame["patch"]["cells"]["voice/interactive/normal"]["threshold"] = 0.31
    elif damage == "base":
        frame["base"] = 7
    device = _device(Inference(), document=None if damage == "no_document" else base)
    socket = Socket()

    # When it arrives
    in_sync = await device._connection.on_frame(socket, json.dumps(frame))

    # Then nothing is applied or acked; the device says hello again refusing deltas, so the
    # server answers with the whole document
    assert not in_sync
    assert device.policy.version == (None if damage == "no_document" else 1)
    assert (device.deltas_applied, device.deltas_refused) == (0, 1)
    assert [(m["type"], m["delta"]) for m in socket.sent] == [("hello", False)]
    assert socket.sent[0]["policy_version"] == device.policy.version


def test_hello__deltas_offered_unless_configured_off() -> None:
    assert _device(Inference())._connection.hello()["delta"] is True
    assert _device(Inference(), policy_deltas=False)._connection.hello()["delta"] is False


@pytest.mark.parametrize(
    ("reading", "weak"),
    [
        ({}, False),
        ({"metered": True}, True),
        ({"bandwidth_kbps": 300.0}, True),
        ({"rtt_ms": 900.0}, True),
        ({"bandwidth_kbps": 500.0, "rtt_ms": 400.0}, False),
    ],
)
def test_weak_link__readings__telemetry_flushed_less_often(
    reading: dict[str, Any], weak: bool
) -> None:
    # Given a device whose readings say this about its link
    device = _device(Inference(), Network(**reading), telemetry_flush_s=2.0)

    # Then its telemetry loop waits 5x longer on a weak link, the usual interval otherwise
    assert device._connection.weak_link() is weak
    assert device._sender.flush_interval() == (10.0 if weak else 2.0)


async def test_frame__same_delta_to_many_devices__applied_once_shared() -> None:
    # Given two devices of one process holding the same v1 (a simulator's), and one pushed frame
    devices = [_device(Inference(), document=policy_document(1)) for _ in range(2)]
    target = policy_document(2, **{"text/background/normal": {"threshold": 0.4}})
    frame = json.dumps(_delta_frame(policy_document(1), target))

    # When both receive it
    for device in devices:
        assert await device._connection.on_frame(Socket(), frame)

    # Then both run v2, made once: the second device reuses the first one's checked result
    first, second = (device.policy.document for device in devices)
    assert canonical_bytes(first) == canonical_bytes(second) == canonical_bytes(target)
    assert len(delta_sync._RECENT) == 1
    assert [device.deltas_applied for device in devices] == [1, 1]


async def test_frame__same_delta_to_a_device_with_another_base__not_reused() -> None:
    # Given a result made for v1, and a device whose v1 differs (altered)
    target = policy_document(2, **{"text/background/normal": {"threshold": 0.4}})
    frame = json.dumps(_delta_frame(policy_document(1), target))
    assert await _device(Inference(), document=policy_document(1))._connection.on_frame(
        Socket(), frame
    )
    altered = _device(
        Inference(), document=policy_document(1, **{"voice/background/normal": {"threshold": 0.1}})
    )

    # When the same frame reaches it, Then it is refused (its result would not hash right)
    assert not await altered._connection.on_frame(Socket(), frame)
    assert altered.deltas_refused == 1
