"""Segments (issue 26): an editor writes a rule and sees, as they type, how many enrolled devices
it matches; the saved segment is listed with its count, and the device registry shows each
device's attributes (what it did not report, said so) and its segments. Both pages read at
1366 and 390 px (test-artifacts/segments-*.png, devices-segments-*.png)."""

import json
from typing import Any

import pytest
from django.db import transaction
from playwright.sync_api import Page, expect

from controlplane.roles import Role
from routing_policies import services
from routing_policies.models import Segment
from tests.factories import UserFactory, make_fleet

from .conftest import screenshot_path
from .pages import LAPTOP, PHONE, assert_no_sideways_scroll, log_in

pytestmark = pytest.mark.e2e

SLUG = "e2e-segments"
NPU_14 = {
    "all_of": [
        {"attribute": "accelerator", "equals": "npu"},
        {"attribute": "os_version", "range": {"gte": "14"}},
    ]
}
DEVICES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "pixel-8": (
        "android",
        "Pixel 8",
        {
            "accelerator": "npu",
            "os_version": "14",
            "memory_gb": 8,
            "local_model": "qwen2.5-3b",
            "quantisation": "int4",
            "app_version": "4.12.0",
            "region": "eu-west",
        },
    ),
    "galaxy-s23": (
        "android",
        "Galaxy S23",
        {"accelerator": "npu", "os_version": "14.1", "memory_gb": 8},
    ),
    "redmi-12": (
        "android",
        "Redmi Note 12",
        {"accelerator": "gpu", "os_version": "13", "memory_gb": 6},
    ),
    "head-unit": (
        "android-automotive",
        "Head unit SA8155",
        {"accelerator": "npu", "os_version": "12"},
    ),
    "old-app": ("android", "Galaxy A15", {}),
}


def _fleet() -> None:
    """Five devices: two NPU phones on Android 14+, a GPU phone, an NPU car on 12, and a phone
    on an app too old to report attributes."""
    editor: Any = UserFactory(role=Role.PUBLISHER, username="sami")
    fleet = make_fleet(slug=SLUG, actor=editor)
    with transaction.atomic():
        key = services.fleet_enrollment_key_rotate(actor=None, fleet=fleet)
    for device_id, (platform, model, attributes) in DEVICES.items():
        services.device_enroll(
            fleet_key=key,
            device_id=device_id,
            platform=platform,
            model=model,
            attributes=attributes,
        )


def test_segment_editor__typing_a_rule__live_count_then_saved_and_shown_on_devices(
    asgi_server: str, transactional_db: None, requires_postgres: None, browser_page: Page
) -> None:
    # Given a fleet of five devices and its editor on the segment page, from the fleet's nav
    _fleet()
    page = browser_page
    log_in(page, asgi_server, "sami")
    page.set_viewport_size(LAPTOP)
    page.goto(f"{asgi_server}/fleets/{SLUG}/devices/")
    page.locator("nav.fleet-nav").get_by_role("link", name="Segments").click()
    expect(page).to_have_url(f"{asgi_server}/fleets/{SLUG}/segments/")
    count = page.locator("[data-live-count] [data-count-text]")

    # When they type a rule: NPU devices
    rule = page.locator("textarea[name=rule]")
    rule.fill(json.dumps({"attribute": "accelerator", "equals": "npu"}))
    # Then the count follows: 3 of the 5
    expect(count).to_have_text("3 of 5 enrolled devices match")

    # When they narrow it to Android 14 and up (a version range: 14.1 counts, 12 does not)
    rule.fill(json.dumps(NPU_14, indent=2))
    expect(count).to_have_text("2 of 5 enrolled devices match")

    # When they mistype an attribute, the count says where the rule is wrong, nothing saved
    rule.fill(json.dumps({"attribute": "acelerator", "equals": "npu"}))
    expect(count).to_contain_text("rule.attribute: unknown attribute")

    # When a rule matches every device, it is counted and warned about
    rule.fill(json.dumps({"attribute": "memory_gb", "range": {"gte": 0}}))
    expect(count).to_have_text("3 of 5 enrolled devices match")
    rule.fill(
        json.dumps({"any_of": [{"attribute": "platform", "in": ["android", "android-automotive"]}]})
    )
    expect(page.locator('[data-count-warnings] [data-warning="matches_all"]')).to_be_visible()

    # When they save "npu-14"
    rule.fill(json.dumps(NPU_14, indent=2))
    expect(count).to_have_text("2 of 5 enrolled devices match")
    page.fill("input[name=name]", "npu-14")
    page.fill("input[name=description]", "Flagships: NPU on Android 14+")
    page.get_by_role("button", name="Add segment").click()

    # Then it is listed with its count, and stored as typed
    row = page.locator('tr[data-segment="npu-14"]')
    expect(row.locator('[data-field="matching"]')).to_have_text("2 of 5")
    expect(row).to_contain_text("accelerator = npu and os_version ≥ 14")
    assert Segment.objects.get().rule == NPU_14

    for size, name in ((LAPTOP, "1366"), (PHONE, "390")):
        page.set_viewport_size(size)
        page.goto(f"{asgi_server}/fleets/{SLUG}/segments/?edit=npu-14")
        expect(count).to_have_text("2 of 5 enrolled devices match")
        assert_no_sideways_scroll(page, f"segments at {name} px")
        page.screenshot(path=str(screenshot_path(f"segments-{name}")), full_page=True)

        # And the registry shows each device's attributes and segments
        page.goto(f"{asgi_server}/fleets/{SLUG}/devices/")
        pixel = page.locator('tr[data-device="pixel-8"]')
        expect(pixel.locator('[data-field="segments"]')).to_have_text("npu-14")
        expect(pixel.locator('[data-attribute="local_model"]')).to_have_text("qwen2.5-3b")
        expect(page.locator('tr[data-device="head-unit"] [data-field="segments"]')).to_have_text(
            "—"
        )
        old = page.locator('tr[data-device="old-app"] [data-field="attributes"]')
        expect(old).to_have_text("nothing reported")
        assert_no_sideways_scroll(page, f"devices at {name} px")
        page.screenshot(path=str(screenshot_path(f"devices-segments-{name}")), full_page=True)
