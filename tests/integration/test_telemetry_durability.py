"""`202` means durable: with a real Celery worker (and beat), a real ASGI server, PostgreSQL and a
Redis of the test's own, every event that got a 202 is stored exactly once and rolled up exactly
once, through a worker SIGKILLed in the middle of a batch, a Redis restart that loses every
queued task, and a restart of the web process; resends in between are stored once."""

import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.db import connection

from routing_policies.services import device_enroll
from telemetry.models import (
    Event,
    FleetHourRollup,
    HourRollup,
    LandedBatch,
    MinuteRollup,
    RouteCounter,
)
from tests.factories import make_events
from tests.live_server import (
    REPO_ROOT,
    STARTUP_TIMEOUT_S,
    free_port,
    running_asgi_server,
    server_environment,
)

pytestmark = pytest.mark.integration

WORKER_APP_NAME = "telemetry-durability-worker"


@dataclass
class OwnRedis:
    """A redis-server on a free port, with nothing on disk: a restart loses every queued task."""

    port: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait_until(lambda: _redis_answers(self.port), 10, "redis-server did not start")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def restart(self) -> None:
        self.kill()
        self.start()


def _redis_answers(port: int) -> bool:
    import redis

    try:
        return bool(redis.Redis(port=port, socket_connect_timeout=0.2).ping())
    except redis.RedisError:
        return False


def _wait_until(condition: Callable[[], bool], timeout_s: float, message: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(message)
        time.sleep(0.02)


@pytest.fixture
def own_redis(monkeypatch: pytest.MonkeyPatch) -> Iterator[OwnRedis]:
    """A Redis for this test only (the shared one on 6379 is left alone)."""
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but the database is not PostgreSQL")
        pytest.skip("needs PostgreSQL (set DATABASE_URL)")
    server = OwnRedis(port=free_port())
    server.start()
    monkeypatch.setenv("REDIS_URL", server.url)
    # Quick sweeps so the test need not wait long for lost tasks; no rate limit in the way.
    monkeypatch.setenv("TELEMETRY_SWEEP_AFTER_S", "1")
    monkeypatch.setenv("TELEMETRY_SWEEP_INTERVAL_S", "1")
    monkeypatch.setenv("TELEMETRY_COMPACT_INTERVAL_S", "1")
    monkeypatch.setenv("TELEMETRY_RATE_LIMIT_BATCHES", "0")
    yield server
    server.kill()


class Worker:
    """A Celery worker process (solo pool, embedded beat) on the test database."""

    def __init__(self, extra_env: dict[str, str]) -> None:
        self.extra_env = extra_env
        self.process: subprocess.Popen[bytes] | None = None
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115 (closed in stop)
            prefix="celery-worker-", suffix=".log", delete=False
        )
        self.schedule = Path(tempfile.mkdtemp(prefix="celery-beat-")) / "schedule"

    def start(self) -> None:
        env = server_environment(dict(connection.settings_dict))
        env["DATABASE_URL"] += f"?application_name={WORKER_APP_NAME}"
        env.update(self.extra_env)
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "controlplane",
                "worker",
                "-B",
                "--schedule",
                str(self.schedule),
                "--pool",
                "solo",
                "--loglevel",
                "INFO",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "-n",
                f"durability-{uuid.uuid4().hex[:8]}@%h",
            ],
            cwd=REPO_ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: SIGKILL reaches beat too
        )

    def sigkill(self) -> None:
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.sigkill()
        self.log.close()

    def wait_ready(self, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        """Wait until the worker consumes its queue (it logs `… ready.`), so that a test's own
        bounds time the pipeline, not the worker's start on a busy machine."""
        _wait_until(
            lambda: (
                " ready." in self.output()
                or self.process is None
                or self.process.poll() is not None
            ),
            timeout_s,
            "the Celery worker did not start",
        )
        assert self.process is not None
        if self.process.poll() is not None:
            pytest.fail(
                f"the Celery worker exited with code {self.process.returncode}:\n{self.output()}"
            )

    def __enter__(self) -> "Worker":
        self.start()
        self.wait_ready()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        os.unlink(self.log.name)

    def output(self) -> str:
        return Path(self.log.name).read_text(errors="replace")


@pytest.fixture
def start_worker() -> Iterator[Callable[..., Worker]]:
    workers: list[Worker] = []

    def _start(**extra_env: str) -> Worker:
        worker = Worker(extra_env)
        worker.start()
        workers.append(worker)
        worker.wait_ready()
        return worker

    yield _start
    for worker in workers:
        worker.stop()
        os.unlink(worker.log.name)


@pytest.fixture
def phone_token(transactional_db: None, fleet: Any, fleet_key: str) -> str:
    """A committed device `phone-1` of `fleet` (v1): its token."""
    _, token = device_enroll(fleet_key=fleet_key, device_id="phone-1", platform="android")
    return token


class Sender:
    """Posts batches over HTTP and remembers which event ids got a 202."""

    def __init__(self, base_url: str, token: str) -> None:
        self.base_url = base_url
        self.headers = {"Authorization": f"Bearer {token}"}
        self.accepted: set[str] = set()

    def post(self, events: list[dict[str, Any]]) -> dict[str, int]:
        response = httpx.post(
            f"{self.base_url}/api/v1/telemetry",
            json={"events": events},
            headers=self.headers,
            timeout=30,
        )
        assert response.status_code == 202, response.text
        self.accepted.update(event["event_id"] for event in events)
        body: dict[str, int] = response.json()
        return body


def _worker_writing() -> bool:
    """True while the worker's database session is inside a transaction that has written."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
            "AND backend_xid IS NOT NULL",
            [WORKER_APP_NAME],
        )
        return bool(cursor.fetchone()[0])


def _worker_sessions() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [WORKER_APP_NAME]
        )
        return int(cursor.fetchone()[0])


def _landed_events() -> int:
    return sum(LandedBatch.objects.values_list("event_count", flat=True))


def _assert_stored_and_rolled_up_once(accepted: set[str], timeout_s: float = 40) -> None:
    """Wait until nothing is landed and every partial rollup is compacted, then check."""
    _wait_until(
        lambda: (
            not LandedBatch.objects.exists()
            and not FleetHourRollup.objects.filter(compacted=False).exists()
        ),
        timeout_s,
        "landed batches were not all processed and compacted in time",
    )
    stored = list(Event.objects.values_list("event_id", flat=True))
    assert len(stored) == len(set(stored)), "an event id is stored twice"
    assert {str(event_id) for event_id in stored} == accepted
    total = len(accepted)
    for model in (MinuteRollup, HourRollup, FleetHourRollup):
        assert sum(model.objects.values_list("events", flat=True)) == total, model.__name__
    assert sum(RouteCounter.objects.values_list("events", flat=True)) == total


def test_telemetry_durability__worker_sigkilled_mid_batch__accepted_events_stored_once(
    own_redis: OwnRedis, phone_token: str, start_worker: Callable[..., Worker]
) -> None:
    # Given 24 batches of 1,000 events accepted (202) by the web process, none processed yet
    with running_asgi_server(dict(connection.settings_dict)) as base_url:
        sender = Sender(base_url, phone_token)
        for _ in range(24):
            sender.post(make_events(1000))
    assert _landed_events() == 24_000

    # When a worker takes 8 batches per transaction, commits some, and is SIGKILLed while
    # writing the next ones
    worker = start_worker(TELEMETRY_PROCESS_MAX_BATCHES="8")
    _wait_until(
        lambda: Event.objects.exists() and _worker_writing(),
        30,
        "the worker never got into a second transaction",
    )
    worker.sigkill()
    _wait_until(lambda: _worker_sessions() == 0, 10, "the killed worker's session lingered")

    # Then what it was writing rolled back whole: every batch is either stored or still landed
    stored_now = Event.objects.count()
    assert stored_now + _landed_events() == 24_000
    assert stored_now % 1000 == 0
    assert 0 < stored_now < 24_000

    # When a worker starts again (the killed task is never acknowledged: the sweeper finds it)
    start_worker(TELEMETRY_PROCESS_MAX_BATCHES="8")

    # Then every accepted event is stored exactly once and rolled up exactly once
    _assert_stored_and_rolled_up_once(sender.accepted)


def test_telemetry_durability__redis_and_web_restarted__accepted_events_stored_once(
    own_redis: OwnRedis, phone_token: str, start_worker: Callable[..., Worker]
) -> None:
    # Given batches accepted while no worker runs (their wake-up task waits in Redis), one of
    # them half-resent, and one accepted while Redis is down
    settings_dict = dict(connection.settings_dict)
    with running_asgi_server(settings_dict) as base_url:
        sender = Sender(base_url, phone_token)
        first = make_events(500)
        sender.post(first)
        for _ in range(5):
            sender.post(make_events(500))
        resent = sender.post(first[:250] + make_events(250))
        own_redis.kill()
        during_outage = make_events(500)
        sender.post(during_outage)

    # When Redis comes back empty (every queued task lost) and a worker starts, with no request
    # to wake it: only the sweeper can find the landed batches
    own_redis.start()
    start_worker()
    _wait_until(lambda: not LandedBatch.objects.exists(), 30, "the sweeper found nothing")

    # and then a restarted web process takes a resend and a new batch
    with running_asgi_server(settings_dict) as base_url:
        sender.base_url = base_url
        again = sender.post(during_outage)
        sender.post(make_events(500))

    # Then resends were counted as duplicates, and every accepted event is stored and rolled up
    # exactly once
    assert resent == {"accepted": 250, "duplicates": 250}
    assert again == {"accepted": 0, "duplicates": 500}
    _assert_stored_and_rolled_up_once(sender.accepted)
