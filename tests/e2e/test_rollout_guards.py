"""The rollout page in a real Chromium: a statistical guard's interval drawn over time, its
tolerance, its state, and in words why it rolled the candidate back (1366 px and 390 px)."""

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from controlplane.roles import Role
from routing_policies.assignment import bucket
from routing_policies.models import Device
from routing_policies.services import device_enroll, fleet_enrollment_key_rotate
from telemetry.alerts.services import alerts_evaluate, rollout_start_guarded
from telemetry.ingest.services import landed_batches_process, telemetry_batch_ingest
from tests.factories import PASSWORD, UserFactory, iso, make_events, make_fleet

from .conftest import screenshot_path

pytestmark = pytest.mark.e2e

SLUG = "e2e-guards"
TEXT_BG = {"task_type": "text", "latency_budget": "background", "privacy_tier": "normal"}


def _report(device: Device, *, version: int, cloud: int, on_device: int, **cell: Any) -> None:
    same = {"device_id": device.device_id, "ts": iso(datetime.now(UTC)), "policy_version": version}
    events = make_events(cloud, route="cloud", latency_ms=300.0, **same, **cell)
    events += make_events(on_device, **same, **cell)
    telemetry_batch_ingest(device=device, body=json.dumps({"events": events}).encode())
    landed_batches_process()


def _login(page: Page, base_url: str) -> None:
    page.goto(f"{base_url}/login/")
    page.get_by_label("Username").fill("vera")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.locator(".who-name")).to_have_text("vera")


def test_rollout_page__statistical_guard_acts__interval_over_time_and_reason_shown(
    asgi_server: str,
    transactional_db: None,
    requires_postgres: None,
    browser_page: Page,
    publish_version: Any,
    settings: Any,
) -> None:
    settings.TELEMETRY_RATE_LIMIT_BATCHES = 0
    # Given v2 rolled out at 5% with the statistical guards, a phone on each side
    publisher: Any = UserFactory(role=Role.PUBLISHER, username="pia")
    UserFactory(role=Role.VIEWER, username="vera")
    fleet = make_fleet(slug=SLUG, actor=publisher)
    publish_version(fleet)
    rollout = rollout_start_guarded(
        actor=publisher, fleet=fleet, version=2, guard_options={"guards": "statistical"}
    )
    key = fleet_enrollment_key_rotate(actor=publisher, fleet=fleet)
    ids = [f"phone-{n}" for n in range(400)]
    candidate_id = next(d for d in ids if bucket(rollout.salt, d) < 500)
    stable_id = next(d for d in ids if bucket(rollout.salt, d) >= 500)
    for device_id in (candidate_id, stable_id):
        device_enroll(fleet_key=key, device_id=device_id)
    phones = {d.device_id: d for d in Device.objects.filter(fleet=fleet)}
    began = datetime.now(UTC)

    # When, look after look, the candidate's text/background cell runs 70% cloud against
    # stable's 30% while the rest of the fleet looks alike
    # (5% of the events on the candidate, as the stage expects)
    for look in range(12):
        _report(phones[stable_id], version=1, cloud=300, on_device=700)
        _report(phones[stable_id], version=1, cloud=42, on_device=98, **TEXT_BG)
        _report(phones[candidate_id], version=2, cloud=15, on_device=35)
        _report(phones[candidate_id], version=2, cloud=7, on_device=3, **TEXT_BG)
        alerts_evaluate(fleet_id=fleet.pk, now=began + timedelta(seconds=20 * (look + 1)))

    # Then the rollout page draws the guard's interval over time with its tolerance, shows the
    # guard regressed in that cell, and says why the rollout was rolled back
    page = browser_page
    _login(page, asgi_server)
    for width, height in ((1366, 900), (390, 844)):
        page.set_viewport_size({"width": width, "height": height})
        page.goto(f"{asgi_server}/fleets/{SLUG}/rollout/")
        guard = page.locator("li[data-guard-kind=sequential]", has_text="cloud share")
        expect(guard).to_have_attribute("data-guard-state", "regressed")
        chart = guard.locator("[data-guard-chart]")
        expect(chart.locator(".main-svg").first).to_be_visible()
        expect(chart.locator(".scatterlayer .trace")).to_have_count(3)  # band ×2, estimate
        expect(chart).to_contain_text("tolerated +5.0 pts")
        expect(guard.locator("[data-field=guard-message]")).to_contain_text(
            "in text/background/normal"
        )
        why = page.locator("[data-field=guard-reason]")
        expect(why).to_contain_text("Why: Guard fired: cloud share in text/background/normal")
        expect(why).to_contain_text("wholly beyond the tolerated +5.0 pts")
        expect(chart).to_contain_text("◆ text/background/normal")
        guard.scroll_into_view_if_needed()
        page.screenshot(path=str(screenshot_path(f"rollout-guards-{width}")), full_page=True)
        page.locator("#rollout-guards").screenshot(
            path=str(screenshot_path(f"rollout-guards-{width}-detail"))
        )
        # Nothing wider than the page at this width
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 1, f"{overflow}px wider than a {width}px window"


def test_rollout_page__healthy_candidate_inconclusive__says_when_each_guard_will_know(
    asgi_server: str,
    transactional_db: None,
    requires_postgres: None,
    browser_page: Page,
    publish_version: Any,
    settings: Any,
) -> None:
    settings.TELEMETRY_RATE_LIMIT_BATCHES = 0
    # Given v2 like v1 rolled out at 5% with the statistical guards, judged after 5 minutes
    publisher: Any = UserFactory(role=Role.PUBLISHER, username="pia")
    UserFactory(role=Role.VIEWER, username="vera")
    fleet = make_fleet(slug=SLUG, actor=publisher)
    publish_version(fleet)
    rollout = rollout_start_guarded(
        actor=publisher, fleet=fleet, version=2, guard_options={"guards": "statistical"}
    )
    key = fleet_enrollment_key_rotate(actor=publisher, fleet=fleet)
    ids = [f"phone-{n}" for n in range(400)]
    candidate_id = next(d for d in ids if bucket(rollout.salt, d) < 500)
    stable_id = next(d for d in ids if bucket(rollout.salt, d) >= 500)
    for device_id in (candidate_id, stable_id):
        device_enroll(fleet_key=key, device_id=device_id)
    phones = {d.device_id: d for d in Device.objects.filter(fleet=fleet)}
    for _ in range(4):  # batches of at most 1,000 events
        _report(phones[stable_id], version=1, cloud=285, on_device=665)
    _report(phones[candidate_id], version=2, cloud=60, on_device=140)
    alerts_evaluate(fleet_id=fleet.pk, now=rollout.stage_changed_at + timedelta(minutes=5))

    # When a viewer opens the rollout page, wide and on a phone
    page = browser_page
    _login(page, asgi_server)
    for width, height in ((1366, 900), (390, 844)):
        page.set_viewport_size({"width": width, "height": height})
        page.goto(f"{asgi_server}/fleets/{SLUG}/rollout/")

        # Then the inconclusive cloud-share guard says about when it will know at this rate
        # and what would make it sooner, and the page is no wider than the window
        guard = page.locator("li[data-guard-kind=sequential]", has_text="cloud share")
        expect(guard).to_have_attribute("data-guard-state", "inconclusive")
        decide = guard.locator("[data-field=guard-decide]")
        expect(decide).to_be_visible()
        expect(decide).to_contain_text("When it will know: decides in about ")
        expect(decide).to_contain_text("at the current rate (")
        expect(decide).to_contain_text("Sooner with a larger stage (25% on the candidate)")
        guard.scroll_into_view_if_needed()
        page.screenshot(path=str(screenshot_path(f"rollout-decide-{width}")), full_page=True)
        page.locator("#rollout-guards").screenshot(
            path=str(screenshot_path(f"rollout-decide-{width}-detail"))
        )
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 1, f"{overflow}px wider than a {width}px window"
