"""Change governance in a real Chromium: an author opens a change request, another publisher
approves it, the author publishes it and schedules its rollout for a moment later (typed in
the browser's time zone), and a real Celery beat starts it at that time. Screenshots at
1366 px and 390 px of each page."""

from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from playwright.sync_api import Page, expect

from controlplane.roles import Role
from routing_policies.models import ChangeRequest, PolicyVersion, Rollout
from routing_policies.reviews.services import review_settings_update
from routing_policies.services import policy_draft_create, policy_draft_update_cells
from tests.e2e.conftest import CHROMIUM, CHROMIUM_ARGS, PAGE_TIMEOUT_MS, screenshot_path
from tests.e2e.pages import LAPTOP, PHONE, assert_no_sideways_scroll, log_in, log_out
from tests.factories import UserFactory, make_fleet
from tests.integration.test_telemetry_durability import Worker, _wait_until

pytestmark = pytest.mark.e2e

SLUG = "reviewed"
ZONE = "Asia/Tokyo"  # +09:00: far enough from UTC that a wrong conversion shows


def _shots(page: Page, name: str) -> None:
    for size, label in ((LAPTOP, "1366"), (PHONE, "390")):
        page.set_viewport_size(size)
        assert_no_sideways_scroll(page, f"{name} at {label} px")
        page.screenshot(path=str(screenshot_path(f"governance-{name}-{label}")), full_page=True)
    page.set_viewport_size(LAPTOP)


@pytest.fixture
def chromium(monkeypatch: pytest.MonkeyPatch) -> Any:
    from playwright.sync_api import sync_playwright

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        context = browser.new_context(viewport=LAPTOP, timezone_id=ZONE)
        page = context.new_page()
        page.set_default_timeout(PAGE_TIMEOUT_MS)
        expect.set_options(timeout=PAGE_TIMEOUT_MS)
        yield page
        context.close()
        browser.close()


def test_change_request__opened_approved_published_scheduled__rollout_starts_on_time(
    asgi_server: str, transactional_db: None, chromium: Page
) -> None:
    page = chromium
    author = UserFactory(role=Role.PUBLISHER, username="pia")
    UserFactory(role=Role.PUBLISHER, username="rex")
    fleet = make_fleet(slug=SLUG, actor=author)
    review_settings_update(
        actor=author, fleet=fleet, publish_needs_approval=True, rollout_needs_approval=False
    )
    draft = policy_draft_create(actor=author, fleet=fleet)
    policy_draft_update_cells(
        actor=author,
        fleet=fleet,
        revision=draft.revision,
        edits=[
            {
                "task_type": "voice",
                "latency_budget": "interactive",
                "privacy_tier": "normal",
                "values": {"threshold": 0.55},
            }
        ],
    )
    base = asgi_server

    # The author asks for review
    log_in(page, base, "pia")
    page.goto(f"{base}/fleets/{SLUG}/reviews/")
    page.get_by_label("What and why").fill("Lower θ for interactive voice: fewer cloud calls")
    page.get_by_role("button", name="Open change request").click()
    expect(page.locator("#cr-status")).to_have_text("pending")
    expect(page.get_by_text("you cannot approve your own")).to_be_visible()
    _shots(page, "request-pending")
    request_url = page.url
    log_out(page)

    # Another publisher finds it under Reviews and approves it
    log_in(page, base, "rex")
    page.get_by_role("link", name="Reviews").click()
    page.get_by_role("link", name=f"#{ChangeRequest.objects.get().pk}").click()
    page.get_by_label("Note (needed to reject)").fill("Checked the diff: one cell, θ 0.65 → 0.55")
    page.get_by_role("button", name="Approve").click()
    expect(page.locator("#cr-status")).to_have_text("approved")
    log_out(page)

    # The author publishes the approved revision
    log_in(page, base, "pia")
    page.goto(request_url)
    _shots(page, "request-approved")
    page.get_by_role("button", name="Publish revision").click()
    expect(page.locator("#cr-status")).to_have_text("done")
    assert PolicyVersion.objects.filter(fleet=fleet, number=2).exists()

    # …and schedules its rollout a few seconds ahead, typed in the browser's zone
    with Worker({"SCHEDULE_RUN_INTERVAL_S": "0.5", "ALERT_EVALUATE_INTERVAL_S": "60"}):
        page.goto(f"{base}/fleets/{SLUG}/schedules/")
        expect(page.locator("input[name=time_zone]")).to_have_value(ZONE)
        when = datetime.now(ZoneInfo(ZONE)).replace(microsecond=0) + timedelta(seconds=8)
        page.locator("select[name=kind]").select_option("rollout_start")
        page.locator("input[name=run_at]").fill(when.strftime("%Y-%m-%dT%H:%M:%S"))
        # (issue 22: the version is chosen among the published ones, no longer typed)
        page.locator("select[name=version]").select_option("2")
        page.get_by_role("button", name="Schedule").click()
        expect(page.locator("#upcoming")).to_contain_text(f"{when:%Y-%m-%d %H:%M} {ZONE}")
        _shots(page, "schedules-upcoming")
        _wait_until(
            lambda: Rollout.objects.filter(fleet=fleet, candidate__number=2).exists(),
            90,
            "the scheduled rollout did not start",
        )
    started = Rollout.objects.get(fleet=fleet).started_at
    assert started >= when - timedelta(seconds=1)
    page.reload()
    expect(page.locator("#past")).to_contain_text("started rollout")
    _shots(page, "schedules-past")
