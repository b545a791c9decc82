"""Gray release in a real Chromium, with 40 real WebSocket devices on a real ASGI server.

The publisher starts a rollout, advances it and rolls it back; after each click the page
(reloaded once by the form's POST/redirect/GET) shows the devices acking their new version
live, without another reload. After a click the devices hold their acks until the reloaded
page has been read, then ack over the next 0.5–2 s, as real devices applying a policy do: the
page is seen catching up rather than arriving already converged, however long the reload took
(a fixed 2–4 s delay was shorter than a reload on a loaded machine).
"""

import asyncio
import json
import os
import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import transaction
from playwright.sync_api import Page, expect

from controlplane.roles import Role
from routing_policies import services
from routing_policies.assignment import bucket
from routing_policies.models import Device, Fleet, Rollout
from tests.factories import PASSWORD, UserFactory, make_fleet

from .conftest import screenshot_path

pytestmark = pytest.mark.e2e

SLUG = "e2e-rollout"
DEVICES = 40
FLEET_KEY = "fk_e2e_rollout"
ACK_DELAY_S = (0.5, 2.0)
LIVE_TIMEOUT_MS = 60_000  # an outer bound: each check passes as soon as the page shows it


class DeviceSwarm:
    """WebSocket devices on a thread of their own: hello, then ack every policy after a delay."""

    def __init__(self, ws_url: str, tokens: dict[str, str]) -> None:
        self.ws_url = ws_url
        self.tokens = tokens
        self.received: dict[str, list[int]] = {device_id: [] for device_id in tokens}
        self.errors: list[str] = []
        self.ready = threading.Event()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name="device-swarm", daemon=True)
        self._stop: asyncio.Event | None = None
        self._acks_open: asyncio.Event | None = None

    def start(self, timeout: float = 120.0) -> None:
        """Connect every device and wait until each has its first policy."""
        self.thread.start()
        if not self.ready.wait(timeout):
            missing = [d for d, versions in self.received.items() if not versions]
            raise AssertionError(
                f"{len(missing)} devices got no policy: {missing[:5]} {self.errors}"
            )

    def hold_acks(self) -> None:
        """From now on, policies received are acked only after `release_acks`."""
        self._on_loop(lambda gate: gate.clear())

    def release_acks(self) -> None:
        """Ack what was held (each after its own delay), and from now on as policies come."""
        self._on_loop(lambda gate: gate.set())

    def _on_loop(self, change: Any) -> None:
        async def apply() -> None:
            assert self._acks_open is not None
            change(self._acks_open)

        asyncio.run_coroutine_threadsafe(apply(), self.loop).result(timeout=30)

    def stop(self) -> None:
        if self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        self.thread.join(timeout=15)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._main())
        finally:
            self.loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        self._acks_open = asyncio.Event()
        self._acks_open.set()
        tasks = [
            asyncio.create_task(self._device(device_id, token))
            for device_id, token in self.tokens.items()
        ]
        await self._stop.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _device(self, device_id: str, token: str) -> None:
        from websockets.asyncio.client import connect

        rng = random.Random(device_id)
        pending_ack: asyncio.Task[None] | None = None
        async with connect(
            self.ws_url, additional_headers={"Authorization": f"Bearer {token}"}
        ) as socket:
            hello = {
                "type": "hello",
                "device_id": device_id,
                "policy_version": None,
                "sdk": "e2e-1.0",
                "platform": "android",
                "model": "pixel-e2e",
            }
            await socket.send(json.dumps(hello))

            async def ack_later(version: int) -> None:
                assert self._acks_open is not None
                await self._acks_open.wait()
                await asyncio.sleep(rng.uniform(*ACK_DELAY_S))
                await socket.send(json.dumps({"type": "ack", "version": version}))

            async for raw in socket:
                message = json.loads(raw)
                if message["type"] == "policy":
                    self.received[device_id].append(message["version"])
                    if pending_ack is not None:
                        pending_ack.cancel()  # a newer assignment supersedes the one not yet acked
                    pending_ack = asyncio.create_task(ack_later(message["version"]))
                    if all(self.received.values()):
                        self.ready.set()
                elif message["type"] == "error":
                    self.errors.append(f"{device_id}: {message}")


def wait_for(condition: Any, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


@pytest.fixture
def redis_required() -> None:
    """The live server must push through Redis, as in production."""
    if not os.environ.get("REDIS_URL"):
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but REDIS_URL is not set")
        pytest.skip("needs Redis (set REDIS_URL)")


@pytest.fixture
def rollout_fleet(transactional_db: None, requires_postgres: None) -> tuple[Fleet, dict[str, str]]:
    """A fleet with v1 stable, v2 published, and 40 enrolled devices (id → token)."""
    publisher: Any = UserFactory(role=Role.PUBLISHER, username="rhea")
    fleet = make_fleet(slug=SLUG, actor=publisher)
    draft = services.policy_draft_create(actor=publisher, fleet=fleet)
    services.policy_draft_update_cells(
        actor=publisher,
        fleet=fleet,
        revision=draft.revision,
        edits=[
            {
                "task_type": "image",
                "latency_budget": "interactive",
                "privacy_tier": "normal",
                "values": {"threshold": 0.75},
            }
        ],
    )
    services.policy_version_publish(
        actor=publisher, fleet=fleet, revision=draft.revision + 1, note="image θ 0.75"
    )
    # The key service locks a row without opening a transaction of its own (reported).
    with transaction.atomic():
        services.fleet_enrollment_key_rotate(actor=None, fleet=fleet, key=FLEET_KEY)
    tokens = {}
    for index in range(DEVICES):
        device_id = f"e2e-phone-{index:02d}"
        _, tokens[device_id] = services.device_enroll(
            fleet_key=FLEET_KEY, device_id=device_id, platform="android"
        )
    return fleet, tokens


@pytest.fixture
def swarm(
    asgi_server: str, redis_required: None, rollout_fleet: tuple[Fleet, dict[str, str]]
) -> Iterator[DeviceSwarm]:
    """The 40 devices connected to the live server, each having acked v1."""
    fleet, tokens = rollout_fleet
    devices = DeviceSwarm(asgi_server.replace("http://", "ws://") + "/ws/device/", tokens)
    devices.start()
    try:
        wait_for(
            lambda: Device.objects.filter(fleet=fleet, acked_version=1).count() == DEVICES,
            "every device to ack v1",
        )
        yield devices
    finally:
        devices.stop()


def cell(page: Page, version: int, field: str) -> Any:
    return page.locator(f'#convergence tr[data-version="{version}"] [data-field="{field}"]')


def mark_page(page: Page, name: str) -> None:
    """Leave a marker on the loaded document: a reload would wipe it."""
    page.wait_for_load_state("load")  # count this document's own load event before the marker
    page.evaluate("name => { window.__e2eMarker = name; }", name)


def assert_not_reloaded(page: Page, name: str, loads: list[str], loads_before: int) -> None:
    assert page.evaluate("() => window.__e2eMarker") == name
    assert len(loads) == loads_before


def test_rollout__start_advance_rollback__convergence_updates_live_without_reload(
    asgi_server: str,
    rollout_fleet: tuple[Fleet, dict[str, str]],
    swarm: DeviceSwarm,
    browser_page: Page,
) -> None:
    # Given 40 connected devices on v1, v2 published, and a publisher logged in
    fleet, tokens = rollout_fleet
    page = browser_page
    loads: list[str] = []
    page.on("load", lambda: loads.append(page.url))
    page.goto(f"{asgi_server}/login/")
    page.get_by_label("Username").fill("rhea")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.locator(".who-name")).to_have_text("rhea")

    # When they open the fleet's rollout page from the fleet page
    page.goto(f"{asgi_server}/fleets/{SLUG}/")
    page.get_by_role("link", name="Rollout", exact=True).click()

    # Then it shows v1 stable, every device on it, and the live indicator ticking
    expect(page.locator("h1")).to_contain_text("Rollout")
    expect(page.locator("[data-field=stable]").first).to_have_text("v1")
    expect(cell(page, 1, "assigned")).to_have_text(str(DEVICES))
    expect(cell(page, 1, "acked")).to_have_text(str(DEVICES))
    expect(cell(page, 1, "acked_online")).to_have_text(str(DEVICES))
    expect(page.locator("[data-live-text]")).to_contain_text("live · updated")

    # When they start rolling out v2
    page.get_by_label("Version to roll out").select_option("2")
    page.get_by_role("button", name="Start rollout at 5%").click()
    expect(page.locator(".flash")).to_contain_text("Started rolling out v2 over v1 at 5%")
    mark_page(page, "started")
    loads_after_start = len(loads)
    rollout = Rollout.objects.get(fleet=fleet, state=Rollout.State.ACTIVE)
    cohort_5 = sum(1 for device_id in tokens if bucket(rollout.salt, device_id) < 500)
    cohort_25 = sum(1 for device_id in tokens if bucket(rollout.salt, device_id) < 2500)

    # Then, without a reload, v2's acks reach the 5% cohort it was assigned
    expect(page.locator(".stage[data-stage='5']")).to_have_attribute("data-step", "current")
    expect(page.locator("[data-field=state]")).to_have_text("active")
    expect(cell(page, 2, "assigned")).to_have_text(str(cohort_5))
    expect(cell(page, 2, "acked")).to_have_text(str(cohort_5), timeout=LIVE_TIMEOUT_MS)
    expect(cell(page, 1, "acked")).to_have_text(str(DEVICES - cohort_5), timeout=LIVE_TIMEOUT_MS)
    assert_not_reloaded(page, "started", loads, loads_after_start)

    # When they advance to 25%
    swarm.hold_acks()
    page.get_by_role("button", name="Advance to 25%").click()
    expect(page.locator(".flash")).to_contain_text("Advanced v2 to 25%")
    mark_page(page, "advanced")
    loads_after_advance = len(loads)
    acked_when_loaded = int(cell(page, 2, "acked").inner_text())
    swarm.release_acks()

    # Then the numbers grow in place as the new cohort acks, and propagation is measured
    expect(page.locator(".stage[data-stage='25']")).to_have_attribute("data-step", "current")
    expect(page.locator(".stage[data-stage='5']")).to_have_attribute("data-step", "done")
    expect(page.locator("[data-field=since-phrase]")).to_have_text("at 25% since")
    expect(cell(page, 2, "assigned")).to_have_text(str(cohort_25))
    expect(cell(page, 2, "acked")).to_have_text(str(cohort_25), timeout=LIVE_TIMEOUT_MS)
    expect(cell(page, 1, "acked")).to_have_text(str(DEVICES - cohort_25), timeout=LIVE_TIMEOUT_MS)
    expect(page.locator("[data-field=propagation-count]")).to_have_text(
        str(cohort_25 - cohort_5), timeout=LIVE_TIMEOUT_MS
    )
    expect(page.locator("[data-field=p95]")).to_contain_text("ms")
    expect(page.locator("[data-field=p99]")).to_contain_text("ms")
    expect(page.locator("[data-field=propagation-last]")).to_contain_text("ms")
    assert acked_when_loaded < cohort_25, "the page loaded already converged: nothing seen live"
    assert_not_reloaded(page, "advanced", loads, loads_after_advance)
    page.screenshot(path=str(screenshot_path("rollout-at-25")), full_page=True)

    # When they roll back with one click, giving a reason
    page.get_by_label("Reason").fill("image latency regression")
    swarm.hold_acks()
    page.get_by_role("button", name="Roll back to v1").click()
    expect(page.locator(".flash")).to_contain_text("Rolled v2 back: every device returns to v1.")
    mark_page(page, "rolled-back")
    loads_after_rollback = len(loads)
    v1_acked_when_loaded = int(cell(page, 1, "acked").inner_text())
    swarm.release_acks()

    # Then v2's assignment is gone at once, and v1's acks climb back to all 40 live
    expect(page.locator("[data-field=state]")).to_have_text("rolled back")
    expect(cell(page, 2, "assigned")).to_have_text("0")
    expect(cell(page, 1, "assigned")).to_have_text(str(DEVICES))
    expect(cell(page, 1, "acked")).to_have_text(str(DEVICES), timeout=LIVE_TIMEOUT_MS)
    expect(cell(page, 2, "acked")).to_have_text("0", timeout=LIVE_TIMEOUT_MS)
    expect(page.locator(".history")).to_contain_text("image latency regression")
    assert v1_acked_when_loaded < DEVICES, "the page loaded already converged: nothing seen live"
    assert_not_reloaded(page, "rolled-back", loads, loads_after_rollback)
    assert page.evaluate("() => window.rolloutLive.updates") >= 2
    page.wait_for_timeout(600)  # let the bars finish their width transition for the picture
    page.screenshot(path=str(screenshot_path("rollout-rolled-back")), full_page=True)

    # And each device received exactly the versions its bucket called for, with no errors
    for device_id, versions in swarm.received.items():
        in_5 = bucket(rollout.salt, device_id) < 500
        in_25 = bucket(rollout.salt, device_id) < 2500
        expected = [1, 2, 1] if in_25 else [1]
        assert versions == expected, (device_id, in_5, versions)
    assert swarm.errors == []


def test_rollout__holdback__held_devices_stay_on_stable_at_100_until_completion(
    asgi_server: str,
    rollout_fleet: tuple[Fleet, dict[str, str]],
    swarm: DeviceSwarm,
    browser_page: Page,
) -> None:
    # Given 40 connected devices on v1, v2 published, and a publisher on the rollout page
    fleet, tokens = rollout_fleet
    page = browser_page
    page.goto(f"{asgi_server}/login/")
    page.get_by_label("Username").fill("rhea")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.goto(f"{asgi_server}/fleets/{SLUG}/rollout/")

    # When they start v2 holding 30% back, and advance it to 25% and 100%
    page.get_by_label("Version to roll out").select_option("2")
    page.get_by_label("hold back").fill("30")
    for width, height in ((390, 844), (1366, 900)):
        page.set_viewport_size({"width": width, "height": height})
        page.screenshot(path=str(screenshot_path(f"rollout-start-form-{width}")), full_page=True)
    page.get_by_role("button", name="Start rollout at 5%").click()
    expect(page.locator(".flash")).to_contain_text("Started rolling out v2 over v1 at 5%")
    page.get_by_role("button", name="Advance to 25%").click()
    expect(page.locator(".flash")).to_contain_text("Advanced v2 to 25%")
    page.get_by_role("button", name="Advance to 100%").click()
    expect(page.locator(".flash")).to_contain_text(
        "Advanced v2 to 100% (70% of the fleet: 30% held back on v1 until completion)"
    )
    expect(page.locator(".stage[data-stage='100'] .stage-sub")).to_have_text("70% · 30% held back")
    rollout = Rollout.objects.get(fleet=fleet, state=Rollout.State.ACTIVE)
    held = sum(1 for device_id in tokens if bucket(rollout.salt, device_id) >= 7000)

    # Then at 100% the held-back devices (buckets from 7000 up) still run v1, and the page
    # says why
    assert 0 < held < DEVICES
    expect(page.locator("[data-field=holdback-line]")).to_be_visible()
    expect(page.locator("[data-field=holdback-line]")).to_contain_text(
        "30% of the fleet stays on v1 at 100% until the rollout completes"
    )
    expect(cell(page, 1, "assigned")).to_have_text(str(held))
    expect(cell(page, 1, "acked")).to_have_text(str(held), timeout=LIVE_TIMEOUT_MS)
    expect(cell(page, 2, "acked")).to_have_text(str(DEVICES - held), timeout=LIVE_TIMEOUT_MS)
    for width, height in ((1366, 900), (390, 844)):
        page.set_viewport_size({"width": width, "height": height})
        page.wait_for_timeout(600)  # the bars' width transition
        page.screenshot(path=str(screenshot_path(f"rollout-holdback-{width}")), full_page=True)
    page.set_viewport_size({"width": 1366, "height": 900})

    # When they complete it
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Complete: make v2 stable").click()

    # Then the held-back devices move to v2 too
    expect(page.locator(".flash")).to_contain_text("Completed: v2 is now the stable version")
    expect(cell(page, 2, "acked")).to_have_text(str(DEVICES), timeout=LIVE_TIMEOUT_MS)
    expect(page.locator("[data-field=holdback-line]")).to_be_hidden()
    # (each device got v2 once: the cohorts at their stage, the held-back ones at completion)
    for device_id, versions in swarm.received.items():
        assert versions == [1, 2], (device_id, bucket(rollout.salt, device_id), versions)
    assert swarm.errors == []
