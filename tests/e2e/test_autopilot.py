"""The autopilot page (issue 27): a publisher reaches it from the fleet's navigation, turns the
autopilot on for one cell (with a cost ceiling, a quiet period and a cell it may not
touch), runs a cycle now and reads it: θ before and after, predicted beside
now, the published version and the guarded rollout. Read at 1366 and 390 px
(test-artifacts/autopilot-*.png)."""

import re
from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone
from playwright.sync_api import Locator, Page, expect

from autopilot.models import AutopilotObjective
from controlplane.roles import Role
from routing_policies import services
from routing_policies.segments.services import segment_create
from tests.autopilot_events import IMAGE, image_events, ingest
from tests.factories import UserFactory, make_fleet

from .conftest import screenshot_path
from .pages import LAPTOP, PHONE, assert_no_sideways_scroll, log_in

pytestmark = pytest.mark.e2e

SLUG = "fleet-a"
UNTOUCHED = "text/interactive/normal"


def _quiet_period_away_from_now() -> dict[str, str]:
    """An hour's quiet period that starts six hours from now (UTC), so a cycle may run now."""
    start = timezone.now() + timedelta(hours=6)
    return {
        "from": start.strftime("%H:00"),
        "to": (start + timedelta(hours=1)).strftime("%H:00"),
    }


def _fleet() -> None:
    publisher: Any = UserFactory(role=Role.PUBLISHER, username="pat")
    fleet = make_fleet(slug=SLUG, actor=publisher)
    with transaction.atomic():
        key = services.fleet_enrollment_key_rotate(actor=None, fleet=fleet)
    device, _ = services.device_enroll(fleet_key=key, device_id="phone-1", platform="android")
    ingest(device, image_events(3000, seed=4))


def _on_for_the_image_cell(page: Page) -> Locator:
    """The objective form with the autopilot ticked on for the image cell, floor 50%."""
    form = page.locator("#objective-form")
    form.locator("input[name=enabled]").check()
    form.locator("input[name=quality_floor]").fill("0.5")
    form.locator("input[name=quality_resolution]").fill("0.04")
    form.locator(f'input[name=cells][value="{IMAGE}"]').check()
    return form


def _read_at_both_widths(page: Page, asgi_server: str, shot: str) -> None:
    """The page with cycle 1 and the form open, read at 1366 and 390 px: no sideways scroll,
    and a screenshot each (test-artifacts/<shot>-<width>.png)."""
    for size, name in ((LAPTOP, "1366"), (PHONE, "390")):
        page.set_viewport_size(size)
        page.goto(f"{asgi_server}/fleets/{SLUG}/lab/autopilot/")
        expect(page.locator('[data-cycle="1"]')).to_be_visible()
        page.locator("details.ap-edit").evaluate("el => { el.open = true; }")
        assert_no_sideways_scroll(page, f"{shot} at {name} px")
        page.screenshot(path=str(screenshot_path(f"{shot}-{name}")), full_page=True)


def test_autopilot_page__publisher_turns_it_on_and_runs_a_cycle__cycle_shown(
    asgi_server: str, transactional_db: None, requires_postgres: None, browser_page: Page
) -> None:
    # Given a fleet whose image cell reported its drafts, and its publisher on the lab page
    _fleet()
    page = browser_page
    log_in(page, asgi_server, "pat")
    page.set_viewport_size(LAPTOP)
    page.goto(f"{asgi_server}/fleets/{SLUG}/lab/")
    page.locator("nav.fleet-nav").get_by_role("link", name="Autopilot").click()
    expect(page).to_have_url(f"{asgi_server}/fleets/{SLUG}/lab/autopilot/")
    expect(page.locator('[data-field="state"]')).to_have_text("off")

    # When they turn it on for the image cell with a floor of 50%
    form = _on_for_the_image_cell(page)
    # with a ceiling on cloud cost, a quiet period away from now and a cell it may not touch
    form.locator("input[name=cost_ceiling_per_day]").fill("40")
    quiet = _quiet_period_away_from_now()
    form.locator("textarea[name=quiet_periods]").fill(f"{quiet['from']}–{quiet['to']}")
    form.locator(f'input[name=excluded_cells][value="{UNTOUCHED}"]').check()
    form.get_by_role("button", name="Save the objective").click()

    # Then it is active, with its next run
    expect(page.locator('[data-field="state"]')).to_have_text("active")
    expect(page.locator('[data-field="next-run"]')).to_contain_text("UTC")
    objective = AutopilotObjective.objects.get()
    assert objective.cells == [IMAGE]
    assert objective.excluded_cells == [UNTOUCHED]
    assert objective.quiet_periods == [quiet]
    assert objective.cost_ceiling_per_day == 40.0
    expect(page.locator('[data-field="scope"]')).to_contain_text(f"never {UNTOUCHED}")

    # When they run a cycle now
    page.get_by_role("button", name="Run a cycle now").click()

    # Then cycle 1 rolls out v2: θ 0.6 → 0.65 with the prediction beside what runs now
    cycle = page.locator('[data-cycle="1"]')
    expect(cycle).to_contain_text("rolling_out")
    expect(cycle).to_contain_text("0.6 → 0.65")
    expect(cycle).to_contain_text("predicted")
    expect(cycle.get_by_role("link", name="v2")).to_be_visible()
    expect(cycle.get_by_role("link", name=re.compile(r"^rollout \d+$"))).to_be_visible()

    _read_at_both_widths(page, asgi_server, "autopilot")


def test_autopilot_page__publisher_scopes_it_to_a_segment__its_cycle_moves_the_override(
    asgi_server: str, transactional_db: None, requires_postgres: None, browser_page: Page
) -> None:
    # Given a fleet with segment npu whose one phone reported its image drafts
    publisher: Any = UserFactory(role=Role.PUBLISHER, username="pat")
    fleet = make_fleet(slug=SLUG, actor=publisher)
    with transaction.atomic():
        key = services.fleet_enrollment_key_rotate(actor=None, fleet=fleet)
    segment_create(
        actor=publisher, fleet=fleet, name="npu", rule={"attribute": "accelerator", "equals": "npu"}
    )
    device, _ = services.device_enroll(
        fleet_key=key, device_id="npu-1", platform="android", attributes={"accelerator": "npu"}
    )
    ingest(device, [{**e, "device_id": "npu-1"} for e in image_events(3000, seed=4)])
    page = browser_page
    log_in(page, asgi_server, "pat")
    page.set_viewport_size(LAPTOP)
    page.goto(f"{asgi_server}/fleets/{SLUG}/lab/autopilot/")

    # When they turn it on for the image cell of segment npu and run a cycle now
    form = _on_for_the_image_cell(page)
    form.locator("select[name=segment]").select_option("npu")
    form.get_by_role("button", name="Save the objective").click()
    expect(page.locator('[data-field="state"]')).to_have_text("active")
    expect(page.locator('[data-field="scope"]')).to_contain_text("segment npu")
    page.get_by_role("button", name="Run a cycle now").click()

    # Then cycle 1 is the segment's: θ 0.6 → 0.65 in v2's override for npu, rolled out to it
    cycle = page.locator('[data-cycle="1"]')
    expect(cycle.locator('[data-field="cycle-segment"]')).to_have_text("segment npu")
    expect(cycle).to_contain_text("0.6 → 0.65")
    expect(cycle).to_contain_text("to segment npu")
    v2 = fleet.versions.get(number=2)
    assert v2.overrides[0]["segment"] == "npu"

    _read_at_both_widths(page, asgi_server, "autopilot-segment")
