"""Overrides by segment (issue 26): an editor overrides θ for a segment on the policy page (a
value that breaks the cell is refused naming the segment, cell and field), sees it in the grid
and the list in precedence order, and after publishing the diff shows it and each device's page
says which cell values it runs. Pages at 1366 and 390 px (test-artifacts/overrides-*.png)."""

from typing import Any

import pytest
from django.db import transaction
from playwright.sync_api import Page, expect

from controlplane.roles import Role
from routing_policies import services
from routing_policies.models import PolicyVersion, Segment
from tests.factories import UserFactory, make_fleet

from .conftest import screenshot_path
from .pages import LAPTOP, PHONE, assert_no_sideways_scroll, log_in

pytestmark = pytest.mark.e2e

SLUG = "e2e-overrides"
CELL = "voice/interactive/normal"


def _fleet() -> None:
    """v1 published, a draft, segments `npu` and `small-memory`, an NPU phone and a GPU one."""
    publisher: Any = UserFactory(role=Role.PUBLISHER, username="sami")
    fleet = make_fleet(slug=SLUG, actor=publisher)
    with transaction.atomic():
        key = services.fleet_enrollment_key_rotate(actor=None, fleet=fleet)
    Segment.objects.create(
        fleet=fleet, name="npu", rule={"attribute": "accelerator", "equals": "npu"}
    )
    Segment.objects.create(
        fleet=fleet, name="small-memory", rule={"attribute": "memory_gb", "range": {"lt": 6}}
    )
    services.policy_draft_create(actor=publisher, fleet=fleet)
    for device_id, attributes in (
        ("pixel-8", {"accelerator": "npu", "memory_gb": 8}),
        ("redmi-12", {"accelerator": "gpu", "memory_gb": 4}),
    ):
        services.device_enroll(
            fleet_key=key, device_id=device_id, platform="android", attributes=attributes
        )


def _override(page: Page, segment: str, field: str, value: str) -> None:
    form = page.locator("#override-form")
    form.locator("select[name=segment]").select_option(segment)
    form.locator("select[name=cell]").select_option(CELL)
    form.locator("select[name=field]").select_option(field)
    form.locator("input[name=value]").fill(value)
    form.get_by_role("button", name="Set override").click()


def test_overrides__editor_sets_them_publisher_publishes_devices_run_them(
    asgi_server: str, transactional_db: None, requires_postgres: None, browser_page: Page
) -> None:
    # Given a fleet with a draft and two segments, its editor on the policy page
    _fleet()
    page = browser_page
    log_in(page, asgi_server, "sami")
    page.set_viewport_size(LAPTOP)
    page.goto(f"{asgi_server}/fleets/{SLUG}/")
    expect(page.locator("#overrides")).to_contain_text("No overrides")

    # When they override θ beyond its range for npu
    _override(page, "npu", "threshold", "1.5")
    # Then the page says what is wrong, naming the cell; nothing is saved
    expect(page.locator("main")).to_contain_text("must be in [0, 1]")
    assert PolicyVersion.objects.get(number__isnull=True).overrides == []

    # When they set θ 0.85 for npu and mode device_only for small-memory, first in precedence
    page.goto(f"{asgi_server}/fleets/{SLUG}/")
    _override(page, "npu", "threshold", "0.85")
    expect(page.locator('.override[data-segment="npu"]')).to_contain_text("0.85")
    form = page.locator("#override-form")
    form.locator("input[name=position]").fill("1")
    _override(page, "small-memory", "mode", "device_only")

    # Then both are listed in precedence order and the grid's cell names them
    segments = page.locator(".override .ovr-seg")
    expect(segments).to_have_text(["small-memory", "npu"])
    chips = page.locator(f'td[data-cell="{CELL}"] .cell-overrides li')
    expect(chips).to_have_count(2)
    expect(chips.first).to_contain_text("small-memory")
    for size, name in ((LAPTOP, "1366"), (PHONE, "390")):
        page.set_viewport_size(size)
        page.goto(f"{asgi_server}/fleets/{SLUG}/#overrides")
        expect(page.locator(".override")).to_have_count(2)
        assert_no_sideways_scroll(page, f"policy page at {name} px")
        page.screenshot(path=str(screenshot_path(f"overrides-editor-{name}")), full_page=True)

    # When the draft is published (v2) and the diff and the devices' pages are read
    page.set_viewport_size(LAPTOP)
    page.goto(f"{asgi_server}/fleets/{SLUG}/")
    page.fill("#publish-note", "θ by hardware class")
    page.get_by_role("button", name="Publish as v2").click()
    expect(page.locator("main")).to_contain_text("Published v2")
    for size, name in ((LAPTOP, "1366"), (PHONE, "390")):
        page.set_viewport_size(size)
        page.goto(f"{asgi_server}/fleets/{SLUG}/diff/?a=1&b=2")
        expect(page.locator("#override-changes")).to_contain_text("small-memory")
        assert_no_sideways_scroll(page, f"diff at {name} px")
        page.screenshot(path=str(screenshot_path(f"overrides-diff-{name}")), full_page=True)

        # Then the NPU phone runs θ 0.85 from npu; the GPU phone with little memory runs
        # small-memory's device_only (first in precedence), not npu's θ
        page.goto(f"{asgi_server}/fleets/{SLUG}/devices/pixel-8/?version=2")
        row = page.locator(f'tr[data-cell="{CELL}"]')
        expect(row.locator('[data-field="threshold"]')).to_have_text("0.85")
        expect(row.locator('[data-field="source"]')).to_have_text("npu")
        expect(page.locator('[data-field="segments"]')).to_contain_text("npu")
        assert_no_sideways_scroll(page, f"device page at {name} px")
        page.screenshot(path=str(screenshot_path(f"overrides-device-{name}")), full_page=True)
        page.goto(f"{asgi_server}/fleets/{SLUG}/devices/redmi-12/?version=2")
        row = page.locator(f'tr[data-cell="{CELL}"]')
        expect(row.locator('[data-field="source"]')).to_have_text("small-memory")
        expect(row).to_contain_text("device_only")
