"""The edge SDK's `Device` against a real control plane (uvicorn + PostgreSQL + Redis).

Each test runs real SDK devices on an asyncio loop in a background thread and checks what the
server saw (its device registry, its telemetry ledger and events) and what the device did.
Where the network between them matters (a lost reply, a proxy that blocks WebSockets), the
devices talk through `TcpProxy`, a real TCP proxy in the same process.
"""

import json
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from edge_sdk import Decision, Device, DeviceConfig, Outcome, Readings, Task
from routing_policies.assignment import bucket
from routing_policies.models import Device as DeviceRow
from routing_policies.services import (
    cloud_pressure_set,
    device_revoke,
    rollout_advance,
    rollout_start,
)
from telemetry.ingest.services import landed_batches_process
from telemetry.models import Event, EventKey
from tests.live_server import require_postgres_and_redis

from .tcp_proxy import TcpProxy
from .test_device_push import AsgiProcess
from .ws_clients import BackgroundLoop, wait_until

pytestmark = pytest.mark.integration

# Outer bound of each wait (it ends as soon as its condition holds): a loaded 2-core machine
# can take many seconds for what takes milliseconds on a quiet one.
WAIT_S = 45.0
# The nudge's TTL: long enough to be pushed, seen and tried on a busy machine before it lapses
# (the server sends what is left of it; 2 s could be gone before the device had looked).
NUDGE_TTL_S = 6
# The demo fleet's text/interactive/normal cell: auto, θ 0.6, weights 0.4/0.3/0.3 over 400 tokens.
CHAT = {"task_type": "text", "latency_budget": "interactive", "privacy_tier": "normal"}


class Network:
    """The readings a device sees; tests flip `online`."""

    def __init__(self, *, online: bool = True) -> None:
        self.online = online

    def __call__(self) -> Readings:
        return Readings(
            rtt_ms=60.0,
            bandwidth_kbps=20_000.0,
            device_load=0.2,
            online=self.online,
            cloud_infer_ms=80.0,
        )


async def _on_device(task: Task) -> str:
    return f"device:{task.tokens}"


async def _on_cloud(task: Task, decision: Decision) -> str:
    return f"cloud:{task.tokens}"


@pytest.fixture(scope="module")
def server(django_db_setup: None, django_db_blocker: Any) -> Iterator[AsgiProcess]:
    """One uvicorn process over the test database; tests may kill and restart it in place."""
    require_postgres_and_redis("the SDK's integration tests")
    process = AsgiProcess(dict(connection.settings_dict))
    try:
        process.start()
        yield process
    finally:
        process.stop()


@pytest.fixture
def proxy(server: AsgiProcess, background: BackgroundLoop) -> Iterator[TcpProxy]:
    tcp_proxy = TcpProxy(server.port)
    background.run(tcp_proxy.start())
    yield tcp_proxy
    background.run(tcp_proxy.close())


@pytest.fixture
def devices(background: BackgroundLoop) -> Iterator[Callable[..., Device]]:
    """`devices(base_url, fleet_key, device_id, network=…, state_dir=…, **config)`: a started
    SDK device on the background loop; all are stopped after the test."""
    started: list[Device] = []

    def _make(
        base_url: str,
        fleet_key: str,
        device_id: str,
        *,
        network: Network | None = None,
        state_dir: Path | None = None,
        cloud_infer: Callable[[Task, Decision], Awaitable[str]] = _on_cloud,
        **config: Any,
    ) -> Device:
        settings = {
            "telemetry_flush_s": 0.2,
            "backoff_base_s": 0.05,
            "backoff_max_s": 0.5,
            "poll_interval_s": 0.3,
            "online_check_s": 0.1,
            **config,
        }
        device = Device(
            DeviceConfig(
                base_url=base_url,
                fleet_key=fleet_key,
                device_id=device_id,
                platform="android",
                model="pixel-9",
                state_dir=state_dir,
                **settings,
            ),
            readings=network or Network(),
            device_infer=_on_device,
            cloud_infer=cloud_infer,
        )
        background.run(device.start())
        started.append(device)
        return device

    yield _make
    for device in started:
        background.run(device.stop())


def _task(tokens: int = 240, **overrides: Any) -> Task:
    fields: dict[str, Any] = {
        **CHAT,
        "tokens": tokens,
        "intent_conf": 0.8,
        "lm_conf": 0.7,
        **overrides,
    }
    return Task(**fields)


def _run_tasks(background: BackgroundLoop, device: Device, count: int) -> list[Outcome]:
    async def run_all() -> list[Outcome]:
        return [await device.run(_task(tokens=10 + i)) for i in range(count)]

    return background.run(run_all())


def _pending_ids(background: BackgroundLoop, device: Device) -> list[str]:
    async def ids() -> list[str]:
        return device.telemetry.event_ids()

    return background.run(ids())


def _row(device_id: str) -> DeviceRow:
    return DeviceRow.objects.get(device_id=device_id)


def _process_landed() -> None:
    while landed_batches_process().batches:
        pass


def test_sdk__enrol_and_hello__registry_shows_the_device_acked_v1(
    transactional_db: None,
    server: AsgiProcess,
    devices: Callable[..., Device],
    fleet: Any,
    fleet_key: str,
    tmp_path: Path,
) -> None:
    # Given a fleet with v1 published, When a new device starts with an empty state_dir
    device = devices(server.url, fleet_key, "sdk-enrol-1", state_dir=tmp_path)

    # Then it enrols, connects, gets v1 and acks it: the registry says so
    wait_until(
        lambda: device.connection_state == "connected" and device.policy.version == 1,
        timeout=WAIT_S,
        what="the device to connect and apply v1",
    )
    wait_until(
        lambda: _row("sdk-enrol-1").acked_version == 1, timeout=WAIT_S, what="the ack recorded"
    )
    row = _row("sdk-enrol-1")
    assert (row.platform, row.model, row.sdk) == ("android", "pixel-9", device.config.sdk)
    assert row.connected
    # ... and its token and the policy are on disk (the token readable by the owner only)
    assert (tmp_path / "token").stat().st_mode & 0o077 == 0
    wait_until(lambda: (tmp_path / "policy.json").exists(), timeout=WAIT_S, what="policy saved")
    stored = json.loads((tmp_path / "policy.json").read_text())
    assert stored["document"]["version"] == 1
    assert len(device.policy.cells) == 12


def test_sdk__bad_fleet_key__enrolment_refused_and_not_retried(
    transactional_db: None, server: AsgiProcess, devices: Callable[..., Device], fleet: Any
) -> None:
    device = devices(server.url, "not-a-fleet-key", "sdk-badkey-1")

    wait_until(
        lambda: device.connection_state == "stopped" and device.last_error is not None,
        timeout=WAIT_S,
        what="the enrolment to be refused",
    )
    assert "401" in str(device.last_error)
    assert not DeviceRow.objects.filter(device_id="sdk-badkey-1").exists()


def test_sdk__stage_change__pushed_applied_and_acked(
    transactional_db: None,
    server: AsgiProcess,
    background: BackgroundLoop,
    devices: Callable[..., Device],
    fleet: Any,
    fleet_key: str,
    publish_version: Callable[..., Any],
    publisher: Any,
) -> None:
    # Given a connected device on v1 and a published v2 whose voice θ is 0.95
    device = devices(server.url, fleet_key, "sdk-stage-1")
    events: list[tuple[str, dict[str, Any]]] = []
    device.add_listener(lambda name, details: events.append((name, details)))
    wait_until(lambda: device.policy.version == 1, timeout=WAIT_S, what="v1")
    publish_version(fleet, threshold=0.95)
    voice = _task(tokens=400, task_type="voice", intent_conf=0.5, lm_conf=0.5)
    assert background.run(_route(device, voice)).route == "cloud"  # 0.7 >= θ 0.65 under v1

    # When a rollout of v2 goes to 100%
    rollout = rollout_start(actor=publisher, fleet=fleet, version=2)
    rollout_advance(actor=publisher, fleet=fleet, to_stage=100)

    # Then the device applies v2 (with the rollout's stage), acks it, and routes by it; a
    # device already in the 5% cohort is told once, at 5% (its assignment did not change)
    wait_until(lambda: device.policy.version == 2, timeout=WAIT_S, what="v2 to be pushed")
    told_at = 5 if bucket(rollout.salt, "sdk-stage-1") < 500 else 100
    assert device.policy.rollout == {"id": rollout.pk, "stage": told_at}
    wait_until(lambda: _row("sdk-stage-1").acked_version == 2, timeout=WAIT_S, what="ack of v2")
    assert ("policy", {"version": 2, "rollout": dict(device.policy.rollout), "via": "socket"}) in [
        (name, details) for name, details in events if name == "policy"
    ]
    decision = background.run(_route(device, voice))
    assert (decision.route, decision.threshold) == ("device", 0.95)


async def _route(device: Device, task: Task) -> Decision:
    return device.router.route(task)


def test_sdk__cloud_pressure__raises_theta_until_its_ttl_passes(
    transactional_db: None,
    server: AsgiProcess,
    background: BackgroundLoop,
    devices: Callable[..., Device],
    fleet: Any,
    fleet_key: str,
    publisher: Any,
) -> None:
    # Given a connected device and a voice task that goes to the cloud (score 0.7 >= θ 0.65)
    device = devices(server.url, fleet_key, "sdk-pressure-1")
    wait_until(lambda: device.connection_state == "connected", timeout=WAIT_S, what="connected")
    task = _task(tokens=400, task_type="voice", intent_conf=0.5, lm_conf=0.5)
    assert background.run(_route(device, task)).route == "cloud"

    # When the operator nudges θ by +0.2 for a few seconds
    cloud_pressure_set(actor=publisher, fleet=fleet, theta_offset=0.2, ttl_s=NUDGE_TTL_S)

    # Then the device keeps the task on the device while the nudge lasts ...
    wait_until(lambda: device.cloud_pressure == 0.2, timeout=WAIT_S, what="the nudge")
    decision = background.run(_route(device, task))
    assert decision.route == "device"
    assert ("cloud_pressure", 0.2) in decision.adjustments
    # ... and sends it to the cloud again once the TTL has passed
    wait_until(lambda: device.cloud_pressure == 0.0, timeout=WAIT_S, what="the nudge to lapse")
    assert background.run(_route(device, task)).route == "cloud"


def test_sdk__telemetry__every_event_lands_once_with_its_id(
    transactional_db: None,
    server: AsgiProcess,
    background: BackgroundLoop,
    devices: Callable[..., Device],
    fleet: Any,
    fleet_key: str,
) -> None:
    # Given a connected device whose cloud fails for every task of an odd length
    async def flaky_cloud(task: Task, decision: Decision) -> str:
        if task.tokens % 2:
            raise ConnectionError("cloud answered 503")
        return f"cloud:{task.tokens}"

    device = devices(
        server.url, fleet_key, "sdk-telemetry-1", telemetry_flush_s=3600, cloud_infer=flaky_cloud
    )
    wait_until(lambda: device.policy.version == 1, timeout=WAIT_S, what="v1")

    # When it runs a short and a long task in each of the 12 cells, twice (the second time
    # answered from the cache), and flushes
    tasks = [
        _task(
            task_type=task_type,
            latency_budget=budget,
            privacy_tier=tier,
            tokens=tokens,
            intent_conf=conf,
            lm_conf=conf,
            upload_bytes=2048,
            cache_key=f"{task_type}-{tokens}",
        )
        for task_type in ("voice", "text", "image")
        for budget in ("interactive", "background")
        for tier in ("sensitive", "normal")
        for tokens, conf in ((20, 0.95), (601, 0.3))
    ]

    async def run_all() -> list[Outcome]:
        return [await device.run(task) for task in tasks + tasks]

    outcomes = background.run(run_all())
    ids = _pending_ids(background, device)
    assert background.run(device.telemetry.flush())

    # Then the server took all 48 (every route, fixed and scored decisions, fallbacks)
    # and stored each id once, with what the device decided and did
    assert (device.telemetry.delivered, device.telemetry.pending) == (48, 0)
    assert device.telemetry.rejected == 0
    assert EventKey.objects.filter(event_id__in=ids).count() == 48
    _process_landed()
    stored = {str(e.event_id): e for e in Event.objects.filter(device_id="sdk-telemetry-1")}
    assert set(stored) == set(ids)
    for event_id, outcome in zip(ids, outcomes, strict=True):
        event = stored[event_id]
        assert (
            event.route,
            event.decided_by,
            event.fallback,
            event.cache_hit,
            event.ok,
            event.policy_version,
        ) == (
            outcome.decision.route,
            outcome.decision.decided_by,
            outcome.fallback,
            outcome.cache_hit,
            outcome.ok,
            1,
        )
        assert event.score == pytest.approx(outcome.decision.score)
    seen = {(e.route, e.decided_by, e.fallback) for e in stored.values()}
    assert {"device", "cloud", "draft_refine"} <= {route for route, _, _ in seen}
    assert {"policy", "threshold"} <= {decided for _, decided, _ in seen}
    assert "cloud_to_device" in {fallback for _, _, fallback in seen}
    assert sum(e.cache_hit for e in stored.values()) >= 12


def test_sdk__control_plane_goes_away_and_comes_back__reconnects_and_loses_nothing(
    transactional_db: None,
    server: AsgiProcess,
    background: BackgroundLoop,
    proxy: TcpProxy,
    devices: Callable[..., Device],
    fleet: Any,
    fleet_key: str,
    tmp_path: Path,
) -> None:
    # Given a connected device (through a proxy) whose first 5 events were delivered
    device = devices(proxy.url, fleet_key, "sdk-away-1", state_dir=tmp_path)
    wait_until(lambda: device.connection_state == "connected", timeout=WAIT_S, what="connected")
    _run_tasks(background, device, 5)
    wait_until(lambda: device.telemetry.delivered == 5, timeout=WAIT_S, what="5 delivered")

    # When the server stores 7 more events but its 202 is lost on the way back ...
    proxy.mode = "cut_responses"
    _run_tasks(background, device, 7)
    lost_reply = _pending_ids(background, device)
    wait_until(
        lambda: (
            EventKey.objects.filter(event_id__in=lost_reply).count() == 7
            and device.telemetry.failures >= 1
        ),
        timeout=WAIT_S,
        what="the server to store the batch whose reply was cut",
    )
    assert device.telemetry.pending == 7  # kept: no 202 was seen

    # ... and then the server process dies, while the device runs 4 more tasks
    server.kill()
    proxy.mode = "pass"
    wait_until(lambda: device.connection_state == "connecting", timeout=WAIT_S, what="noticed")
    _run_tasks(background, device, 4)
    wait_until(lambda: (tmp_path / "telemetry.jsonl").exists(), timeout=WAIT_S, what="saved")
    assert device.telemetry.pending == 11

    # Then, once it is back, the device reconnects by itself and resends everything
    server.start()
    wait_until(
        lambda: device.connection_state == "connected" and device.telemetry.pending == 0,
        timeout=WAIT_S,
        what="reconnection and resend",
    )
    assert device.reconnects >= 1
    # the 7 stored before are reported as duplicates (same event ids), the 4 new accepted
    assert (device.telemetry.duplicates, device.telemetry.delivered) == (7, 9)
    assert device.telemetry.dropped == device.telemetry.rejected == 0
    _process_landed()
    assert Event.objects.filter(device_id="sdk-away-1").count() == 16  # none lost, none twice
    assert not (tmp_path / "telemetry.jsonl").exists()


def test_sdk__offline_start__routes_with_the_stored_policy_and_sends_the_queue_on_return(
    transactional_db: None,
    server: AsgiProcess,
    background: BackgroundLoop,
    devices: Callable[..., Device],
    fleet: Any,
    fleet_key: str,
    tmp_path: Path,
) -> None:
    # Given a device that got v1 once, then stopped
    first = devices(server.url, fleet_key, "sdk-offline-1", state_dir=tmp_path)
    wait_until(lambda: first.policy.version == 1, timeout=WAIT_S, what="v1 stored")
    background.run(first.stop())

    # When it starts again without a network
    network = Network(online=False)
    device = devices(server.url, fleet_key, "sdk-offline-1", state_dir=tmp_path, network=network)

    # Then it routes at once with the stored v1: a long background text task is queued
    # for the cloud, an interactive one answered on the device; nothing is sent
    assert device.policy.version == 1
    background_task = _task(tokens=400, latency_budget="background", intent_conf=0.3, lm_conf=0.3)
    queued = background.run(device.run(background_task))
    answered = background.run(device.run(_task(tokens=400, intent_conf=0.3, lm_conf=0.3)))
    assert (queued.queued, queued.decision.decided_by, queued.result) == (True, "offline", None)
    assert (answered.route, answered.decision.decided_by, answered.ok) == (
        "device",
        "offline",
        True,
    )
    assert device.connection_state == "offline"
    assert device.offline_pending == 1
    results: list[Outcome] = []
    device.add_listener(
        lambda name, details: (
            results.append(details["outcome"]) if name == "queued_result" else None
        )
    )

    # When the network returns, the queued task goes to the cloud and all telemetry is sent
    network.online = True
    wait_until(
        lambda: results and device.telemetry.pending == 0 and device.telemetry.delivered == 2,
        timeout=WAIT_S,
        what="the queue to drain",
    )
    assert (results[0].route, results[0].result) == ("cloud", "cloud:400")
    assert device.offline_pending == 0
    wait_until(lambda: device.connection_state == "connected", timeout=WAIT_S, what="connected")


def test_sdk__socket_refused__polls_with_etag_and_returns_to_the_socket(
    transactional_db: None,
    server: AsgiProcess,
    proxy: TcpProxy,
    devices: Callable[..., Device],
    fleet: Any,
    fleet_key: str,
    publish_version: Callable[..., Any],
    publisher: Any,
) -> None:
    # Given a network that refuses WebSocket upgrades
    proxy.mode = "refuse_upgrade"
    device = devices(proxy.url, fleet_key, "sdk-poll-1")

    # Then the device polls and gets v1 anyway
    wait_until(
        lambda: device.connection_state == "polling" and device.policy.version == 1,
        timeout=WAIT_S,
        what="v1 by polling",
    )
    assert proxy.refused_upgrades >= 1

    # When v2 is rolled out to everyone, the next poll brings it
    publish_version(fleet, threshold=0.9)
    rollout_start(actor=publisher, fleet=fleet, version=2)
    rollout_advance(actor=publisher, fleet=fleet, to_stage=100)
    wait_until(lambda: device.policy.version == 2, timeout=WAIT_S, what="v2 by polling")
    assert device.policy.etag == fleet.versions.get(number=2).etag

    # When upgrades are allowed again, the device goes back to its socket and says it runs v2
    proxy.mode = "pass"
    wait_until(lambda: device.connection_state == "connected", timeout=WAIT_S, what="socket")
    wait_until(
        lambda: _row("sdk-poll-1").reported_version == 2, timeout=WAIT_S, what="hello with v2"
    )


def test_sdk__revoked_token__stops_as_revoked_and_stays_stopped(
    transactional_db: None,
    server: AsgiProcess,
    background: BackgroundLoop,
    devices: Callable[..., Device],
    fleet: Any,
    fleet_key: str,
    publisher: Any,
    tmp_path: Path,
) -> None:
    # Given a connected device
    device = devices(server.url, fleet_key, "sdk-revoke-1", state_dir=tmp_path)
    wait_until(lambda: device.connection_state == "connected", timeout=WAIT_S, what="connected")

    # When the operator revokes it
    device_revoke(actor=publisher, device=_row("sdk-revoke-1"))

    # Then it reports "revoked", drops its token, and does not enrol again
    wait_until(lambda: device.connection_state == "revoked", timeout=WAIT_S, what="revoked")
    assert not (tmp_path / "token").exists()
    assert (tmp_path / "revoked").exists()
    # ... it still answers tasks on the device with its last policy
    outcome = background.run(device.run(_task()))
    assert (outcome.ok, outcome.policy_version) == (True, 1)
    # ... and a restart with the same state_dir stays revoked, without touching the server
    background.run(device.stop())
    again = devices(server.url, fleet_key, "sdk-revoke-1", state_dir=tmp_path)
    assert again.connection_state == "revoked"
    assert _row("sdk-revoke-1").revoked_at is not None


def test_sdk__token_revoked_while_the_device_was_stopped__revoked_at_connect_no_reenrolment(
    transactional_db: None,
    server: AsgiProcess,
    background: BackgroundLoop,
    devices: Callable[..., Device],
    fleet: Any,
    fleet_key: str,
    publisher: Any,
    tmp_path: Path,
) -> None:
    # Given a device that enrolled, then stopped, and was revoked while it was stopped
    first = devices(server.url, fleet_key, "sdk-revoke-2", state_dir=tmp_path)
    wait_until(lambda: first.connection_state == "connected", timeout=WAIT_S, what="connected")
    background.run(first.stop())
    device_revoke(actor=publisher, device=_row("sdk-revoke-2"))
    token_hash = _row("sdk-revoke-2").token_hash

    # When it starts again with its stored token
    device = devices(server.url, fleet_key, "sdk-revoke-2", state_dir=tmp_path)

    # Then the socket is closed with 4401 and the device stops as revoked, without enrolling
    # again (which would have given it a new token and undone the revocation)
    wait_until(lambda: device.connection_state == "revoked", timeout=WAIT_S, what="revoked")
    assert "4401" in str(device.last_error)
    row = _row("sdk-revoke-2")
    assert (row.token_hash, row.revoked_at is not None) == (token_hash, True)


def test_sdk__server_error_frame__counted_and_the_socket_stays_open(
    transactional_db: None,
    server: AsgiProcess,
    background: BackgroundLoop,
    devices: Callable[..., Device],
    fleet: Any,
    fleet_key: str,
) -> None:
    # Given a connected device
    device = devices(server.url, fleet_key, "sdk-error-1")
    wait_until(lambda: device.connection_state == "connected", timeout=WAIT_S, what="connected")

    # When a malformed frame goes up its socket, the server answers with an `error` frame
    async def send_garbage() -> None:
        socket = device._connection.transport.channel
        assert socket is not None
        await socket.send("{not json")

    background.run(send_garbage())

    # Then the device counts it and keeps the same socket, still in sync
    wait_until(lambda: device.server_errors == 1, timeout=WAIT_S, what="the error frame")
    assert device.connection_state == "connected"
    assert device.reconnects == 0


def test_sdk__device_connecting_during_a_nudge__gets_the_pressure_at_hello(
    transactional_db: None,
    server: AsgiProcess,
    devices: Callable[..., Device],
    fleet: Any,
    fleet_key: str,
    publisher: Any,
) -> None:
    # Given a nudge of +0.15 for 10 minutes, set before the device exists
    cloud_pressure_set(actor=publisher, fleet=fleet, theta_offset=0.15, ttl_s=600)

    # When a device connects, Then it gets the nudge right after its policy
    device = devices(server.url, fleet_key, "sdk-pressure-2")
    wait_until(lambda: device.cloud_pressure == 0.15, timeout=WAIT_S, what="the nudge at hello")
    assert device.policy.version == 1


def test_sdk__second_instance_with_the_same_token__first_is_superseded_and_does_not_fight(
    transactional_db: None,
    server: AsgiProcess,
    devices: Callable[..., Device],
    fleet: Any,
    fleet_key: str,
    tmp_path: Path,
) -> None:
    # Given a connected device
    first = devices(server.url, fleet_key, "sdk-twin-1", state_dir=tmp_path)
    wait_until(lambda: first.connection_state == "connected", timeout=WAIT_S, what="connected")

    # When a second instance starts from the same state (same token) and connects
    second = devices(server.url, fleet_key, "sdk-twin-1", state_dir=tmp_path)
    wait_until(lambda: second.connection_state == "connected", timeout=WAIT_S, what="second")

    # Then the first is told it was superseded (4409) and stops instead of reconnecting
    wait_until(lambda: first.connection_state == "stopped", timeout=WAIT_S, what="superseded")
    assert "4409" in str(first.last_error)
    assert second.connection_state == "connected"
    assert _row("sdk-twin-1").connected


def test_sdk__attributes__sent_at_enrolment_and_in_every_hello(
    transactional_db: None,
    server: AsgiProcess,
    devices: Callable[..., Device],
    fleet: Any,
    fleet_key: str,
    tmp_path: Path,
) -> None:
    # Given a device enrolled earlier, by an app that said it ran on the CPU
    from routing_policies.services import device_enroll

    _, token = device_enroll(
        fleet_key=fleet_key, device_id="sdk-attr-1", attributes={"accelerator": "cpu"}
    )
    (tmp_path / "token").write_text(token)
    # and a new device enrolling with what it is
    reported = {
        "accelerator": "npu",
        "os_version": "14",
        "memory_gb": 8,
        "local_model": "qwen2.5-1.5b",
        "quantisation": "int4",
    }
    fresh = devices(server.url, fleet_key, "sdk-attr-2", attributes=reported)

    # When the app, updated, starts with the stored token and its attributes now
    updated = devices(
        server.url,
        fleet_key,
        "sdk-attr-1",
        state_dir=tmp_path,
        attributes={**reported, "region": "eu-west"},
    )

    # Then its hello replaced what it reported before; the new one's enrolment stored its own
    for device in (fresh, updated):
        wait_until(
            lambda device=device: device.connection_state == "connected",
            timeout=WAIT_S,
            what="the devices to connect",
        )
    wait_until(
        lambda: _row("sdk-attr-1").attributes == {**reported, "region": "eu-west"},
        timeout=WAIT_S,
        what="the hello's attributes recorded",
    )
    assert _row("sdk-attr-2").attributes == reported
