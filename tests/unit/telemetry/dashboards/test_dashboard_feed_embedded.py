"""The dashboard feed in embedded mode (no Redis): in-memory channel layer, rollups processed in
the process that holds the sockets. Two browsers on one view get one computation per update."""

import asyncio
import json
from typing import Any

import pytest
from asgiref.testing import ApplicationCommunicator
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.test import Client

from controlplane.roles import Role
from routing_policies.models import Fleet
from routing_policies.services import device_enroll, fleet_enrollment_key_rotate
from telemetry.dashboards import consumers
from telemetry.dashboards.schemas import parse_view
from telemetry.ingest.services import landed_batches_process, telemetry_batch_ingest
from tests.factories import UserFactory, make_events, make_fleet

SLUG = "dash-embedded"


def _setup() -> tuple[Any, str]:
    publisher = UserFactory(role=Role.PUBLISHER, username="pia")
    fleet = make_fleet(slug=SLUG, actor=publisher)
    key = fleet_enrollment_key_rotate(actor=publisher, fleet=fleet)
    device, _ = device_enroll(fleet_key=key, device_id="phone-1", platform="android")
    client = Client()
    client.force_login(UserFactory(role=Role.VIEWER, username="vic"))
    return device, str(client.cookies["sessionid"].value)


def _report(device: Any, events: list[dict[str, Any]]) -> None:
    telemetry_batch_ingest(device=device, body=json.dumps({"events": events}).encode())
    landed_batches_process()  # commits; the dashboard push runs on that commit, in-process


class Browser:
    """A dashboard socket spoken at the ASGI level (what uvicorn would hand the app)."""

    def __init__(self, cookie: str) -> None:
        from controlplane.asgi import application

        path = f"/ws/ui/fleets/{SLUG}/dashboard/"
        scope = {
            "type": "websocket",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "headers": [
                (b"host", b"testserver"),
                (b"origin", b"http://testserver"),
                (b"cookie", f"sessionid={cookie}".encode()),
            ],
            "subprotocols": [],
            "client": ("127.0.0.1", 50000),
            "server": ("testserver", 80),
        }
        self.app = ApplicationCommunicator(application, scope)

    async def open(self) -> None:
        await self.app.send_input({"type": "websocket.connect"})
        assert (await self.app.receive_output(10))["type"] == "websocket.accept"
        await self.app.send_input(
            {
                "type": "websocket.receive",
                "text": json.dumps({"type": "subscribe", "window": "15m"}),
            }
        )
        assert (await self.receive())["type"] == "subscribed"

    async def receive(self) -> dict[str, Any]:
        output = await self.app.receive_output(10)
        assert output["type"] == "websocket.send", output
        message: dict[str, Any] = json.loads(output["text"])
        return message

    async def close(self) -> None:
        await self.app.send_input({"type": "websocket.disconnect", "code": 1000})
        await self.app.wait(5)


async def _browser(cookie: str) -> Browser:
    browser = Browser(cookie)
    await browser.open()
    return browser


@pytest.mark.django_db(transaction=True)
async def test_dashboard_feed_embedded__two_browsers__one_computation_per_update(
    settings: Any,
) -> None:
    # Given embedded mode and two browsers on the same view
    settings.REDIS_URL = ""
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    assert type(get_channel_layer()).__name__ == "InMemoryChannelLayer"
    device, cookie = await database_sync_to_async(_setup)()
    browsers = [await _browser(cookie), await _browser(cookie)]

    for total, batch in ((4, make_events(4)), (7, make_events(3, route="cloud"))):
        # When a batch is processed
        await database_sync_to_async(_report)(device, batch)

        # Then both browsers receive the same computation, carrying the new figures
        frames = [await b.receive() for b in browsers]
        assert {f["type"] for f in frames} == {"dashboard"}
        assert len({f["payload"]["computation"] for f in frames}) == 1
        assert [f["payload"]["summary"]["events"] for f in frames] == [total, total]
        for browser in browsers:
            assert await browser.app.receive_nothing(timeout=0.2)

    for browser in browsers:
        await browser.close()


async def _send(browser: Browser, message: dict[str, Any]) -> None:
    await browser.app.send_input({"type": "websocket.receive", "text": json.dumps(message)})


@pytest.mark.django_db(transaction=True)
async def test_dashboard_feed_embedded__burst_of_snapshots__latest_view_sent_at_most_two(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given embedded mode, a browser on the 15-minute view, and reported events
    settings.REDIS_URL = ""
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    monkeypatch.setattr(consumers, "SNAPSHOT_MIN_INTERVAL_S", 2.0)
    device, cookie = await database_sync_to_async(_setup)()
    await database_sync_to_async(telemetry_batch_ingest)(
        device=device, body=json.dumps({"events": make_events(3)}).encode()
    )
    browser = await _browser(cookie)

    # When the page asks for four views' snapshots in a row (a user clicking through windows)
    windows = ["1h", "24h", "15m", "7d"]
    for window in windows:
        await _send(browser, {"type": "subscribe", "window": window, "snapshot": True})

    # Then every subscription is confirmed, the last view's snapshot arrives, and no more
    # than two snapshots are computed for the burst (the first, then the latest)
    frames = []
    while not any(f["type"] == "dashboard" and f["view_key"] == "window=7d" for f in frames):
        frames.append(await browser.receive())
    assert await browser.app.receive_nothing(timeout=2.5)
    assert [f["view_key"] for f in frames if f["type"] == "subscribed"] == [
        f"window={w}" for w in windows
    ]
    snapshots = [f for f in frames if f["type"] == "dashboard"]
    assert 1 <= len(snapshots) <= 2
    assert snapshots[-1]["payload"]["view"]["window"] == "7d"
    await browser.close()


@pytest.mark.django_db(transaction=True)
async def test_shared_snapshot__two_asks_for_one_view_at_once__one_computation() -> None:
    # Given a fleet and a view
    await database_sync_to_async(_setup)()
    fleet = await database_sync_to_async(Fleet.objects.get)(slug=SLUG)
    view = parse_view({"window": "1h"})

    # When two sockets ask for its snapshot at the same moment
    first, second = await asyncio.gather(
        consumers.shared_snapshot(fleet, view), consumers.shared_snapshot(fleet, view)
    )

    # Then both get the same computation; a later ask computes afresh
    assert (
        json.loads(first)["payload"]["computation"] == json.loads(second)["payload"]["computation"]
    )
    later = await consumers.shared_snapshot(fleet, view)
    assert (
        json.loads(later)["payload"]["computation"] != json.loads(first)["payload"]["computation"]
    )
