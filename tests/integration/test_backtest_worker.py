"""A backtest started over HTTP on a real ASGI server runs in a real Celery worker: its
progress is readable while it runs, and its result reproduces the running version."""

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from rest_framework.authtoken.models import Token

from controlplane.roles import Role
from routing_policies.policies.sdk_cells import table_cells
from routing_policies.selectors import version_table
from tests.factories import UserFactory, decided_events, make_fleet
from tests.integration.test_telemetry_durability import Worker
from tests.live_server import asgi_server, empty_test_redis

__all__ = ["asgi_server"]

SLUG = "it-backtest"


@pytest.fixture
def worker() -> Iterator[Worker]:
    empty_test_redis()
    with Worker({"TELEMETRY_RATE_LIMIT_BATCHES": "0"}) as started:
        yield started


def _client(base_url: str, user: Any) -> httpx.Client:
    token = Token.objects.create(user=user)
    return httpx.Client(
        base_url=base_url, timeout=30, headers={"Authorization": f"Token {token.key}"}
    )


def test_backtest_api__live_server_and_worker__runs_and_reproduces_the_routing(
    asgi_server: str, transactional_db: None, requires_postgres: None, worker: Worker
) -> None:
    # Given a fleet on v1 with 2,000 recorded events and an editor's session
    publisher: Any = UserFactory(role=Role.PUBLISHER, username="pia")
    editor = UserFactory(role=Role.EDITOR, username="eddie")
    fleet = make_fleet(slug=SLUG, actor=publisher)
    decided_events(fleet, table_cells(version_table(version=fleet.versions.get())), count=2000)
    client = _client(asgi_server, editor)

    # When the editor starts a backtest of v1 and polls it
    started = client.post(f"/api/v1/fleets/{SLUG}/lab/backtests", json={"version": 1})
    assert started.status_code == 202, started.text
    url = started.json()["url"]
    seen: list[tuple[str, float]] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        body = client.get(url).json()
        seen.append((body["status"], body["progress"]))
        if body["status"] in ("done", "failed"):
            break
        time.sleep(0.2)

    # Then the worker ran it to the end, and replaying v1 reproduces v1's routing
    assert body["status"] == "done", (body["error"], worker.output())
    assert body["progress"] == 1.0
    assert body["events_done"] == body["events_total"] == 2000
    assert body["result"]["self_check"]["agreement"] == 1.0
    assert all(0.0 <= progress <= 1.0 for _, progress in seen)
