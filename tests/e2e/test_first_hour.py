"""A newcomer's first hour, in a real Chromium at 1366 px and at 390 px (issue 12).

The untouched demo (`seed_demo`: its users, fleet, alert rules) with a steady simulated fleet
(SDK devices on sockets, telemetry through the real ingest path and a real Celery worker with
beat, which judges the alert rules). Then the main job, each step as the role that does it:
the viewer reads the matrix; the editor starts a draft and edits a cell; the publisher
publishes it with a note, sees what the devices run, rolls it out 5% → 25%, rolls it back,
and reads the dashboard and the alerts page.

Every step asserts that the page does not scroll sideways, that no element is wider than the
window, and that the console stayed free of errors, and keeps a screenshot:
`var/artifacts/first_hour/<width>/<nn>-<step>.png` (the path is printed). The steady demo
must fire no alert. On the phone (issue 22) every cell of the matrix, the cell being edited,
and the key columns of the rollout history and the alert rules are on screen with no box to
scroll sideways; at both widths the dashboard's labels stand apart and the minute in progress
is not drawn.
"""

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from edge_sdk.simulate.fleet import FleetConfig, SimulatedFleet
from routing_policies.demo import DEMO_FLEET, DEMO_FLEET_KEY, demo_seed
from tests.integration.test_dashboard_feed import own_redis_db, worker
from tests.integration.test_telemetry_durability import Worker
from tests.integration.ws_clients import BackgroundLoop, wait_until

from .pages import (
    LAPTOP,
    PHONE,
    ConsoleErrors,
    assert_dashboard_reads,
    assert_no_sideways_scroll,
    assert_on_screen,
    log_in,
    log_out,
    wider_than_the_window,
)

__all__ = ["own_redis_db", "worker"]  # fixtures

pytestmark = pytest.mark.e2e

ARTIFACTS = Path(__file__).resolve().parents[2] / "var" / "artifacts" / "first_hour"
SLUG = DEMO_FLEET
CELL = "text/interactive/normal"
DEVICES = 20
LIVE_TIMEOUT_MS = 30_000


class Walk:
    """The page walked, its console, and a numbered screenshot per step."""

    def __init__(self, page: Page, base_url: str, width: int) -> None:
        self.page = page
        self.base_url = base_url
        self.console = ConsoleErrors(page)
        self.folder = ARTIFACTS / str(width)
        self.folder.mkdir(parents=True, exist_ok=True)
        for old in self.folder.glob("*.png"):
            old.unlink()
        self.steps = 0
        print(f"\nfirst-hour screenshots ({width} px): {self.folder}")

    def go(self, path: str) -> None:
        self.page.goto(f"{self.base_url}{path}")

    def step(self, name: str) -> None:
        """The page as it is now: it fits the window, the console is clean; a screenshot."""
        self.page.wait_for_load_state("load")
        self.steps += 1
        assert_no_sideways_scroll(self.page, name)
        assert wider_than_the_window(self.page) == [], f"wider than the window at step {name}"
        assert self.console.take() == [], f"console errors at step {name}"
        self.page.screenshot(
            path=str(self.folder / f"{self.steps:02d}-{name}.png"), full_page=True, timeout=60_000
        )


@pytest.fixture
def steady_demo(
    transactional_db: None,
    asgi_server: str,
    requires_postgres: None,
    worker: Worker,
    background: BackgroundLoop,
) -> Iterator[SimulatedFleet]:
    """The demo as `make run` seeds it, with a steady simulated fleet reporting on v1."""
    demo_seed()
    sim = SimulatedFleet(
        FleetConfig(
            base_url=asgi_server,
            fleet_key=DEMO_FLEET_KEY,
            devices=DEVICES,
            rate=4.0,
            scenario="steady",
            connect_per_s=25,
            telemetry_flush_s=1.0,
            progress_s=3600,
            offline_spells=False,
        )
    )
    background.run(sim.start())
    try:
        wait_until(
            lambda: (
                len(sim.devices) == DEVICES
                and all(d.device.policy.version == 1 for d in sim.devices.values())
            ),
            timeout=90,
            what="every simulated device to run v1",
        )
        yield sim
    finally:
        background.run(sim.stop(), timeout=60)


def _runs(page: Page, versions: str) -> None:
    """The fleet page says which version the devices run (e.g. "v1 (stable)")."""
    expect(page.locator("main")).to_contain_text(
        re.compile(rf"devices run\s+{versions}", re.IGNORECASE)
    )


@pytest.mark.parametrize("viewport", [LAPTOP, PHONE], ids=["1366", "390"])
def test_first_hour__main_job_as_each_role__true_and_readable(
    asgi_server: str,
    steady_demo: SimulatedFleet,
    background: BackgroundLoop,
    browser_page: Page,
    viewport: dict[str, int],
) -> None:
    page = browser_page
    page.set_default_timeout(30_000)  # a loaded 2-core machine
    page.set_default_navigation_timeout(60_000)
    page.set_viewport_size(viewport)
    walk = Walk(page, asgi_server, viewport["width"])

    # --- the viewer reads ---------------------------------------------------------------------
    # Given the demo's viewer / When they log in and open the fleet
    walk.go("/login/")
    walk.step("login")
    log_in(page, asgi_server, "viewer", "demo-viewer")
    expect(page.locator(".role-chip")).to_have_text("viewer")
    walk.step("viewer-fleets")
    page.get_by_role("link", name=SLUG).first.click()
    # Then they read the matrix and what the devices run, and cannot change it
    expect(page.locator(f'td[data-cell="{CELL}"]')).to_be_visible()
    _runs(page, r"v1\s+\(stable\)")
    expect(page.get_by_role("button", name="Start a draft")).to_have_count(0)
    # and on a phone too: every cell on screen (one privacy tier per block), none off to a side
    assert assert_on_screen(page, "td[data-cell]", "viewer matrix") == 12
    walk.step("viewer-matrix")
    log_out(page)

    # --- the editor edits a cell ----------------------------------------------------------------
    # Given the editor on the fleet page / When they start a draft and raise θ of one cell
    log_in(page, asgi_server, "editor", "demo-editor")
    expect(page.locator(".role-chip")).to_have_text("editor")
    walk.go(f"/fleets/{SLUG}/")
    page.get_by_role("button", name="Start a draft").click()
    expect(page.locator(".chip-draft")).to_contain_text("Draft")
    walk.step("editor-draft")
    cell = page.locator(f'td[data-cell="{CELL}"]')
    cell.locator(".cell-hit").click()
    expect(page.locator("[data-selection-summary]")).to_contain_text(f"Editing {CELL}")
    page.locator("#field-threshold").fill("0.55")
    # and the cell being edited is on screen, not in a box scrolled sideways
    assert_on_screen(page, "td.cell.selected", "the edited cell")
    walk.step("editor-editing")
    page.get_by_role("button", name="Save changes").click()
    # Then the cell shows the new value, and it is marked as changed from v1
    expect(page.locator(".flash")).to_contain_text(f"Saved Threshold θ on {CELL}")
    expect(cell.locator(".theta")).to_have_text("0.55")
    expect(cell).to_have_class(re.compile(r"\bchanged\b"))
    expect(cell.locator(".mark-changed")).to_have_text("changed")
    # and publishing is left to a publisher
    expect(page.locator(".draft-toolbar")).to_contain_text("Publishing needs the publisher role")
    walk.step("editor-saved")
    log_out(page)

    # --- the publisher publishes, rolls out, rolls back -------------------------------------------
    # Given the publisher on the draft
    log_in(page, asgi_server, "publisher", "demo-publisher")
    expect(page.locator(".role-chip")).to_have_text("publisher")
    walk.go(f"/fleets/{SLUG}/")
    # with the count of what changed beside Publish
    expect(page.locator("[data-draft-changes]")).to_contain_text("1")
    walk.step("publisher-draft")
    # When they publish it with a note
    page.get_by_label("Publish this draft").fill("Raise θ for interactive text (first hour)")
    page.get_by_role("button", name="Publish as v2").click()
    # Then v2 is published, and the page says the devices still run v1
    expect(page.locator(".chip-published")).to_have_text("v2 · published")
    expect(page.locator(".version-note")).to_contain_text("Raise θ for interactive text")
    _runs(page, r"v1\s+\(stable\)")
    walk.step("publisher-published")

    # When they roll v2 out to 5%
    page.get_by_role("link", name="Rollout", exact=True).click()
    expect(page.locator("[data-live-text]")).to_contain_text("live", timeout=LIVE_TIMEOUT_MS)
    walk.step("rollout-none")
    page.get_by_label("Version to roll out").select_option("2")
    page.get_by_role("button", name="Start rollout at 5%").click()
    # Then the stepper stands at 5%
    expect(page.locator(".flash")).to_contain_text("Started rolling out v2 over v1 at 5%")
    expect(page.locator(".stage[data-stage='5']")).to_have_attribute("data-step", "current")
    walk.step("rollout-5")
    # When they advance to 25% / Then it stands at 25%, 5% done
    page.get_by_role("button", name="Advance to 25%").click()
    expect(page.locator(".flash")).to_contain_text("Advanced v2 to 25%")
    expect(page.locator(".stage[data-stage='25']")).to_have_attribute("data-step", "current")
    expect(page.locator(".stage[data-stage='5']")).to_have_attribute("data-step", "done")
    # and the history's when, action and stage are on screen for each transition
    for column in ("When (UTC)", "Action", "Stage"):
        assert assert_on_screen(page, f'.history td[data-label="{column}"]', column) >= 2
    walk.step("rollout-25")
    # and the fleet page says what runs: v1 as stable, v2 on a quarter
    walk.go(f"/fleets/{SLUG}/?version=2")
    expect(page.locator("main")).to_contain_text("v2")
    walk.step("fleet-during-rollout")
    # When they roll back / Then every device returns to v1
    walk.go(f"/fleets/{SLUG}/rollout/")
    page.get_by_label("Reason").fill("first-hour walk: back to v1")
    page.get_by_role("button", name="Roll back to v1").click()
    expect(page.locator(".flash")).to_contain_text("Rolled v2 back: every device returns to v1.")
    expect(page.locator("[data-field=state]")).to_have_text("rolled back")
    walk.step("rolled-back")
    wait_until(
        lambda: all(d.device.policy.version == 1 for d in steady_demo.devices.values()),
        timeout=60,
        what="every simulated device back on v1",
    )
    walk.go(f"/fleets/{SLUG}/")
    _runs(page, r"v1\s+\(stable\)")
    walk.step("fleet-after-rollback")

    # --- the dashboard and the alerts -------------------------------------------------------------
    # When they read the dashboard
    walk.go(f"/fleets/{SLUG}/dashboard/")
    page.wait_for_function("() => window.dashboardLive && window.dashboardLive.renders > 0")
    expect(page.locator("[data-live-text]")).to_have_text("live", timeout=LIVE_TIMEOUT_MS)
    # Then it shows the fleet's traffic, v1 stable and no rollout open (no empty chip)
    page.wait_for_function(
        "() => window.dashboardLive.payload.summary.events > 0", timeout=LIVE_TIMEOUT_MS
    )
    expect(page.locator('[data-field="stable"]')).to_have_text("v1")
    expect(page.locator('[data-field="rollout"]')).to_be_hidden()
    expect(page.locator('[data-figure="alpha"] [data-value]')).to_have_text(
        re.compile(r"^\d+\.\d%$")
    )
    for chart in ("chart-shares", "chart-latency", "chart-grid-cloud", "chart-convergence"):
        points = page.locator(f"#{chart}").get_attribute("data-points") or "0"
        assert int(points) > 0, f"{chart} drew nothing"
    # and its labels stand apart and inside their charts (rollout stages, budgets, the grids'
    # axes and figures); the minute in progress is out of every line (a few events of it drew
    # the fallback chart at 10x the card's rate) and shaded
    page.wait_for_function("() => document.querySelectorAll('#chart-grid-p95 .hm text').length > 0")
    assert_dashboard_reads(page, f"dashboard at {viewport['width']} px")
    walk.step("dashboard")

    # When they open the alerts page / Then the steady demo fires nothing, and no banner shows
    walk.go(f"/fleets/{SLUG}/alerts/")
    expect(page.locator('[data-field="firing-count"]')).to_have_text("0")
    expect(page.locator("#alert-banner")).to_be_hidden()
    # and each rule's state and current value are on screen (on a phone: a card per rule)
    for column in ("State", "Now"):
        assert assert_on_screen(page, f'.alert-rules td[data-label="{column}"]', column) >= 1
    walk.step("alerts")
    assert steady_demo.stats.tasks > 0
