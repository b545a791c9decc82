"""The device registry of a mixed fleet (issue 24): each MQTT device's row says so beside its
presence, and the page still reads at 1366 and 390 px (test-artifacts/devices-mixed-*.png)."""

from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone
from playwright.sync_api import Page, expect

from controlplane.roles import Role
from routing_policies import services
from routing_policies.models import Device
from tests.factories import UserFactory, make_fleet

from .conftest import screenshot_path
from .pages import LAPTOP, PHONE, assert_no_sideways_scroll, log_in

pytestmark = pytest.mark.e2e

SLUG = "e2e-mixed"


def _mixed_fleet() -> None:
    """Six devices: three phones on the WebSocket (one with a live socket), three cars on MQTT
    (two with a birth and no will since, one whose will arrived 40 minutes ago)."""
    publisher: Any = UserFactory(role=Role.PUBLISHER, username="mira")
    fleet = make_fleet(slug=SLUG, actor=publisher)
    with transaction.atomic():
        key = services.fleet_enrollment_key_rotate(actor=None, fleet=fleet)
    for index in range(3):
        services.device_enroll(fleet_key=key, device_id=f"phone-{index}", platform="android")
        services.device_enroll(fleet_key=key, device_id=f"car-{index}", platform="linux")
    # As the link lands them: a birth (or a will) is also when the device was last seen.
    now = timezone.now()
    cars = Device.objects.filter(device_id__in=["car-0", "car-1"])
    cars.update(transport="mqtt", connected=True, last_seen_at=now)
    Device.objects.filter(device_id="car-2").update(
        transport="mqtt", connected=False, last_seen_at=now - timedelta(minutes=40)
    )
    Device.objects.filter(device_id="phone-0").update(connected=True, last_seen_at=now)


def test_devices_page__mixed_fleet__mqtt_rows_marked_and_readable_at_1366_and_390(
    asgi_server: str, transactional_db: None, requires_postgres: None, browser_page: Page
) -> None:
    # Given a fleet of three WebSocket phones and three MQTT cars
    _mixed_fleet()
    page = browser_page
    log_in(page, asgi_server, "mira")
    for size, name in ((LAPTOP, "1366"), (PHONE, "390")):
        # When its publisher opens the device registry at this width
        page.set_viewport_size(size)
        page.goto(f"{asgi_server}/fleets/{SLUG}/devices/")

        # Then the cars say they are on MQTT, online or not as their presence says
        for device_id, online in (("car-0", "online"), ("car-1", "online"), ("car-2", "offline")):
            cell = page.locator(f'tr[data-device="{device_id}"] [data-field="online"]')
            expect(cell).to_contain_text(f"{online} over MQTT")
        expect(page.locator('tr[data-device="phone-0"] [data-field="online"]')).to_have_text(
            "online"
        )
        for device_id in ("phone-0", "phone-1", "phone-2"):
            row = page.locator(f'tr[data-device="{device_id}"]')
            expect(row.locator('[data-field="transport"]')).to_have_count(0)
        assert_no_sideways_scroll(page, f"devices at {name} px")
        page.screenshot(path=str(screenshot_path(f"devices-mixed-{name}")), full_page=True)
