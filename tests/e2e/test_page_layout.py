"""Pages as a person sees them in a real Chromium: no page scrolls sideways on a 390 px phone,
the `hidden` attribute hides, and the dashboard's charts read at a glance (labels that do not
overlap, log-axis ticks that read as milliseconds, legends that name one rollout's versions,
captions that name the buckets drawn, a time axis that starts where a young fleet's data does).

Screenshots: `test-artifacts/layout-<page>-390.png` and `test-artifacts/dashboard-reading-*.png`.
"""

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import Page, expect

from routing_policies.demo import DEMO_FLEET, DEMO_FLEET_KEY, demo_seed
from routing_policies.models import Device, Fleet
from routing_policies.services import (
    device_enroll,
    policy_draft_create,
    policy_draft_update_cells,
    policy_version_publish,
    rollout_rollback,
    rollout_start,
)
from telemetry.ingest.services import landed_batches_process, telemetry_batch_ingest
from tests.factories import iso, make_event

from .conftest import screenshot_path
from .pages import (
    LAPTOP,
    PHONE,
    ConsoleErrors,
    assert_dashboard_reads,
    assert_in_view_horizontally,
    assert_no_sideways_scroll,
    assert_on_screen,
    log_in,
    overlapping,
    text_boxes,
    wider_than_the_window,
)

pytestmark = pytest.mark.e2e

SLUG = DEMO_FLEET
DEMO_PASSWORD = "demo-publisher"


def _report(device: Device, events: list[dict[str, Any]]) -> None:
    telemetry_batch_ingest(device=device, body=json.dumps({"events": events}).encode())
    landed_batches_process()


@pytest.fixture
def demo(transactional_db: None) -> dict[str, Any]:
    """The demo (seed_demo), five minutes old: phones that reported on v1, v2 published and
    rolling out at 5% with candidate events, and a draft with one edited cell."""
    demo_seed()
    fleet = Fleet.objects.get(slug=SLUG)
    Fleet.objects.filter(pk=fleet.pk).update(created_at=datetime.now(UTC) - timedelta(minutes=5))
    publisher = get_user_model().objects.get(username="publisher")
    phones = [
        device_enroll(fleet_key=DEMO_FLEET_KEY, device_id=f"phone-{n}", platform="android")[0]
        for n in range(3)
    ]
    now = datetime.now(UTC)
    for minutes in (4, 3, 2, 1):
        for phone in phones:
            _report(
                phone,
                [
                    make_event(
                        phone.device_id,
                        ts=iso(now - timedelta(minutes=minutes)),
                        route=route,
                        latency_ms=latency,
                    )
                    for route, latency in (("device", 40.0), ("cloud", 420.0), ("device", 55.0))
                ],
            )
    draft = policy_draft_create(actor=publisher, fleet=fleet)
    policy_draft_update_cells(
        actor=publisher,
        fleet=fleet,
        revision=draft.revision,
        edits=[
            {
                "task_type": "text",
                "latency_budget": "interactive",
                "privacy_tier": "normal",
                "values": {"threshold": 0.5},
            }
        ],
    )
    policy_version_publish(
        actor=publisher, fleet=fleet, revision=draft.revision + 1, note="θ 0.5 for text"
    )
    rollout_start(actor=publisher, fleet=fleet, version=2)
    started = iso(datetime.now(UTC))
    _report(
        phones[0],
        [make_event("phone-0", ts=started, policy_version=2, route="cloud") for _ in range(4)],
    )
    # A draft open again, so the fleet page shows the editor's grid.
    draft = policy_draft_create(actor=publisher, fleet=fleet)
    policy_draft_update_cells(
        actor=publisher,
        fleet=fleet,
        revision=draft.revision,
        edits=[
            {
                "task_type": "voice",
                "latency_budget": "interactive",
                "privacy_tier": "normal",
                "values": {"threshold": 0.65},
            }
        ],
    )
    return {"fleet": fleet, "publisher": publisher}


PAGES = (
    ("fleet-list", "/"),
    ("editor", f"/fleets/{SLUG}/"),
    ("version-1", f"/fleets/{SLUG}/?version=1"),
    ("versions", f"/fleets/{SLUG}/versions/"),
    ("diff", f"/fleets/{SLUG}/diff/?a=1&b=2"),
    ("audit", f"/fleets/{SLUG}/audit/"),
    ("import", f"/fleets/{SLUG}/draft/import/"),
    ("devices", f"/fleets/{SLUG}/devices/"),
    ("rollout", f"/fleets/{SLUG}/rollout/"),
    ("dashboard", f"/fleets/{SLUG}/dashboard/"),
    ("alerts", f"/fleets/{SLUG}/alerts/"),
    ("lab", f"/fleets/{SLUG}/lab/"),
)


def _patient(page: Page) -> None:
    """Waits long enough for a loaded 2-core machine (the dashboard computes on each load)."""
    page.set_default_timeout(30_000)
    page.set_default_navigation_timeout(60_000)


def _settle(page: Page) -> None:
    """Wait for what the page draws after load (the dashboard's charts)."""
    page.wait_for_load_state("load")
    if page.locator("#dashboard-config").count():
        page.wait_for_function("() => window.dashboardLive && window.dashboardLive.renders > 0")
        expect(page.locator("#chart-shares .main-svg").first).to_be_attached()


def test_every_page__390px_phone__no_sideways_scroll(
    asgi_server: str, demo: dict[str, Any], browser_page: Page
) -> None:
    page = browser_page
    _patient(page)
    errors = ConsoleErrors(page)
    page.set_viewport_size(PHONE)

    # Given a phone 390 px wide / When a logged-out person opens the login page
    page.goto(f"{asgi_server}/login/")
    # Then it fits
    assert_no_sideways_scroll(page, "login")
    page.screenshot(path=str(screenshot_path("layout-login-390")), full_page=True, timeout=60_000)

    # When the publisher opens every page of the demo fleet
    log_in(page, asgi_server, "publisher", DEMO_PASSWORD)
    for name, path in PAGES:
        page.goto(f"{asgi_server}{path}")
        _settle(page)
        # Then none scrolls sideways, and the top bar's "Log out" is whole on screen
        assert_no_sideways_scroll(page, name)
        assert_in_view_horizontally(page, ".topbar button", name)
        page.screenshot(
            path=str(screenshot_path(f"layout-{name}-390")), full_page=True, timeout=60_000
        )

    assert errors.take() == []


# The columns a person reads a row by, per page: each must be on screen on a phone.
KEY_COLUMNS = (
    ("fleet-list", "/", ("Fleet", "Latest published", "Draft")),
    ("devices", f"/fleets/{SLUG}/devices/", ("Device", "Online", "Assigned", "Acked", "Token")),
    ("versions", f"/fleets/{SLUG}/versions/", ("Version", "Status", "When", "Note")),
    ("rollout", f"/fleets/{SLUG}/rollout/", ("When (UTC)", "Action", "Stage", "Acked")),
    ("alerts", f"/fleets/{SLUG}/alerts/", ("Watches", "State", "Now")),
    ("audit", f"/fleets/{SLUG}/audit/", ("Time (UTC)", "Action", "Summary")),
)


def _cells_on_screen(page: Page, what: str) -> None:
    """Every cell of the matrix is on screen, headed by its privacy tier."""
    shown = assert_on_screen(page, "td[data-cell]", what)
    assert shown == 12, f"{what}: {shown} of the demo's 12 cells shown"
    heads = page.evaluate(
        "() => [...document.querySelectorAll('td[data-cell]')]"
        ".map(td => getComputedStyle(td, '::before').content)"
    )
    assert all(re.fullmatch(r'"privacy \w+"', head) for head in heads), heads
    assert wider_than_the_window(page) == [], what


def test_matrix_and_tables__390px_phone__every_cell_and_key_column_on_screen(
    asgi_server: str, demo: dict[str, Any], browser_page: Page
) -> None:
    page = browser_page
    _patient(page)
    errors = ConsoleErrors(page)
    page.set_viewport_size(PHONE)
    log_in(page, asgi_server, "publisher", DEMO_PASSWORD)

    # Given a phone 390 px wide / When the publisher opens a published version's matrix
    page.goto(f"{asgi_server}/fleets/{SLUG}/?version=1")
    # Then every cell of it is on screen, each named by its privacy tier: no box to scroll
    _cells_on_screen(page, "version-1")
    page.screenshot(path=str(screenshot_path("matrix-390-read")), full_page=True, timeout=60_000)

    # When they open the draft and pick a cell to edit
    page.goto(f"{asgi_server}/fleets/{SLUG}/")
    _cells_on_screen(page, "draft")
    cell = page.locator('td[data-cell="voice/background/sensitive"]')
    cell.locator(".cell-hit").click()
    expect(page.locator("[data-selection-summary]")).to_contain_text("voice/background/sensitive")
    # Then the cell being edited is on screen, and so are the column boxes above the matrix
    assert_on_screen(page, "td.cell.selected", "the selected cell")
    assert_on_screen(page, "th.tier-head", "the privacy column boxes")
    page.screenshot(path=str(screenshot_path("matrix-390-edit")), full_page=True, timeout=60_000)

    for name, path, columns in KEY_COLUMNS:
        # When they open each page with a table
        page.goto(f"{asgi_server}{path}")
        page.wait_for_load_state("load")
        # Then every key column of every row is on screen, with its column's name beside it
        for column in columns:
            selector = f'table.stack td[data-label="{column}"]'
            assert_on_screen(page, selector, f"{name} {column}")
            label = page.locator(selector).first.evaluate(
                "td => getComputedStyle(td, '::before').content"
            )
            assert label == f'"{column}"', (name, column, label)
        # and every other cell of those tables too, and nothing is wider than the phone
        assert_on_screen(page, "table.stack > tbody > tr > :is(td, th)", name)
        assert wider_than_the_window(page) == [], name
        assert_no_sideways_scroll(page, name)
        page.screenshot(path=str(screenshot_path(f"tables-390-{name}")), full_page=True)
    assert errors.take() == []


def _misaligned_columns(page: Page) -> list[str]:
    """Tables whose header cells do not stand over their columns' cells (or do not span the
    table): each head cell's left edge against the first body row's cell of the same column."""
    return list(
        page.evaluate(
            """() => [...document.querySelectorAll('table.table')].flatMap((table, t) => {
              const head = table.tHead && table.tHead.rows[0];
              const row = [...table.tBodies].flatMap(b => [...b.rows])
                .find(r => r.cells.length === (head ? head.cells.length : -1));
              if (!head || !row || table.offsetParent === null) { return []; }
              const width = table.getBoundingClientRect().width;
              const problems = [];
              if (head.getBoundingClientRect().width < width - 2) {
                problems.push(`table ${t}: header row narrower than the table`);
              }
              [...head.cells].forEach((th, i) => {
                const gap = Math.abs(th.getBoundingClientRect().left
                                     - row.cells[i].getBoundingClientRect().left);
                if (gap > 2) { problems.push(`table ${t} column ${i}: ${gap}px apart`); }
              });
              return problems;
            })"""
        )
    )


def test_tables__1366px_laptop__header_cells_stand_over_their_columns(
    asgi_server: str, demo: dict[str, Any], browser_page: Page
) -> None:
    page = browser_page
    _patient(page)
    page.set_viewport_size(LAPTOP)
    log_in(page, asgi_server, "publisher", DEMO_PASSWORD)

    for name, path, _columns in KEY_COLUMNS:
        # Given a laptop / When the publisher opens each page with a table
        page.goto(f"{asgi_server}{path}")
        page.wait_for_load_state("load")
        # Then each table reads as a table: its head spans it, each head over its column
        assert _misaligned_columns(page) == [], name
        page.screenshot(path=str(screenshot_path(f"tables-1366-{name}")), full_page=True)


def test_dashboard_header__no_rollout_open__no_empty_rolling_out_chip(
    asgi_server: str, demo: dict[str, Any], browser_page: Page
) -> None:
    page = browser_page
    _patient(page)
    log_in(page, asgi_server, "publisher", DEMO_PASSWORD)

    # Given v2 rolling out / When the dashboard is opened / Then the header names it
    page.goto(f"{asgi_server}/fleets/{SLUG}/dashboard/")
    rolling = page.locator('[data-field="rollout"]')
    expect(rolling).to_be_visible()
    expect(rolling).to_have_text(re.compile(r"Rolling out\s+v2\s+at\s+5%"))

    # When the rollout is rolled back and the page is opened again
    rollout_rollback(actor=demo["publisher"], fleet=demo["fleet"], reason="layout test")
    page.goto(f"{asgi_server}/fleets/{SLUG}/dashboard/")
    page.wait_for_function("() => window.dashboardLive && window.dashboardLive.renders > 0")

    # Then the header says only what runs: no "Rolling out [empty chip] at"
    expect(rolling).to_be_hidden()
    assert "Rolling out" not in page.locator(".version-meta").inner_text()
    # and no element the page hides with the attribute takes room on screen
    shown = page.evaluate(
        "() => [...document.querySelectorAll('[hidden]')]"
        ".filter(el => getComputedStyle(el).display !== 'none')"
        ".map(el => el.outerHTML.slice(0, 80))"
    )
    assert shown == []


def _tick_values(texts: list[str]) -> list[float]:
    values = []
    for text in texts:
        match = re.fullmatch(r"([\d,.]+) (ms|s)", text.strip())
        assert match, f"log-axis tick {text!r} does not read as a duration"
        number = float(match.group(1).replace(",", ""))
        values.append(number * (1000 if match.group(2) == "s" else 1))
    return values


@pytest.mark.parametrize("viewport", [LAPTOP, PHONE], ids=["1366", "390"])
def test_dashboard_charts__young_fleet_during_rollout__read_at_a_glance(
    asgi_server: str, demo: dict[str, Any], browser_page: Page, viewport: dict[str, int]
) -> None:
    page = browser_page
    _patient(page)
    errors = ConsoleErrors(page)
    page.set_viewport_size(viewport)
    log_in(page, asgi_server, "publisher", DEMO_PASSWORD)

    # Given the five-minute-old demo rolling out v2 / When its dashboard is opened (1 hour)
    page.goto(f"{asgi_server}/fleets/{SLUG}/dashboard/")
    _settle(page)
    width = viewport["width"]

    # Then the time axis starts near the fleet's first minutes, not an hour back
    start, end = page.evaluate(
        "() => document.getElementById('chart-shares').layout.xaxis.range"
        ".map(t => new Date(t).getTime())"
    )
    assert (end - start) / 60_000 <= 7, "a five-minute-old fleet drawn over an hour"

    # and the version and stage labels on it do not run into each other, nor past its edges;
    # nor do the budget labels, the policy grids' labels and figures; and the minute in
    # progress is left out of every line (its events so far would read as a drop, its rates
    # as a spike) and shaded
    markers = text_boxes(page, "#chart-shares .annotation-text-g text")
    assert any("v2 published" in m["text"] for m in markers), markers
    assert any("5%" in m["text"] for m in markers), markers
    assert_dashboard_reads(page, f"dashboard at {width} px")
    expect(page.locator('[data-field="caption-partial"]')).to_contain_text("minute in progress")
    # and minutes without events are gaps (null), not zeros the line would run down to
    served = page.evaluate("() => window.dashboardLive.payload.series.events")
    assert served[0] is None, "an hour-old minute without events is served as null, not 0"
    connect = page.evaluate(
        "() => document.getElementById('chart-shares').data.find(t => t.name === 'events')"
        ".connectgaps"
    )
    assert connect is False

    # and the latency axis reads as durations, each tick once and in order
    ticks = [t["text"] for t in text_boxes(page, "#chart-latency .ytick text")]
    values = _tick_values(ticks)
    assert values == sorted(set(values)), ticks
    # and the budget labels stand apart
    budgets = text_boxes(page, "#chart-latency .annotation-text-g text")
    assert budgets
    assert all("budget" in b["text"] for b in budgets)
    assert overlapping(budgets) == []

    # and the cohort legend names the open rollout's two versions, nothing else
    legend = [t["text"] for t in text_boxes(page, "#chart-cohort-alpha .legendtext")]
    assert legend == ["stable v1", "candidate v2"]

    # and the cost per day says the span of data it is taken over, and sets the candidate's
    # cost per task against stable's only past the minimum of tasks, with its interval, else
    # says why not (issue 22: a few tasks swing a per-task cost by tens of percent)
    cost_sub = page.locator('[data-figure="cost"] [data-sub]')
    expect(cost_sub).to_contain_text(
        re.compile(r"from (\d+ [hms] )+\d+ [hms] of data|from \d+ s of data")
    )
    expect(cost_sub).to_contain_text(
        re.compile(
            r"% per task vs stable v1 \(95%: [−+]\d+% to [−+]\d+%, on [\d,]+ v2 tasks\)"
            r"|vs stable: .+ has [\d,]+ tasks? in this view, 200 per cohort needed"
        )
    )

    # and the captions say minutes for minute buckets
    caption = page.locator('[data-field="caption-shares"]')
    expect(caption).to_contain_text("per minute")
    page.screenshot(
        path=str(screenshot_path(f"dashboard-reading-1h-{width}")), full_page=True, timeout=60_000
    )

    # When the window becomes 24 hours (in place, no reload)
    page.locator(".dash-window", has_text="24h").click()
    page.wait_for_function("() => window.dashboardLive.payload.window.resolution === 'hour'")

    # Then every caption and axis says hours
    expect(caption).to_contain_text("per hour")
    expect(page.locator('[data-field="window-note"]')).to_contain_text("hour buckets")
    axis = page.evaluate("() => document.getElementById('chart-shares').layout.yaxis2.title.text")
    assert axis == "events per hour"
    assert "per minute" not in page.locator(".dash-grid").inner_text()
    assert errors.take() == []
