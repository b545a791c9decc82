"""Backtest and calibration per segment in a real Chromium, on a real ASGI server with a real
Celery worker: an editor picks segment npu, sees its backtest say which segment and what its
override changes, calibrates the segment's θ and writes it into the segment's override.
Screenshots at 1366 and 390 px are kept in test-artifacts/."""

from typing import Any

import pytest
from django.db import transaction
from playwright.sync_api import Page, expect

from controlplane.roles import Role
from routing_policies import services
from routing_policies.policies.sdk_cells import table_cells
from routing_policies.selectors import version_table
from tests.factories import UserFactory, decided_events, make_fleet
from tests.integration.test_telemetry_durability import Worker
from tests.lab_events import PHONES, on_phones, phones_with_segments

from .conftest import screenshot_path
from .pages import LAPTOP, PHONE, assert_no_sideways_scroll, log_in

pytestmark = pytest.mark.e2e

SLUG = "e2e-lab-segments"
CELL = "text/background/normal"
LIVE_TIMEOUT_MS = 120_000  # an outer bound for the worker's backtest


def _shots(page: Page, name: str) -> None:
    for size in (LAPTOP, PHONE):
        page.set_viewport_size(size)
        page.wait_for_timeout(300)  # Plotly redraws to the new width
        assert_no_sideways_scroll(page, f"{name} at {size['width']} px")
        page.screenshot(path=str(screenshot_path(f"{name}-{size['width']}")), full_page=True)
    page.set_viewport_size(LAPTOP)


def test_lab_segment__backtest_and_calibration_of_npu__named_and_written_into_its_override(
    asgi_server: str,
    transactional_db: None,
    requires_postgres: None,
    worker: Worker,
    browser_page: Page,
) -> None:
    # Given 20 phones (5 with an NPU) with 3,000 events of v1, segments npu, gpu-or-npu and
    # cars, and a draft whose override for npu raises text/background/normal's θ to 0.9
    publisher: Any = UserFactory(role=Role.PUBLISHER, username="pia")
    UserFactory(role=Role.EDITOR, username="eddie")
    fleet = make_fleet(slug=SLUG, actor=publisher)
    key = services.fleet_enrollment_key_rotate(actor=publisher, fleet=fleet)
    phones_with_segments(fleet=fleet, fleet_key=key, actor=publisher)
    v1 = table_cells(version_table(version=fleet.versions.get()))
    on_phones(decided_events(fleet, v1, count=3000, store=False), PHONES)
    with transaction.atomic():
        draft = services.policy_draft_create(actor=publisher, fleet=fleet)
        services.policy_draft_override_set(
            actor=publisher,
            fleet=fleet,
            revision=draft.revision,
            segment="npu",
            cells={CELL: {"threshold": 0.9}},
        )
    page = browser_page
    page.set_viewport_size(LAPTOP)
    log_in(page, asgi_server, "eddie")

    # When the editor backtests the draft for segment npu
    page.goto(f"{asgi_server}/fleets/{SLUG}/lab/backtests/")
    page.locator("#backtest-segment").select_option("npu")
    page.get_by_role("button", name="Run backtest").click()

    # Then the worker replays it, and the result names the segment, its devices and the cell
    # its override changes, reproducing what the NPU phones did
    result = page.locator("#backtest-result")
    expect(result).to_have_attribute("data-status", "done", timeout=LIVE_TIMEOUT_MS)
    expect(result.locator("[data-field=segment]")).to_have_text("segment npu")
    note = page.locator("#backtest-segment-note")
    expect(note).to_contain_text("devices in segment npu (5 devices now)")
    expect(note).to_contain_text(f"its override changes {CELL}")
    expect(page.locator("[data-field=agreement]")).to_have_text("100.00%")
    _shots(page, "lab-segment-backtest")

    # When they calibrate the cell for α 40% on segment npu
    page.goto(f"{asgi_server}/fleets/{SLUG}/lab/calibrate/")
    page.locator("#calib-kind").select_option("alpha")
    page.locator("#calib-value").fill("40")
    page.locator("#calib-segment").select_option("npu")
    page.locator(f'input[name=cells][value="{CELL}"]').check()
    page.get_by_role("button", name="Calibrate").click()

    # Then the summary names the segment and θ now is its override's
    expect(page.locator(".calib-summary [data-field=segment]")).to_have_text("npu")
    card = page.locator(f'[data-cell="{CELL}"]')
    expect(card.locator("tbody tr").first).to_contain_text("0.900")
    expect(card.locator(".calib-chart .main-svg").first).to_be_visible()
    chosen = float(card.locator("[data-field=chosen-theta]").inner_text())
    _shots(page, "lab-segment-calibration")

    # When the chosen θ is written into the draft
    card.locator("input[name=theta]").check()
    page.get_by_role("button", name="Write the ticked θs into the draft's override for npu").click()

    # Then the segment's override holds it, the cell keeps its θ, and the segment's backtest of
    # the new revision runs
    expect(page.locator(".flash")).to_contain_text("into the draft's override for npu")
    expect(page.locator("#backtest-result")).to_have_attribute(
        "data-status", "done", timeout=LIVE_TIMEOUT_MS
    )
    expect(page.locator("#backtest-result [data-field=segment]")).to_have_text("segment npu")
    draft.refresh_from_db()
    assert draft.overrides[0]["cells"] == {CELL: {"threshold": chosen}}
    assert version_table(version=draft)[("text", "background", "normal")]["threshold"] == (
        v1[("text", "background", "normal")].threshold
    )
