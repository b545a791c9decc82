"""The rollout page says who has not acked (issue 24): how many devices do not run their
assigned version yet, and the first of them by id, kept live as acks arrive; read at 1366 and
390 px (test-artifacts/rollout-not-acked-1366.png, -390.png)."""

from typing import Any

import pytest
from django.db import transaction
from playwright.sync_api import Page, expect

from controlplane.roles import Role
from routing_policies import services
from routing_policies.models import Device
from routing_policies.selectors import fleet_assignment, fleet_convergence
from tests.factories import UserFactory, make_fleet

from .conftest import screenshot_path
from .pages import LAPTOP, PHONE, assert_no_sideways_scroll, log_in, overlapping, text_boxes

pytestmark = pytest.mark.e2e

SLUG = "e2e-not-acked"
DEVICES = 30
LIVE_TIMEOUT_MS = 30_000


def _fleet_at_100_with_some_acked() -> tuple[Any, dict[str, int]]:
    """v2 at 100% over v1 for 30 devices (10 connected long ago on v1, 6 on v2, the rest
    never connected): each device's id → its pk."""
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
    with transaction.atomic():
        key = services.fleet_enrollment_key_rotate(actor=None, fleet=fleet)
    pks = {}
    for index in range(DEVICES):
        device, _ = services.device_enroll(
            fleet_key=key, device_id=f"car-{index:02d}-vin-4T1BF1FK5CU{index:06d}"
        )
        pks[device.device_id] = device.pk
    ids = sorted(pks)
    for device_id in ids[:10]:
        services.device_ack(device_pk=pks[device_id], version=1)
    services.rollout_start(actor=publisher, fleet=fleet, version=2)
    services.rollout_advance(actor=publisher, fleet=fleet, to_stage=100)
    for device_id in ids[10:16]:
        services.device_ack(device_pk=pks[device_id], version=2)
    return fleet, pks


def test_rollout_page__devices_behind__named_then_cleared_live_and_readable_at_1366_and_390(
    asgi_server: str, transactional_db: None, requires_postgres: None, browser_page: Page
) -> None:
    # Given v2 at 100% of 30 devices, 6 of which acked it
    fleet, pks = _fleet_at_100_with_some_acked()
    assert fleet_assignment(fleet.pk).version_for(sorted(pks)[0]) == 2
    page = browser_page

    # When the publisher opens the rollout page
    page.set_viewport_size(LAPTOP)
    log_in(page, asgi_server, "rhea")
    page.goto(f"{asgi_server}/fleets/{SLUG}/rollout/")

    # Then it says 24 devices are behind and names the first 20, with what each runs
    box = page.locator("#not-acked")
    expect(box).to_contain_text("24 devices not yet on their assigned version")
    expect(box).to_contain_text("the first 20 by id")
    items = box.locator("li")
    expect(items).to_have_count(20)
    behind = fleet_convergence(fleet)["not_acked"]
    names = [row["device_id"] for row in behind["devices"]]
    assert items.evaluate_all("els => els.map(e => e.dataset.deviceId)") == names
    expect(items.first).to_contain_text("v2 assigned · runs v1 · offline")
    expect(items.nth(10)).to_contain_text("v2 assigned · no ack yet · offline")

    # ... readable on a laptop and a phone: nothing wider than the window, no two overlapping
    for viewport, name in ((LAPTOP, "1366"), (PHONE, "390")):
        page.set_viewport_size(viewport)
        assert_no_sideways_scroll(page, f"rollout page at {name} px")
        clash = overlapping(text_boxes(page, "#not-acked li, #not-acked .not-acked-head > span"))
        assert clash == [], f"at {name} px: {clash}"
        page.screenshot(path=str(screenshot_path(f"rollout-not-acked-{name}")), full_page=True)
        page.locator("#convergence").screenshot(
            path=str(screenshot_path(f"rollout-not-acked-{name}-convergence"))
        )
    page.set_viewport_size(LAPTOP)

    # When all but one of the devices ack v2 (the page is not reloaded)
    last = max(pks)
    for device_id, pk in pks.items():
        if device_id != last:
            services.device_ack(device_pk=pk, version=2)

    # Then the box follows: one device named, no "first 20"
    expect(box).to_contain_text("1 device not yet on its assigned version", timeout=LIVE_TIMEOUT_MS)
    expect(items).to_have_count(1)
    expect(items.first).to_have_attribute("data-device-id", last)
    expect(box.locator("[data-not-acked-more]")).to_have_text("")

    # When it acks too, then every device is on its version
    services.device_ack(device_pk=pks[last], version=2)
    expect(box).to_contain_text("every device acked its assigned version", timeout=LIVE_TIMEOUT_MS)
    expect(items).to_have_count(0)
    assert Device.objects.filter(fleet=fleet, acked_version=2).count() == DEVICES
