"""The live alert banner in a real Chromium, on a real ASGI server with a real Celery worker.

A viewer has a page open. The fleet's devices report through the ingest path; when its cloud
share jumps from 30% to 70%, the seeded "Cloud share jump" rule fires and the banner appears
on the open page without a reload, naming the rule and the jump. The alerts page then shows
the rule firing, and its history. Screenshots are kept in test-artifacts/.
"""

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from controlplane.roles import Role
from routing_policies.services import device_enroll, fleet_enrollment_key_rotate
from telemetry.alerts.services import alert_rules_seed
from tests.factories import PASSWORD, UserFactory, iso, make_events, make_fleet
from tests.integration.test_telemetry_durability import Worker
from tests.live_server import empty_test_redis

from .conftest import screenshot_path

pytestmark = pytest.mark.e2e

SLUG = "e2e-alerts"
LIVE_TIMEOUT_MS = 90_000  # an outer bound: each check passes as soon as the page shows it


@pytest.fixture
def worker() -> Iterator[Worker]:
    """A Celery worker with beat (alerts judged every second); this test's Redis db emptied."""
    empty_test_redis()
    with Worker({"TELEMETRY_RATE_LIMIT_BATCHES": "0", "ALERT_EVALUATE_INTERVAL_S": "1"}) as started:
        yield started


class Phone:
    """A device of the fleet that reports through `POST /api/v1/telemetry`."""

    def __init__(self, base_url: str, token: str) -> None:
        self.base_url = base_url
        self.token = token

    def report(
        self,
        *,
        at: datetime,
        cloud: int,
        on_device: int,
        device_id: str = "phone-1",
        version: int = 1,
    ) -> None:
        ts = iso(at)
        same = {"device_id": device_id, "ts": ts, "policy_version": version}
        events = make_events(cloud, route="cloud", latency_ms=300.0, **same) + make_events(
            on_device, **same
        )
        response = httpx.post(
            f"{self.base_url}/api/v1/telemetry",
            json={"events": events},
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=20,
            trust_env=False,
        )
        assert response.status_code == 202, response.text


@pytest.fixture
def phone(
    asgi_server: str, transactional_db: None, requires_postgres: None, worker: Worker
) -> Phone:
    """A fleet with the seeded rules and a phone that reported 30% cloud 7 minutes ago."""
    publisher: Any = UserFactory(role=Role.PUBLISHER, username="pia")
    UserFactory(role=Role.VIEWER, username="vera")
    fleet = make_fleet(slug=SLUG, actor=publisher)
    alert_rules_seed(actor=publisher, fleet=fleet)
    key = fleet_enrollment_key_rotate(actor=publisher, fleet=fleet)
    _, token = device_enroll(fleet_key=key, device_id="phone-1", platform="android")
    reporting = Phone(asgi_server, token)
    reporting.report(at=datetime.now(UTC) - timedelta(minutes=7), cloud=60, on_device=140)
    return reporting


def _login(page: Page, base_url: str) -> None:
    page.goto(f"{base_url}/login/")
    page.get_by_label("Username").fill("vera")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.locator(".who-name")).to_have_text("vera")


def _open_live(page: Page, base_url: str, path: str) -> list[str]:
    """Log in as the viewer and open `path` with its alert feed live; the pages loaded since
    (a list that grows: a reload would show in it)."""
    loads: list[str] = []
    page.on("load", lambda: loads.append(page.url))
    _login(page, base_url)
    page.goto(f"{base_url}{path}")
    expect(page.locator("#alert-banner")).to_have_attribute(
        "data-live", "true", timeout=LIVE_TIMEOUT_MS
    )
    return loads


def test_alert_banner__cloud_share_jumps__appears_on_the_open_page_without_reload(
    asgi_server: str, phone: Phone, browser_page: Page
) -> None:
    page = browser_page

    # Given a viewer with the fleet's rollout page open, its alert feed live, no banner
    loads = _open_live(page, asgi_server, f"/fleets/{SLUG}/rollout/")
    banner = page.locator("#alert-banner")
    expect(banner).to_be_hidden()
    loads_before = len(loads)

    # When the fleet's cloud share jumps from 30% to 70%
    phone.report(at=datetime.now(UTC), cloud=140, on_device=60)

    # Then the banner appears on the open page, naming the rule and the jump, with no reload
    expect(banner).to_be_visible(timeout=LIVE_TIMEOUT_MS)
    expect(banner.locator("[data-field=count]")).to_have_text("1 firing")
    expect(banner.locator("[data-field=text]")).to_contain_text(
        f"[{SLUG}] Cloud share jump: cloud share 30.0% → 70.0%"
    )
    assert len(loads) == loads_before, f"the page reloaded: {loads[loads_before:]}"
    page.screenshot(path=str(screenshot_path("alert-banner")), full_page=False)

    # When the viewer follows the banner to the alerts page
    banner.get_by_role("link", name="See the alerts").click()

    # Then the rule is shown firing, with its history
    row = page.locator("#alert-rules tr", has_text="Cloud share jump")
    expect(row).to_have_attribute("data-state", "firing")
    expect(row).to_contain_text("rises by ≥ 20.0 pts")
    expect(page.locator("#alert-history tr[data-kind=firing]")).to_contain_text("Cloud share jump")
    expect(page.locator("#alert-rules tr", has_text="Fleet silent")).to_have_attribute(
        "data-state", "ok"
    )

    # and the fleet's dashboard counts it among its big figures
    page.goto(f"{asgi_server}/fleets/{SLUG}/dashboard/")
    figure = page.locator("#figure-alerts")
    expect(figure.locator("[data-value]")).to_have_text("1", timeout=LIVE_TIMEOUT_MS)
    expect(figure.locator("[data-sub]")).to_have_text("Cloud share jump")


def test_alert_banner__guards_roll_the_candidate_back__open_rollout_page_told_without_reload(
    asgi_server: str,
    transactional_db: None,
    requires_postgres: None,
    worker: Worker,
    browser_page: Page,
    publish_version: Any,
) -> None:
    from routing_policies.assignment import bucket
    from telemetry.alerts.services import rollout_start_guarded

    # Given v2 rolled out at 5% with the default guards, one phone on each side
    publisher: Any = UserFactory(role=Role.PUBLISHER, username="pia")
    UserFactory(role=Role.VIEWER, username="vera")
    fleet = make_fleet(slug=SLUG, actor=publisher)
    publish_version(fleet)
    rollout = rollout_start_guarded(
        actor=publisher, fleet=fleet, version=2, guard_options={"guards": "default"}
    )
    key = fleet_enrollment_key_rotate(actor=publisher, fleet=fleet)
    ids = [f"phone-{n}" for n in range(400)]
    on_candidate = next(d for d in ids if bucket(rollout.salt, d) < 500)
    on_stable = next(d for d in ids if bucket(rollout.salt, d) >= 500)
    phones = {
        d: Phone(asgi_server, device_enroll(fleet_key=key, device_id=d)[1])
        for d in (on_candidate, on_stable)
    }
    page = browser_page
    loads = _open_live(page, asgi_server, f"/fleets/{SLUG}/rollout/")
    banner = page.locator("#alert-banner")
    loads_before = len(loads)

    # When the stable phone reports 30% cloud and the candidate phone 70%
    now = datetime.now(UTC)
    phones[on_stable].report(at=now, cloud=60, on_device=140, device_id=on_stable, version=1)
    phones[on_candidate].report(at=now, cloud=140, on_device=60, device_id=on_candidate, version=2)

    # Then the open page says the guards rolled v2 back, and why, without a reload
    expect(banner).to_be_visible(timeout=LIVE_TIMEOUT_MS)
    expect(banner).to_have_attribute("data-kind", "rolled_back")
    expect(banner.locator("[data-field=text]")).to_contain_text(
        f"[{SLUG}] Rolled v2 back at 5% to v1. Guard fired: candidate cloud share 70.0%"
    )
    assert len(loads) == loads_before
    page.screenshot(path=str(screenshot_path("guard-rollback-banner")), full_page=False)

    # and the rollout page, followed from the banner, shows the rollback, its reason and guards
    banner.get_by_role("link", name="See the rollout").click()
    expect(page.locator("[data-field=state]")).to_have_text("rolled back")
    expect(page.locator("[data-field=reason-text]")).to_contain_text("Guard fired")
    expect(page.locator("[data-field=guard-verdict]")).to_have_text("rolled back by a guard")


def test_alerts_page__rule_fires__its_row_and_history_change_without_reload(
    asgi_server: str, phone: Phone, browser_page: Page
) -> None:
    page = browser_page

    # Given a viewer with the fleet's alerts page open, the jump rule not firing
    loads = _open_live(page, asgi_server, f"/fleets/{SLUG}/alerts/")
    row = page.locator("#alert-rules tr", has_text="Cloud share jump")
    expect(row).not_to_have_attribute("data-state", "firing")
    expect(page.locator("#alert-history tr[data-kind=firing]")).to_have_count(0)
    loads_before = len(loads)

    # When the fleet's cloud share jumps from 30% to 70%
    phone.report(at=datetime.now(UTC), cloud=140, on_device=60)

    # Then, on the open page, the rule's row turns firing, the history gains the firing, and
    # the count in the title follows, with no reload
    expect(row).to_have_attribute("data-state", "firing", timeout=LIVE_TIMEOUT_MS)
    expect(page.locator("#alert-history tr[data-kind=firing]")).to_contain_text("Cloud share jump")
    expect(page.locator("[data-field=firing-count]")).to_have_text("1")
    assert len(loads) == loads_before, f"the page reloaded: {loads[loads_before:]}"
    page.screenshot(path=str(screenshot_path("alerts-page-live")), full_page=False)
