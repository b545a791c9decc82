"""The dashboard's segment filter and an alert rule on a segment, in a real Chromium (issue 26):
the viewer picks a segment, the address bar and the figures follow (the NPU phones' events
only; the convergence panel counts the NPU phones alone); the alerts page offers the fleet's
segments for a rule and shows a rule's segment in its scope. Read at 1366 and 390 px
(test-artifacts/segment-*.png)."""

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import transaction
from playwright.sync_api import Page, expect

from controlplane.roles import Role
from routing_policies import services
from routing_policies.models import Device
from telemetry.alerts.services import alert_rule_create
from telemetry.ingest.services import landed_batches_process, telemetry_batch_ingest
from tests.factories import UserFactory, iso, make_event, make_fleet, npu_and_cpu_fleet

from .conftest import screenshot_path
from .pages import LAPTOP, PHONE, assert_no_sideways_scroll, log_in

pytestmark = pytest.mark.e2e

SLUG = "e2e-segments"


def _fleet() -> None:
    """3 NPU phones and 5 CPU ones; each NPU phone reports 4 events (1 in the cloud), each CPU
    phone 6 (all on the device); a rule on segment npu."""
    editor: Any = UserFactory(role=Role.EDITOR, username="esme")
    fleet = make_fleet(slug=SLUG, actor=editor)
    with transaction.atomic():
        key = services.fleet_enrollment_key_rotate(actor=None, fleet=fleet)
    npu_and_cpu_fleet(fleet=fleet, fleet_key=key, actor=editor, npu=3, total=8)
    now = iso(datetime.now(UTC))
    for device in Device.objects.filter(fleet=fleet):
        npu = device.device_id.startswith("npu")
        routes = ["cloud", "device", "device", "device"] if npu else ["device"] * 6
        events = [make_event(device.device_id, ts=now, route=route) for route in routes]
        telemetry_batch_ingest(device=device, body=json.dumps({"events": events}).encode())
    landed_batches_process()
    alert_rule_create(
        actor=editor,
        fleet=fleet,
        name="NPU cloud share",
        metric="cloud_share",
        condition="above",
        threshold=0.3,
        segment="npu",
    )


def _editor_on(page: Page, server: str, path: str) -> None:
    """The fleet made, its editor logged in at 1366 px on `path`."""
    _fleet()
    log_in(page, server, "esme")
    page.set_viewport_size(LAPTOP)
    page.goto(f"{server}/fleets/{SLUG}/{path}")


def test_dashboard__segment_filter__figures_of_its_devices(
    asgi_server: str, transactional_db: None, requires_postgres: None, browser_page: Page
) -> None:
    # Given a viewer (the editor) on the dashboard of the whole fleet: 42 events, 3 in the cloud
    page = browser_page
    _editor_on(page, asgi_server, "dashboard/?window=15m")
    segment = page.locator("select[name=segment]")
    expect(segment.locator("option")).to_have_text(["all devices", "cars", "npu"])
    cloud = page.locator("[data-figure=cloud_share] [data-value]")
    expect(cloud).to_have_text("7.1%")
    title = page.locator("[data-field=convergence-title]")
    note = page.locator("[data-field=convergence-note]")
    expect(title).to_have_text("Fleet convergence")
    expect(note).to_have_text("8 devices, 0 online now")

    # When they pick segment npu
    segment.select_option("npu")

    # Then the address names it and the figures are the NPU phones' (3 of 12 in the cloud)
    expect(page).to_have_url(f"{asgi_server}/fleets/{SLUG}/dashboard/?window=15m&segment=npu")
    expect(cloud).to_have_text("25.0%")
    # and the convergence panel counts the segment's 3 phones, not the fleet's 8
    expect(title).to_have_text("Convergence of segment npu")
    expect(note).to_have_text("3 devices in the segment now (by their attributes), 0 online now")
    page.screenshot(path=str(screenshot_path("segment-dashboard-1366")), full_page=True)
    panel = page.locator("section", has=page.locator("#chart-convergence"))
    panel.screenshot(path=str(screenshot_path("segment-convergence-1366")))
    page.set_viewport_size(PHONE)
    page.reload()
    expect(cloud).to_have_text("25.0%")
    expect(note).to_have_text("3 devices in the segment now (by their attributes), 0 online now")
    assert_no_sideways_scroll(page, "dashboard filtered by a segment, 390 px")
    page.screenshot(path=str(screenshot_path("segment-dashboard-390")), full_page=True)
    panel.screenshot(path=str(screenshot_path("segment-convergence-390")))


def test_alerts_page__rule_on_a_segment__offered_and_shown(
    asgi_server: str, transactional_db: None, requires_postgres: None, browser_page: Page
) -> None:
    # Given the editor on the alerts page, with a rule on segment npu
    page = browser_page
    _editor_on(page, asgi_server, "alerts/")

    # Then the rule's scope names the segment, and the form offers the fleet's segments
    row = page.locator("tr", has_text="NPU cloud share")
    expect(row.locator("[data-label=Scope]")).to_have_text("segment npu")
    form_segment = page.locator("form select[name=segment]").first
    expect(form_segment.locator("option")).to_have_text(["every device", "cars", "npu"])
    page.screenshot(path=str(screenshot_path("segment-alerts-1366")), full_page=True)
    page.set_viewport_size(PHONE)
    page.reload()
    assert_no_sideways_scroll(page, "alerts page with a segment rule, 390 px")
    page.screenshot(path=str(screenshot_path("segment-alerts-390")), full_page=True)
