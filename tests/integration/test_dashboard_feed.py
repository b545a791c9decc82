"""The dashboard's live feed on a real ASGI server, a real Celery worker, PostgreSQL and Redis.

Browsers are played by WebSocket clients carrying a real session cookie and Origin header;
telemetry goes through the real ingest path (HTTP, landing, Celery drain, rollups). Several
browsers showing the same view must receive the same computation of each update (one
computation fanned out), never one computation each.
"""

import asyncio
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from controlplane.roles import Role
from routing_policies.services import device_enroll, fleet_enrollment_key_rotate
from tests.factories import UserFactory, make_events, make_fleet
from tests.integration.test_telemetry_durability import Worker
from tests.integration.ws_clients import wait_until
from tests.live_server import asgi_server, empty_test_redis, session_cookie

__all__ = ["asgi_server"]

pytestmark = pytest.mark.integration

SLUG = "dash-feed"
WAIT_S = 60.0  # an outer bound: each read ends as soon as its frame arrives


@dataclass
class Live:
    """A fleet on the live server, sessions of a viewer and of a user without a role."""

    base_url: str
    viewer_cookie: str
    no_role_cookie: str
    device_token: str


@pytest.fixture
def own_redis_db() -> None:
    """This test's Redis database starts empty (no queued tasks or views of an earlier run)."""
    empty_test_redis()


@pytest.fixture
def live(
    asgi_server: str, transactional_db: None, requires_postgres: None, own_redis_db: None
) -> Live:
    publisher = UserFactory(role=Role.PUBLISHER, username="pia")
    fleet = make_fleet(slug=SLUG, actor=publisher)
    key = fleet_enrollment_key_rotate(actor=publisher, fleet=fleet)
    _, token = device_enroll(fleet_key=key, device_id="phone-1", platform="android")
    return Live(
        base_url=asgi_server,
        viewer_cookie=session_cookie(UserFactory(role=Role.VIEWER, username="vic")),
        no_role_cookie=session_cookie(UserFactory(role=None, username="nobody")),
        device_token=token,
    )


@pytest.fixture
def worker(own_redis_db: None) -> Iterator[Worker]:
    """A real Celery worker (solo pool, beat) on the test database and this test's Redis."""
    with Worker({"TELEMETRY_RATE_LIMIT_BATCHES": "0"}) as started:
        yield started


def _ws_url(base_url: str, slug: str = SLUG) -> str:
    return base_url.replace("http://", "ws://") + f"/ws/ui/fleets/{slug}/dashboard/"


async def _open(
    live: Live, *, cookie: str | None, origin: str | None = None, slug: str = SLUG
) -> ClientConnection:
    headers = {"Cookie": f"sessionid={cookie}"} if cookie else {}
    return await connect(
        _ws_url(live.base_url, slug),
        additional_headers=headers,
        origin=origin or live.base_url,  # type: ignore[arg-type]
        proxy=None,
        open_timeout=10,
    )


async def _next(socket: ClientConnection) -> dict[str, Any]:
    message: dict[str, Any] = json.loads(await asyncio.wait_for(socket.recv(), WAIT_S))
    return message


async def _subscribed(socket: ClientConnection, **view: Any) -> str:
    await socket.send(json.dumps({"type": "subscribe", **view}))
    reply = await _next(socket)
    assert reply["type"] == "subscribed", reply
    return str(reply["view_key"])


async def _post(live: Live, events: list[dict[str, Any]]) -> None:
    async with httpx.AsyncClient(trust_env=False, timeout=20) as http:
        response = await http.post(
            f"{live.base_url}/api/v1/telemetry",
            json={"events": events},
            headers={"Authorization": f"Bearer {live.device_token}"},
        )
    assert response.status_code == 202, response.text


@dataclass
class Browser:
    """One dashboard socket and every `dashboard` frame it received."""

    socket: ClientConnection
    frames: list[dict[str, Any]] = field(default_factory=list)

    async def until(self, condition: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """Read frames until one's payload meets `condition`; return that payload."""
        while True:
            message = await _next(self.socket)
            assert message["type"] == "dashboard", message
            self.frames.append(message)
            if condition(message["payload"]):
                return dict(message["payload"])


def _events(total: int) -> Callable[[dict[str, Any]], bool]:
    return lambda payload: payload["summary"]["events"] == total


def test_dashboard_feed__three_browsers_one_view__each_update_computed_once(
    live: Live, worker: Worker
) -> None:
    async def scenario() -> tuple[list[Browser], Browser]:
        # Given three browsers on the fleet's last hour and one on its voice tasks only
        same = [Browser(await _open(live, cookie=live.viewer_cookie)) for _ in range(3)]
        keys = {await _subscribed(b.socket, window="1h") for b in same}
        assert keys == {"window=1h"}
        voice = Browser(await _open(live, cookie=live.viewer_cookie))
        assert await _subscribed(voice.socket, window="1h", task_type="voice") != "window=1h"

        # When a device reports 5 text events and 2 voice events through the ingest path
        await _post(live, make_events(5) + make_events(2, task_type="voice", route="cloud"))

        # Then every browser is pushed the update, without asking for it
        first = [await b.until(_events(7)) for b in same]
        voice_first = await voice.until(_events(2))
        assert voice_first["summary"]["cloud_share"] == 1.0
        assert {p["summary"]["alpha"] for p in first} == {5 / 7}

        # When more events arrive, the same browsers get the next update too
        await _post(live, make_events(3))
        for browser in same:
            await browser.until(_events(10))
        for browser in [*same, voice]:
            await browser.socket.close()
        return same, voice

    same, voice = asyncio.run(scenario())

    # The three sockets of one view were sent the very same computations, each once
    seen = [[frame["payload"]["computation"] for frame in b.frames] for b in same]
    for computations in seen:
        assert len(computations) == len(set(computations)), "a computation arrived twice"
    shortest = min(len(c) for c in seen)
    assert all(c[:shortest] == seen[0][:shortest] for c in seen)
    voice_seen = {frame["payload"]["computation"] for frame in voice.frames}
    assert not voice_seen & set(seen[0]), "two views shared a computation"
    # and the worker computed each of them once (its log names every computation it sent; a
    # busy worker may write a line after the browsers already have its push)
    pattern = r"dashboard\.pushed fleet=\d+ view=(\S+) computation=(\w+)"
    wait_until(
        lambda: set(seen[0]) <= {c for _, c in re.findall(pattern, worker.output())},
        timeout=10,
        what="the worker's log of its pushes",
    )
    logged = re.findall(pattern, worker.output())
    per_computation: dict[str, int] = {}
    for _, computation in logged:
        per_computation[computation] = per_computation.get(computation, 0) + 1
    for computation in seen[0]:
        assert per_computation.get(computation) == 1, computation
    views_for = {c: v for v, c in logged}
    assert {views_for[c] for c in seen[0]} == {"window=1h"}


def test_dashboard_feed__refusals__anonymous_no_role_unknown_fleet_foreign_origin(
    live: Live,
) -> None:
    async def close_code(**kwargs: Any) -> int | None:
        socket = await _open(live, **kwargs)
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(socket.recv(), WAIT_S)
        return socket.close_code

    async def scenario() -> None:
        assert await close_code(cookie=None) == 4401
        assert await close_code(cookie=live.no_role_cookie) == 4403
        assert await close_code(cookie=live.viewer_cookie, slug="no-such-fleet") == 4404
        # A page of another site may not ride on the viewer's cookie
        with pytest.raises(InvalidStatus) as refused:
            await _open(live, cookie=live.viewer_cookie, origin="http://evil.example")
        assert refused.value.response.status_code == 403

    asyncio.run(scenario())


def test_dashboard_feed__bad_messages__clear_error_and_socket_stays_open(live: Live) -> None:
    async def scenario() -> None:
        socket = await _open(live, cookie=live.viewer_cookie)

        async def error_for(frame: str | bytes) -> dict[str, Any]:
            await socket.send(frame)
            reply = await _next(socket)
            assert reply["type"] == "error", reply
            assert reply["message"]
            return reply

        assert (await error_for("not json"))["code"] == "bad_message"
        assert (await error_for("[1, 2]"))["code"] == "bad_message"
        assert (await error_for(b"\x00\x01"))["code"] == "bad_message"
        assert (await error_for(json.dumps({"type": "x" * 5000})))["code"] == "too_large"
        assert (await error_for(json.dumps({"type": "unsubscribe"})))["code"] == "unknown_type"
        bad_window = await error_for(json.dumps({"type": "subscribe", "window": "2y"}))
        assert bad_window["code"] == "validation_failed"
        assert bad_window["details"][0]["field"] == "window"
        bad_filter = await error_for(json.dumps({"type": "subscribe", "route": ["cloud"]}))
        assert bad_filter["details"][0]["field"] == "route"
        unknown = await error_for(json.dumps({"type": "subscribe", "colour": "red"}))
        assert unknown["details"][0]["field"] == "colour"
        # Refused before any handler reads them, naming the field: nested 1,000 deep (a
        # recursive parser would overflow), a NUL, a lone surrogate, NaN
        for frame, named in [
            ('{"type": "subscribe", "route": ' + "[" * 1000 + "]" * 1000 + "}", "route[0]"),
            ('{"type": "subscribe", "route": "cloud\\u0000"}', "route"),
            ('{"type": "subscribe", "task_type": "\\ud800"}', "task_type"),
            ('{"type": "subscribe", "version": NaN}', "version"),
        ]:
            hostile = await error_for(frame)
            assert hostile["code"] == "bad_message"
            assert hostile["details"][0]["field"].startswith(named), hostile

        # The socket still works: a subscription twice is answered twice, and a snapshot
        # asked for arrives with the view's figures
        assert await _subscribed(socket, window="15m") == "window=15m"
        await socket.send(json.dumps({"type": "subscribe", "window": "15m", "snapshot": True}))
        assert (await _next(socket))["type"] == "subscribed"
        snapshot = await _next(socket)
        assert snapshot["type"] == "dashboard"
        assert snapshot["payload"]["view"]["window"] == "15m"
        assert len(snapshot["payload"]["buckets"]) == 15
        await socket.send(json.dumps({"type": "ping"}))
        assert (await _next(socket))["type"] == "pong"
        await socket.close()

    asyncio.run(scenario())
