"""Device without a server: running tasks (fallback, cache, offline queue, telemetry), handling
server frames, back-off, configuration. The network paths are tested against a real server in
tests/integration/test_sdk_client.py."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import httpx
import pytest

from edge_sdk import Backoff, Device, DeviceConfig, Readings

from .sdk_helpers import Inference, policy_document, readings, task


class Network:
    def __init__(self, **overrides: Any) -> None:
        self.reading = readings(**overrides)

    def __call__(self) -> Readings:
        return self.reading

    def set(self, **overrides: Any) -> None:
        self.reading = readings(**overrides)


def _device(
    inference: Inference,
    network: Network | None = None,
    document: dict[str, Any] | None = None,
    http: httpx.AsyncClient | None = None,
    **config: Any,
) -> Device:
    device = Device(
        DeviceConfig(
            base_url="http://127.0.0.1:9",
            fleet_key="fk",
            platform="android",
            model="pixel",
            **{"device_id": "phone-1", **config},
        ),
        readings=network or Network(),
        device_infer=inference.on_device,
        cloud_infer=inference.on_cloud,
        http=http,
    )
    if document is not None:
        device.policy.apply(document)
    return device


def _events(device: Device) -> list[dict[str, Any]]:
    return [json.loads(raw) for _, raw in device.telemetry._events]


# --- run: routes and fallback ---------------------------------------------------------------


async def test_run__low_score__answered_on_the_device_and_reported() -> None:
    inference = Inference()
    device = _device(inference, document=policy_document(3))

    outcome = await device.run(task(tokens=10, intent_conf=0.95, lm_conf=0.95))

    assert (outcome.route, outcome.fallback, outcome.ok, outcome.result) == (
        "device",
        "none",
        True,
        "device:10",
    )
    assert outcome.policy_version == 3
    (event,) = _events(device)
    assert (event["route"], event["decided_by"], event["policy_version"]) == (
        "device",
        "threshold",
        3,
    )


async def test_run__high_score__answered_by_the_cloud() -> None:
    inference = Inference()
    device = _device(inference, document=policy_document())

    outcome = await device.run(task())

    assert (outcome.route, outcome.result, len(inference.device_calls)) == ("cloud", "cloud:400", 0)


async def test_run__cloud_fails__falls_back_to_the_device() -> None:
    inference = Inference()
    inference.cloud_fails = True
    device = _device(inference, document=policy_document())

    outcome = await device.run(task())

    assert (outcome.route, outcome.fallback, outcome.ok, outcome.result) == (
        "device",
        "cloud_to_device",
        True,
        "device:400",
    )
    (event,) = _events(device)
    assert (event["route"], event["fallback"]) == ("cloud", "cloud_to_device")


async def test_run__cloud_slower_than_cloud_timeout__falls_back_to_the_device() -> None:
    inference = Inference()
    inference.cloud_stalls = True
    document = policy_document(**{"text/interactive/normal": {"cloud_timeout_ms": 20}})
    device = _device(inference, document=document)

    outcome = await device.run(task())

    assert (outcome.route, outcome.fallback, outcome.ok) == ("device", "cloud_to_device", True)


async def test_run__cloud_fails_with_fallback_none__fails_without_trying_the_device() -> None:
    inference = Inference()
    inference.cloud_fails = True
    document = policy_document(**{"text/interactive/normal": {"fallback": "none"}})
    device = _device(inference, document=document)

    outcome = await device.run(task())

    assert (outcome.route, outcome.fallback, outcome.ok) == ("cloud", "none", False)
    assert isinstance(outcome.result, ConnectionError)
    assert inference.device_calls == []
    assert _events(device)[0]["ok"] is False


async def test_run__device_fails__falls_back_to_the_cloud() -> None:
    inference = Inference()
    inference.device_fails = True
    device = _device(inference, document=policy_document())

    outcome = await device.run(task(tokens=10, intent_conf=0.95, lm_conf=0.95))

    assert (outcome.route, outcome.fallback, outcome.ok, outcome.result) == (
        "cloud",
        "device_to_cloud",
        True,
        "cloud:10",
    )


async def test_run__device_fails_on_a_private_cell__never_sent_to_the_cloud() -> None:
    inference = Inference()
    inference.device_fails = True
    document = policy_document(**{"text/interactive/sensitive": {"upload_allowed": False}})
    device = _device(inference, document=document)

    outcome = await device.run(task(privacy_tier="sensitive"))

    assert (outcome.route, outcome.ok, outcome.decision.decided_by) == ("device", False, "privacy")
    assert inference.cloud_calls == []


async def test_run__draft_refine__device_drafts_cloud_refines() -> None:
    inference = Inference()
    document = policy_document(**{"image/interactive/normal": {"mode": "draft_refine"}})
    device = _device(inference, document=document)

    outcome = await device.run(task(task_type="image"))

    assert (outcome.route, outcome.result) == ("draft_refine", "cloud:400")
    assert (len(inference.device_calls), len(inference.cloud_calls)) == (1, 1)


async def test_run__draft_refine_cloud_fails__keeps_the_devices_draft() -> None:
    inference = Inference()
    inference.cloud_fails = True
    document = policy_document(**{"image/interactive/normal": {"mode": "draft_refine"}})
    device = _device(inference, document=document)

    outcome = await device.run(task(task_type="image"))

    assert (outcome.route, outcome.fallback, outcome.ok, outcome.result) == (
        "device",
        "cloud_to_device",
        True,
        "device:400",
    )


async def test_run__offline_cloud_only_interactive__no_cloud_call_answered_on_device() -> None:
    inference = Inference()
    document = policy_document(**{"text/interactive/normal": {"mode": "cloud_only"}})
    device = _device(inference, Network(online=False), document=document)

    outcome = await device.run(task())

    assert (outcome.route, outcome.fallback, outcome.ok) == ("device", "cloud_to_device", True)
    assert inference.cloud_calls == []


async def test_run__no_policy__answered_on_the_device_and_not_reported() -> None:
    inference = Inference()
    device = _device(inference)

    outcome = await device.run(task())

    assert (outcome.route, outcome.decision.decided_by, outcome.ok) == ("device", "offline", True)
    assert outcome.policy_version is None
    assert (device.telemetry.pending, device.telemetry.skipped) == (0, 1)


# --- cache ------------------------------------------------------------------------------------


async def test_run__same_cache_key_and_cell__second_is_a_cache_hit() -> None:
    inference = Inference()
    device = _device(inference, document=policy_document())

    first = await device.run(task(cache_key="weather"))
    second = await device.run(task(cache_key="weather"))
    other = await device.run(task(cache_key="news"))

    assert (first.cache_hit, second.cache_hit, other.cache_hit) == (False, True, False)
    assert second.result == first.result
    assert len(inference.cloud_calls) == 2
    assert [e["cache_hit"] for e in _events(device)] == [False, True, False]


async def test_run__cell_cache_ttl_zero__never_cached() -> None:
    inference = Inference()
    document = policy_document(**{"text/interactive/normal": {"cache_ttl_s": 0}})
    device = _device(inference, document=document)

    await device.run(task(cache_key="weather"))
    again = await device.run(task(cache_key="weather"))

    assert again.cache_hit is False
    assert len(inference.cloud_calls) == 2


async def test_run__failed_result__not_cached() -> None:
    inference = Inference()
    inference.cloud_fails = True
    document = policy_document(**{"text/interactive/normal": {"fallback": "none"}})
    device = _device(inference, document=document)

    await device.run(task(cache_key="weather"))
    inference.cloud_fails = False
    again = await device.run(task(cache_key="weather"))

    assert (again.cache_hit, again.ok) == (False, True)


async def test_run__new_policy_version__earlier_answers_not_served() -> None:
    inference = Inference()
    device = _device(inference, document=policy_document(1))
    await device.run(task(cache_key="weather"))

    device.policy.apply(policy_document(2))
    again = await device.run(task(cache_key="weather"))

    assert again.cache_hit is False


# --- privacy: what left the device ------------------------------------------------------------

SENSITIVE_CLOUD = {"text/interactive/sensitive": {"upload_deidentify": True}}


async def test_run__sensitive_cache_hit_on_cloud_route__reported_as_not_uploaded() -> None:
    # Given a sensitive cell that uploads de-identified, and a task it sends to the cloud
    inference = Inference()
    device = _device(inference, document=policy_document(**SENSITIVE_CLOUD))
    sensitive = task(privacy_tier="sensitive", cache_key="weather")

    # When the task runs twice: the second is answered from the device's cache
    first = await device.run(sensitive)
    second = await device.run(sensitive)

    # Then the first left the device de-identified, the second never left it
    assert (first.route, second.cache_hit) == ("cloud", True)
    assert [(e["route"], e["uploaded"], e["deidentified"]) for e in _events(device)] == [
        ("cloud", True, True),
        ("cloud", False, False),
    ]


async def test_run__device_failure_falls_back_to_cloud__reported_as_uploaded() -> None:
    # Given a sensitive cell that uploads de-identified and a task it answers on the device
    inference = Inference()
    inference.device_fails = True
    device = _device(inference, document=policy_document(**SENSITIVE_CLOUD))

    # When the device fails and the task falls back to the cloud
    outcome = await device.run(task(privacy_tier="sensitive", tokens=10, intent_conf=0.95))

    # Then its data left the device, de-identified as the cell asks
    assert outcome.fallback == "device_to_cloud"
    (event,) = _events(device)
    assert (event["route"], event["uploaded"], event["deidentified"]) == ("device", True, True)


async def test_run__cloud_call_while_offline__reported_as_not_uploaded() -> None:
    # Given a device that is offline, whose on-device model fails
    inference = Inference()
    inference.device_fails = True
    device = _device(inference, Network(online=False), document=policy_document(**SENSITIVE_CLOUD))

    # When a task falls back to the cloud, which fails at once with no network
    outcome = await device.run(task(privacy_tier="sensitive", tokens=10, intent_conf=0.95))

    # Then nothing of it left the device
    assert (outcome.fallback, outcome.ok) == ("device_to_cloud", False)
    (event,) = _events(device)
    assert (event["uploaded"], event["deidentified"]) == (False, False)


# --- offline queue ----------------------------------------------------------------------------


def _background_document() -> dict[str, Any]:
    return policy_document(**{"text/background/normal": {"latency_budget_ms": 10_000}})


async def test_run__offline_background_cloud_task__queued_then_run_when_online() -> None:
    inference = Inference()
    network = Network(online=False)
    device = _device(inference, network, document=_background_document())
    results: list[tuple[str, dict[str, Any]]] = []
    device.add_listener(lambda name, details: results.append((name, details)))

    outcome = await device.run(task(latency_budget="background"))
    assert (outcome.queued, outcome.result, device.offline_pending) == (True, None, 1)
    assert inference.cloud_calls == []
    assert device.telemetry.pending == 0

    network.set(online=True)
    await device._drain_offline_tasks()

    (name, details) = results[0]
    assert name == "queued_result"
    assert (details["outcome"].route, details["outcome"].result) == ("cloud", "cloud:400")
    assert device.offline_pending == 0
    assert device.telemetry.pending == 1


async def test_run__offline_queue_full__oldest_dropped_and_counted() -> None:
    device = _device(
        Inference(), Network(online=False), document=_background_document(), offline_queue_max=2
    )

    for tokens in (400, 401, 402):
        await device.run(task(latency_budget="background", tokens=tokens))

    assert (device.offline_pending, device.offline_dropped) == (2, 1)
    assert [t.tokens for t in device._offline_tasks] == [401, 402]


# --- frames from the server -------------------------------------------------------------------


class Socket:
    """What the device writes back on its socket."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    async def send(self, text: str) -> None:
        self.sent.append(json.loads(text))


async def test_frame__policy__applied_acked_and_announced(tmp_path: Path) -> None:
    device = _device(Inference(), state_dir=tmp_path)
    events: list[tuple[str, dict[str, Any]]] = []
    device.add_listener(lambda name, details: events.append((name, details)))
    socket = Socket()
    frame = {"type": "policy", **policy_document(4), "rollout": {"id": 2, "stage": 5}}

    in_sync = await device._connection.on_frame(socket, json.dumps(frame))

    assert in_sync
    assert (device.policy.version, device.policy.rollout) == (4, {"id": 2, "stage": 5})
    assert socket.sent == [{"type": "ack", "version": 4}]
    assert ("policy", {"version": 4, "rollout": {"id": 2, "stage": 5}, "via": "socket"}) in events
    assert ("state", {"state": "connected", "previous": "stopped"}) in events
    await device.stop()  # waits for the policy's write (done on a worker thread)
    assert json.loads((tmp_path / "policy.json").read_text())["document"]["version"] == 4


async def test_frame__unusable_policy__not_applied_not_acked() -> None:
    device = _device(Inference(), document=policy_document(1))
    socket = Socket()
    frame = {"type": "policy", **policy_document(2), "cells": [{"mode": "auto"}]}

    assert not await device._connection.on_frame(socket, json.dumps(frame))

    assert (device.policy.version, device.policy_errors, socket.sent) == (1, 1, [])


@pytest.mark.parametrize(
    "frame",
    [
        '{"type":"error","code":"bad_message","detail":"frame is not valid JSON"}',
        '{"type":"error","code":"not_assigned","detail":"version 9 is not assigned"}',
        "not json at all",
    ],
)
async def test_frame__error_or_garbage__counted_and_tolerated(frame: str) -> None:
    device = _device(Inference(), document=policy_document(1))

    assert not await device._connection.on_frame(Socket(), frame)

    assert device.server_errors == 1
    assert device.policy.version == 1


async def test_frame__unknown_type_or_not_an_object__ignored() -> None:
    device = _device(Inference())

    for frame in ('{"type":"news_from_v2","x":1}', "[1,2]", '"text"'):
        assert not await device._connection.on_frame(Socket(), frame)

    assert device.server_errors == 0


async def test_frame__up_to_date__in_sync_and_connected() -> None:
    device = _device(Inference())

    assert await device._connection.on_frame(Socket(), '{"type":"up_to_date","version":1}')

    assert device.connection_state == "connected"


async def test_frame__cloud_pressure__applied_with_its_ttl_and_announced() -> None:
    device = _device(Inference())
    events: list[tuple[str, dict[str, Any]]] = []
    device.add_listener(lambda name, details: events.append((name, details)))

    await device._connection.on_frame(
        Socket(), '{"type":"cloud_pressure","theta_offset":0.1,"ttl_s":300}'
    )

    assert device.cloud_pressure == 0.1
    assert events == [("cloud_pressure", {"theta_offset": 0.1, "ttl_s": 300.0})]


async def test_run__under_cloud_pressure__event_says_the_offset_in_force() -> None:
    # Given a device under a live cloud-pressure nudge
    device = _device(Inference(), document=policy_document())
    await device._connection.on_frame(
        Socket(), '{"type":"cloud_pressure","theta_offset":0.1,"ttl_s":300}'
    )

    # When it runs a task
    await device.run(task())

    # Then its event carries the offset the decision used, the online reading and estimate
    (event,) = _events(device)
    assert (event["cloud_pressure"], event["online"], event["cloud_infer_ms"]) == (
        0.1,
        True,
        250.0,
    )


@pytest.mark.parametrize(
    "message",
    [
        {"theta_offset": "0.1", "ttl_s": 300},
        {"theta_offset": 1.5, "ttl_s": 300},
        {"theta_offset": 0.1, "ttl_s": -1},
        {"theta_offset": True, "ttl_s": 300},
        {"ttl_s": 300},
    ],
)
async def test_frame__bad_cloud_pressure__ignored_and_counted(message: dict[str, Any]) -> None:
    device = _device(Inference())

    await device._connection.on_frame(Socket(), json.dumps({"type": "cloud_pressure", **message}))

    assert (device.cloud_pressure, device.server_errors) == (0.0, 1)


def test_listener__raises__others_still_called() -> None:
    device = _device(Inference())
    seen: list[str] = []

    def broken(name: str, details: dict[str, Any]) -> None:
        raise RuntimeError("app bug")

    device.add_listener(broken)
    device.add_listener(lambda name, details: seen.append(name))
    device._connection.set_state("connecting")

    assert seen == ["state"]


# --- lifecycle without a network --------------------------------------------------------------


async def test_start__offline__no_network_io_and_state_offline(tmp_path: Path) -> None:
    inference = Inference()
    device = _device(inference, Network(online=False), state_dir=tmp_path, online_check_s=0.01)
    device.policy.apply(policy_document(2))  # stored by an earlier run

    restarted = _device(inference, Network(online=False), state_dir=tmp_path, online_check_s=0.01)
    await restarted.start()
    await asyncio.sleep(0.05)

    assert restarted.policy.version == 2
    assert restarted.connection_state == "offline"
    assert restarted.token is None  # did not try to enrol
    assert (await restarted.run(task())).decision.decided_by == "offline"
    await restarted.stop()
    assert restarted.connection_state == "stopped"
    assert (tmp_path / "telemetry.jsonl").exists()  # the unsent event kept for the next run


async def test_start__revoked_earlier__stays_revoked_without_any_loop(tmp_path: Path) -> None:
    (tmp_path / "revoked").write_text("socket closed with 4401")
    device = _device(Inference(), state_dir=tmp_path)

    await device.start()

    assert device.connection_state == "revoked"
    assert device._loops == []
    await device.stop()
    assert device.connection_state == "revoked"


# --- back-off and configuration ---------------------------------------------------------------


def test_backoff__each_wait_within_half_to_full_cap_doubling_to_the_max() -> None:
    backoff = Backoff(0.5, 4.0, random.Random(7))

    delays = [backoff.next_delay() for _ in range(6)]

    for delay, cap in zip(delays, [0.5, 1.0, 2.0, 4.0, 4.0, 4.0], strict=True):
        assert cap / 2 <= delay <= cap
    backoff.reset()
    assert backoff.next_delay() <= 0.5


def test_backoff__devices_with_different_seeds__spread_out() -> None:
    delays = {Backoff(1.0, 30.0, random.Random(seed)).next_delay() for seed in range(50)}

    assert len(delays) == 50


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("platform", "p" * 65),
        ("model", "m" * 129),
        ("device_id", "d" * 129),
        ("device_id", ""),
        ("device_id", "-starts-with-a-dash"),
        ("device_id", "has space"),
        ("sdk", "s" * 65),
        ("base_url", "ftp://host"),
    ],
)
def test_config__value_the_server_would_refuse__rejected_at_once(field: str, value: str) -> None:
    values = {
        "base_url": "http://127.0.0.1:8000",
        "fleet_key": "fk",
        "device_id": "phone-1",
        "platform": "android",
        "model": "pixel",
        field: value,
    }

    with pytest.raises(ValueError, match=field):
        DeviceConfig(**values)


def test_config__base_url__gives_the_device_socket_url() -> None:
    https = DeviceConfig(
        base_url="https://cp.example.com/", fleet_key="k", device_id="d", platform="", model=""
    )
    plain = DeviceConfig(
        base_url="http://127.0.0.1:8000", fleet_key="k", device_id="d", platform="", model=""
    )

    assert https.ws_url == "wss://cp.example.com/ws/device/"
    assert plain.ws_url == "ws://127.0.0.1:8000/ws/device/"


async def test_start__many_devices_in_one_loop__two_background_tasks_each() -> None:
    # Given 200 devices started in one event loop, offline (no network needed), sharing one
    # HTTP client as the simulator's do (200 clients of their own, each loading the CA bundle,
    # took 40 s on a loaded machine)
    before = len(asyncio.all_tasks())
    async with httpx.AsyncClient() as http:
        devices = [
            _device(
                Inference(),
                Network(online=False),
                device_id=f"phone-{i}",
                online_check_s=0.01,
                http=http,
            )
            for i in range(200)
        ]
        for device in devices:
            await device.start()
        await asyncio.sleep(0.05)

        # Then each runs exactly its connection loop and its telemetry loop, nothing more
        assert len(asyncio.all_tasks()) - before == 2 * 200
        for device in devices:
            await device.stop()
        assert len(asyncio.all_tasks()) == before


async def test_start__same_device_stopped_and_started_again__events_not_doubled(
    tmp_path: Path,
) -> None:
    device = _device(Inference(), Network(online=False), state_dir=tmp_path, online_check_s=0.01)
    device.policy.apply(policy_document())
    await device.start()
    await device.run(task())
    await device.stop()

    await device.start()

    assert device.telemetry.pending == 1
    await device.stop()
