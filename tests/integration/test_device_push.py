"""Live push on real servers: two uvicorn processes on one Redis and one PostgreSQL database.

200 real WebSocket devices, half on each process. A stage change reaches exactly the devices
whose assignment changed (wherever they are connected), a rollback exactly the candidate
cohort, a device that was away catches up at `hello`, and a killed process's devices come back
with jittered back-off and hold their assignment.
"""

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from routing_policies.assignment import bucket
from routing_policies.models import Device, Rollout
from routing_policies.selectors import device_list, fleet_convergence
from routing_policies.services import (
    cloud_pressure_set,
    device_enroll,
    device_revoke,
    rollout_advance,
    rollout_rollback,
    rollout_start,
)
from tests.live_server import (
    REPO_ROOT,
    STARTUP_TIMEOUT_S,
    _answers,
    free_port,
    require_postgres_and_redis,
    server_environment,
)

from .ws_clients import (
    CLOSE_SUPERSEDED,
    CLOSE_UNAUTHORISED,
    BackgroundLoop,
    DeviceClient,
    close_code,
    device_clients,
    enroll_many,
    open_socket,
    recv_json,
    wait_until,
)

pytestmark = pytest.mark.integration

DEVICES = 200
# Outer bounds: each wait ends as soon as what it waits for has happened (well under a second
# for a push on a quiet machine); a loaded 2-core machine can take many seconds.
DELIVERY_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 60.0  # 200 devices connecting (or reconnecting) and saying hello
QUIET_S = 1.0  # after the last expected message: long enough for any stray one to arrive


class AsgiProcess:
    """One uvicorn process over the test database; it can be SIGKILLed and restarted in place."""

    def __init__(
        self,
        settings_dict: dict[str, Any],
        port: int | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.settings_dict = settings_dict
        self.extra_env = extra_env or {}
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115 (closed in stop)
            prefix=f"asgi-{self.port}-", suffix=".log", delete=False
        )

    def start(self) -> None:
        """Start on `self.port` and wait until it answers /healthz."""
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "controlplane.asgi:application",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--lifespan",
                "off",
            ],
            cwd=REPO_ROOT,
            env={**server_environment(self.settings_dict), **self.extra_env},
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not _answers(f"{self.url}/healthz"):
            if self.process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"ASGI server on {self.port} did not come up:\n{self.output()}")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL: no shutdown handler runs, sockets just vanish (as on a crashed host)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=5)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        self.log.close()
        os.unlink(self.log.name)

    def output(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")


@pytest.fixture(scope="module")
def servers(django_db_setup: None, django_db_blocker: Any) -> Iterator[list[AsgiProcess]]:
    """Two ASGI processes sharing the test database and one Redis."""
    require_postgres_and_redis("live push")
    processes = [AsgiProcess(dict(connection.settings_dict)) for _ in range(2)]
    try:
        for process in processes:
            process.start()
        yield processes
    finally:
        for process in processes:
            process.stop()


@pytest.fixture
def v2(fleet: Any, publish_version: Callable[..., Any]) -> Any:
    """v2 of `fleet`, published (v1 stays stable)."""
    return publish_version(fleet, threshold=0.75)


def _device_ids(count: int) -> list[str]:
    return [f"phone-{i:04d}" for i in range(count)]


def _enrol_split(
    background: BackgroundLoop, servers: list[AsgiProcess], fleet_key: str, count: int
) -> dict[str, tuple[str, str]]:
    """Enrol `count` devices over HTTP; device id → (server it connects to, token), alternating."""
    ids = _device_ids(count)
    tokens = background.run(enroll_many(servers[0].url, fleet_key=fleet_key, device_ids=ids))
    return {d: (servers[i % 2].url, tokens[d]) for i, d in enumerate(ids)}


def _wait_acked(fleet: Any, version: int, count: int, timeout: float = DELIVERY_TIMEOUT_S) -> None:
    wait_until(
        lambda: Device.objects.filter(fleet=fleet, acked_version=version).count() >= count,
        timeout=timeout,
        interval=0.1,
        what=f"{count} devices to ack v{version}",
    )


def _connect_all(clients: dict[str, DeviceClient], fleet: Any, version: int) -> None:
    """Every client connected, said hello, got `version` and acked it."""
    wait_until(
        lambda: all(c.policy_version == version for c in clients.values()),
        timeout=CONNECT_TIMEOUT_S,
        what=f"every device to receive v{version}",
    )
    _wait_acked(fleet, version, len(clients))


def _receivers_after(
    clients: dict[str, DeviceClient], since: float, expected: set[str], version: int
) -> dict[str, list[dict[str, Any]]]:
    """Wait until every expected device has a `policy` for `version`, then QUIET_S more;
    return every device that received anything since `since`, with what it received."""
    wait_until(
        lambda: all(
            any(
                f.message.get("version") == version
                for f in clients[d].frames_since(since, "policy")
            )
            for d in expected
        ),
        timeout=DELIVERY_TIMEOUT_S,
        what=f"{len(expected)} devices to receive v{version}",
    )
    time.sleep(QUIET_S)
    return {
        d: [f.message for f in c.frames_since(since)]
        for d, c in clients.items()
        if c.frames_since(since)
    }


def _versions(convergence: dict[str, Any]) -> dict[int, tuple[int, int]]:
    """version → (assigned, acked)."""
    return {v["version"]: (v["assigned"], v["acked"]) for v in convergence["versions"]}


def test_device_push__start_advance_rollback__exactly_the_devices_whose_assignment_changed(
    transactional_db: None,
    servers: list[AsgiProcess],
    background: BackgroundLoop,
    fleet: Any,
    fleet_key: str,
    v2: Any,
    publisher: Any,
) -> None:
    # Given 200 devices on v1, half connected to each of two server processes
    tokens = _enrol_split(background, servers, fleet_key, DEVICES)
    with device_clients(background, tokens) as clients:
        _connect_all(clients, fleet, version=1)

        # When v2 starts at 5% (the service runs in this process; the push goes through Redis)
        since = time.monotonic()
        rollout = rollout_start(actor=publisher, fleet=fleet, version=2)
        buckets = {d: bucket(rollout.salt, d) for d in clients}
        at_5 = {d for d, b in buckets.items() if b < 500}
        received = _receivers_after(clients, since, at_5, version=2)

        # Then exactly the devices with a bucket below 500 got v2 (once), with the rollout
        assert set(received) == at_5
        for messages in received.values():
            assert len(messages) == 1
            assert messages[0]["type"] == "policy"
            assert messages[0]["rollout"] == {"id": rollout.pk, "stage": 5}
            assert messages[0]["fleet"] == fleet.slug
            assert messages[0]["etag"] == v2.etag
            assert len(messages[0]["cells"]) == 12
        _wait_acked(fleet, 2, len(at_5))

        # When it advances to 25%
        since = time.monotonic()
        rollout_advance(actor=publisher, fleet=fleet, to_stage=25)
        at_25 = {d for d, b in buckets.items() if b < 2500}
        received = _receivers_after(clients, since, at_25 - at_5, version=2)

        # Then exactly buckets 500–2499 got a message: v2 at stage 25
        assert set(received) == at_25 - at_5
        assert all(
            m
            == [
                {**m[0], "type": "policy", "version": 2, "rollout": {"id": rollout.pk, "stage": 25}}
            ]
            for m in received.values()
        )
        _wait_acked(fleet, 2, len(at_25))
        convergence = fleet_convergence(fleet)
        assert _versions(convergence) == {
            2: (len(at_25), len(at_25)),
            1: (DEVICES - len(at_25), DEVICES - len(at_25)),
        }
        # acks of the 25% stage, timed from that stage change
        assert convergence["propagation"]["count"] == len(at_25 - at_5)
        if at_25 - at_5:
            p50, p95 = convergence["propagation"]["p50_ms"], convergence["propagation"]["p95_ms"]
            assert 0 <= p50 <= p95 < DELIVERY_TIMEOUT_S * 1000

        # When it is rolled back
        since = time.monotonic()
        rollout_rollback(actor=publisher, fleet=fleet, reason="test")
        received = _receivers_after(clients, since, at_25, version=1)

        # Then exactly the candidate cohort got v1 back (no rollout), nobody else anything
        assert set(received) == at_25
        assert all(
            [(x["type"], x["version"], x["rollout"]) for x in m] == [("policy", 1, None)]
            for m in received.values()
        )
        _wait_acked(fleet, 1, DEVICES)
        assert _versions(fleet_convergence(fleet)) == {1: (DEVICES, DEVICES)}
        assert all(c.connections == 1 for c in clients.values())


def test_device_push__stage_changes_during_connect_storm__every_device_ends_on_its_version(
    transactional_db: None,
    servers: list[AsgiProcess],
    background: BackgroundLoop,
    fleet: Any,
    fleet_key: str,
    v2: Any,
    publisher: Any,
) -> None:
    # Given 100 enrolled devices
    tokens = _enrol_split(background, servers, fleet_key, DEVICES // 2)

    # When they all connect at once while v2 starts, reaches 100% and is rolled back, again
    # and again, and finally stays at 25% (pushes racing with hellos in flight)
    with device_clients(background, tokens) as clients:
        for _ in range(4):
            rollout_start(actor=publisher, fleet=fleet, version=2)
            time.sleep(0.2)
            rollout_advance(actor=publisher, fleet=fleet, to_stage=100)
            time.sleep(0.2)
            rollout_rollback(actor=publisher, fleet=fleet)
            time.sleep(0.2)
        rollout = rollout_start(actor=publisher, fleet=fleet, version=2)
        rollout_advance(actor=publisher, fleet=fleet, to_stage=25)
        assigned = {d: 2 if bucket(rollout.salt, d) < 2500 else 1 for d in clients}

        # Then every device ends up running exactly its assignment, none stuck on a stale one
        wait_until(
            lambda: all(c.policy_version == assigned[d] for d, c in clients.items()),
            timeout=CONNECT_TIMEOUT_S,
            what="every device to hold its assignment",
        )
        wait_until(
            lambda: dict(Device.objects.values_list("device_id", "acked_version")) == assigned,
            timeout=DELIVERY_TIMEOUT_S,
            interval=0.1,
            what="the registry to show every device acked its assignment",
        )


def test_device_push__offline_during_stage_change__gets_assignment_and_pressure_at_hello(
    transactional_db: None,
    servers: list[AsgiProcess],
    background: BackgroundLoop,
    fleet: Any,
    fleet_key: str,
    v2: Any,
    publisher: Any,
) -> None:
    # Given 20 devices on v1, then 10 of them go offline
    tokens = _enrol_split(background, servers, fleet_key, 20)
    away = set(_device_ids(20)[::2])
    with device_clients(background, tokens) as clients:
        _connect_all(clients, fleet, version=1)
        background.run(_stop_some(clients, away))

        # When v2 goes to 100% and a cloud-pressure nudge is sent while they are away
        rollout = rollout_start(actor=publisher, fleet=fleet, version=2)
        rollout_advance(actor=publisher, fleet=fleet, to_stage=100)
        cloud_pressure_set(actor=publisher, fleet=fleet, theta_offset=0.2, ttl_s=600)
        wait_until(
            lambda: all(c.policy_version == 2 for d, c in clients.items() if d not in away),
            timeout=DELIVERY_TIMEOUT_S,
            what="online devices to get v2",
        )

        # ... and they come back (to the other server), saying they run v1
        returning = {
            d: (tokens[d][0] if i % 2 else _other(servers, tokens[d][0]), tokens[d][1])
            for i, d in enumerate(sorted(away))
        }
        with device_clients(background, returning, policy_version=1) as back:
            wait_until(
                lambda: all(c.last("cloud_pressure") for c in back.values()),
                timeout=DELIVERY_TIMEOUT_S,
                what="returning devices to get their assignment",
            )

            # Then at hello each got v2 with the rollout's stage, and the live nudge
            for client in back.values():
                kinds = [f.type for f in client.frames]
                assert kinds == ["policy", "cloud_pressure"]
                policy = client.frames[0].message
                assert (policy["version"], policy["rollout"]) == (
                    2,
                    {"id": rollout.pk, "stage": 100},
                )
                pressure = client.frames[1].message
                assert pressure["theta_offset"] == 0.2
                assert 590 <= pressure["ttl_s"] <= 600
            _wait_acked(fleet, 2, 20)


def _other(servers: list[AsgiProcess], url: str) -> str:
    return servers[1].url if url == servers[0].url else servers[0].url


async def _stop_some(clients: dict[str, DeviceClient], device_ids: set[str]) -> None:
    for device_id in device_ids:
        await clients[device_id].stop()


def test_device_push__server_killed_and_restarted__every_client_reconnects_and_holds_assignment(
    transactional_db: None,
    servers: list[AsgiProcess],
    background: BackgroundLoop,
    fleet: Any,
    fleet_key: str,
    v2: Any,
    publisher: Any,
) -> None:
    # Given 200 devices on two servers, v2 at 25%, every device acked its version
    tokens = _enrol_split(background, servers, fleet_key, DEVICES)
    with device_clients(background, tokens) as clients:
        _connect_all(clients, fleet, version=1)
        rollout = rollout_start(actor=publisher, fleet=fleet, version=2)
        rollout_advance(actor=publisher, fleet=fleet, to_stage=25)
        assigned = {d: 2 if bucket(rollout.salt, d) < 2500 else 1 for d in clients}
        wait_until(
            lambda: all(c.policy_version == assigned[d] for d, c in clients.items()),
            timeout=DELIVERY_TIMEOUT_S,
            what="the 25% cohort to get v2",
        )
        on_killed = {d for d, (url, _) in tokens.items() if url == servers[0].url}

        # When server 0 is SIGKILLed and restarted on the same port
        killed_at = time.monotonic()
        servers[0].kill()
        wait_until(
            lambda: all(not clients[d].is_open for d in on_killed),
            timeout=DELIVERY_TIMEOUT_S,
            what="clients of the killed server to notice",
        )
        servers[0].start()

        # Then every one of its clients reconnects (jittered back-off) and, after hello, is
        # told it is up to date with exactly its assignment; the other server's clients notice
        # nothing
        wait_until(
            lambda: all(
                clients[d].connections == 2 and clients[d].frames_since(killed_at)
                for d in on_killed
            ),
            timeout=CONNECT_TIMEOUT_S,
            what="every client of the killed server to reconnect and hear back",
        )
        for device_id, client in clients.items():
            after = [f.message for f in client.frames_since(killed_at)]
            if device_id in on_killed:
                assert after == [{"type": "up_to_date", "version": assigned[device_id]}]
                assert client.connect_failures >= 1  # it retried while the server was down
            else:
                assert after == []
                assert client.connections == 1
        online = device_list(fleet=fleet, online=True, limit=5000)
        assert len(online) == DEVICES

        # ... and the restarted server is subscribed again: 100% reaches its devices too
        since = time.monotonic()
        rollout_advance(actor=publisher, fleet=fleet, to_stage=100)
        on_v1 = {d for d, v in assigned.items() if v == 1}
        received = _receivers_after(clients, since, on_v1, version=2)
        assert set(received) == on_v1


def test_device_revoke__open_socket__closed_4401(
    transactional_db: None,
    servers: list[AsgiProcess],
    background: BackgroundLoop,
    fleet: Any,
    fleet_key: str,
    publisher: Any,
) -> None:
    # Given two connected devices, each on another server
    tokens = _enrol_split(background, servers, fleet_key, 2)
    with device_clients(background, tokens) as clients:
        _connect_all(clients, fleet, version=1)

        # When an operator revokes each one
        for device in Device.objects.filter(fleet=fleet):
            device_revoke(actor=publisher, device=device)

        # Then each socket is closed with 4401 (whichever server holds it), and stays closed
        wait_until(
            lambda: all(c.finished for c in clients.values()),
            timeout=DELIVERY_TIMEOUT_S,
            what="revoked sockets to close",
        )
        assert all(c.close_codes == [CLOSE_UNAUTHORISED] for c in clients.values())


def test_device_enroll_again__old_token_socket_closed_new_token_socket_kept(
    transactional_db: None,
    servers: list[AsgiProcess],
    background: BackgroundLoop,
    fleet: Any,
    fleet_key: str,
) -> None:
    # Given a device connected with its token on server 0
    tokens = _enrol_split(background, servers, fleet_key, 1)
    (device_id,) = tokens
    with device_clients(background, tokens) as old:
        _connect_all(old, fleet, version=1)

        # When the app is reinstalled: it enrols again and connects with the new token
        _, new_token = device_enroll(fleet_key=fleet_key, device_id=device_id)
        with device_clients(
            background, {device_id: (servers[1].url, new_token)}, policy_version=1
        ) as new:
            wait_until(
                lambda: old[device_id].finished and new[device_id].frames,
                timeout=DELIVERY_TIMEOUT_S,
                what="the old socket to close and the new one to hear back",
            )
            time.sleep(QUIET_S)

            # Then the old token's socket is closed (4401 or superseded), the new one is open
            assert old[device_id].close_codes[-1] in (CLOSE_UNAUTHORISED, CLOSE_SUPERSEDED)
            assert new[device_id].is_open
            assert new[device_id].close_codes == []
            assert [f.message for f in new[device_id].frames] == [
                {"type": "up_to_date", "version": 1}
            ]
            assert Device.objects.get(device_id=device_id).connected


@pytest.mark.parametrize("same_server", [True, False], ids=["same-server", "other-server"])
def test_device_connects_twice__older_socket_closed_4409_newer_works(
    transactional_db: None,
    servers: list[AsgiProcess],
    background: BackgroundLoop,
    fleet: Any,
    fleet_key: str,
    v2: Any,
    publisher: Any,
    same_server: bool,
) -> None:
    # Given a device connected (hello done) on server 0
    tokens = _enrol_split(background, servers, fleet_key, 1)
    (device_id,) = tokens
    token = tokens[device_id][1]
    second_url = servers[0].url if same_server else servers[1].url

    async def scenario() -> tuple[int | None, dict[str, Any], dict[str, Any]]:
        first = await open_socket(servers[0].url, token)
        await first.send(_hello(device_id, None))
        await recv_json(first)

        # When it connects again (a second socket, as after a network switch)
        second = await open_socket(second_url, token)
        await second.send(_hello(device_id, 1))
        hello_answer = await recv_json(second)
        old_code = await close_code(first)

        # ... and then v2 goes to 100%: only the newer socket hears about it
        await _to_thread(lambda: _to_100(fleet, publisher))
        pushed = await recv_json(second)
        await second.close()
        return old_code, hello_answer, pushed

    old_code, hello_answer, pushed = background.run(scenario())

    # Then the older socket was closed with 4409 and the newer one works
    assert old_code == CLOSE_SUPERSEDED
    assert hello_answer == {"type": "up_to_date", "version": 1}
    assert (pushed["type"], pushed["version"]) == ("policy", 2)


def test_device_connects_twice__older_socket_closes__device_still_online(
    transactional_db: None,
    servers: list[AsgiProcess],
    background: BackgroundLoop,
    fleet: Any,
    fleet_key: str,
) -> None:
    # Given a device connected on server 0, then again on server 1
    tokens = _enrol_split(background, servers, fleet_key, 1)
    (device_id,) = tokens
    token = tokens[device_id][1]

    async def scenario() -> None:
        first = await open_socket(servers[0].url, token)
        await first.send(_hello(device_id, None))
        await recv_json(first)
        second = await open_socket(servers[1].url, token)
        await second.send(_hello(device_id, 1))
        await recv_json(second)

        # When the older socket goes away
        await close_code(first)
        await first.close()
        await _to_thread(lambda: time.sleep(QUIET_S))

        # Then the device is still shown online: it is connected through the newer socket
        connected = await _to_thread(lambda: Device.objects.get(device_id=device_id).connected)
        await second.close()
        assert connected

    background.run(scenario())


def _enrol_one(
    background: BackgroundLoop, servers: list[AsgiProcess], fleet_key: str
) -> tuple[str, str]:
    """One device enrolled over HTTP: (device id, token)."""
    ((device_id, (_, token)),) = _enrol_split(background, servers, fleet_key, 1).items()
    return device_id, token


def _registry_online(fleet: Any, device_id: str) -> tuple[bool, int]:
    """What an operator sees: the registry's online flag of the device, and the rollout
    page's count of online devices."""
    (row,) = [r for r in device_list(fleet=fleet, limit=5000) if r["device_id"] == device_id]
    return row["online"], fleet_convergence(fleet)["online"]


def test_device_online__reenrolled_then_new_socket_before_hello__offline_until_hello(
    transactional_db: None,
    servers: list[AsgiProcess],
    background: BackgroundLoop,
    fleet: Any,
    fleet_key: str,
) -> None:
    # Given a device online through a socket that said hello with its token
    device_id, token = _enrol_one(background, servers, fleet_key)

    async def scenario() -> list[tuple[bool, int]]:
        seen = []
        old = await open_socket(servers[0].url, token)
        await old.send(_hello(device_id, 1))
        await recv_json(old)
        seen.append(await _to_thread(lambda: _registry_online(fleet, device_id)))

        # When the app is reinstalled: it enrols again, and its old token's socket is closed
        _, new_token = await _to_thread(
            lambda: device_enroll(fleet_key=fleet_key, device_id=device_id)
        )
        await close_code(old)
        seen.append(await _to_thread(lambda: _registry_online(fleet, device_id)))

        # ... then it connects with the new token (accepted), first saying nothing, then hello
        new = await open_socket(servers[1].url, new_token)
        seen.append(await _to_thread(lambda: _registry_online(fleet, device_id)))
        await new.send(_hello(device_id, 1))
        await recv_json(new)
        seen.append(await _to_thread(lambda: _registry_online(fleet, device_id)))
        await new.close()
        return seen

    seen = background.run(scenario())

    # Then the registry and the rollout page show it online, offline as soon as the old socket
    # closed (not minutes later), still offline while the new socket has not said hello (an
    # open socket alone is not online), and online once it has
    assert seen == [(True, 1), (False, 0), (False, 0), (True, 1)]


def _hello(device_id: str, version: int | None) -> str:
    import json

    return json.dumps(
        {"type": "hello", "device_id": device_id, "policy_version": version, "sdk": "t/1"}
    )


def _to_100(fleet: Any, publisher: Any) -> Rollout:
    rollout_start(actor=publisher, fleet=fleet, version=2)
    return rollout_advance(actor=publisher, fleet=fleet, to_stage=100)


async def _to_thread(func: Callable[[], Any]) -> Any:
    """Run ORM code from the clients' loop (the ORM is synchronous)."""
    import asyncio

    from django.db import close_old_connections

    def run() -> Any:
        try:
            return func()
        finally:
            close_old_connections()

    return await asyncio.to_thread(run)
