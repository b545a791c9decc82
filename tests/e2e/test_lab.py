"""The policy lab's playground in a real Chromium against a real ASGI server and PostgreSQL:
it answers slider moves and mode switches as a person sees them."""

import re
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from controlplane.roles import Role
from routing_policies import services
from tests.factories import UserFactory, make_fleet

from .conftest import screenshot_path
from .pages import LAPTOP, PHONE, ConsoleErrors, assert_no_sideways_scroll, log_in

pytestmark = pytest.mark.e2e

SLUG = "e2e-lab"


def _slide(page: Page, name: str, value: float) -> None:
    """Move a slider as a person does: the value changes and an `input` event fires."""
    page.locator(f'input[type="range"][name="{name}"]').fill(str(value))


def test_lab__sliders_and_mode_switch__decision_follows_as_seen(
    transactional_db: None, requires_postgres: None, asgi_server: str, browser_page: Page
) -> None:
    # Given a viewer and the demo's 12-cell fleet published as v1
    UserFactory(role=Role.VIEWER, username="vera")
    make_fleet(slug=SLUG)
    page = browser_page
    errors = ConsoleErrors(page)
    log_in(page, asgi_server, "vera")

    # When the viewer opens the lab from the fleet's page
    page.goto(f"{asgi_server}/fleets/{SLUG}/")
    page.get_by_role("link", name="Lab", exact=True).click()
    route = page.locator('[data-field="route"]')
    step = page.locator('[data-field="step-text"]')

    # Then the seed's second task in text/interactive/normal stays on the device (0.31 < 0.6)
    expect(route).to_have_text("device")
    expect(step).to_contain_text("Step 6")
    expect(page.locator('[data-field="score"]')).to_have_text("0.309")

    # When θ is pulled down below the score
    _slide(page, "threshold", 0.2)

    # Then the cloud takes it, by step 8, and the matrix's picked cell says so too
    expect(route).to_have_text("cloud")
    expect(step).to_contain_text("Step 8")
    picked = page.locator(".lab-mcell.is-picked")
    expect(picked).to_have_attribute("data-cell", "text/interactive/normal")
    expect(picked.locator('[data-field="mroute"]')).to_have_text("cloud")

    # When a 2 MB upload makes the cloud too slow for the 1 s budget
    _slide(page, "upload_bytes", 2_000_000)

    # Then the device answers by step 7, the prediction shown against the budget
    expect(route).to_have_text("device")
    expect(step).to_contain_text("Step 7")
    expect(page.locator('[data-field="latency-text"]')).to_contain_text("> budget 1,000 ms")
    _slide(page, "upload_bytes", 0)
    expect(route).to_have_text("cloud")

    # When the network turns bad (RTT 400 ms): θ is raised by 0.15, named in the trace
    _slide(page, "rtt_ms", 400)
    expect(page.locator(".lab-adjust-network")).to_contain_text("+0.15")
    _slide(page, "rtt_ms", 80)

    # When the mode is switched to device_only, then to draft_refine
    page.locator(".lab-mode", has_text="device_only").click()
    expect(route).to_have_text("device")
    expect(step).to_contain_text("Step 1")
    expect(page.locator('[data-part="score"] [data-field="score-reach"]')).to_contain_text(
        "not reached"
    )
    page.locator(".lab-mode", has_text="draft_refine").click()
    expect(route).to_have_text("draft on device, refine in cloud")

    # When the device goes offline (an interactive task cannot wait)
    page.locator('input[name="online"]').uncheck()
    expect(route).to_have_text("device")
    expect(step).to_contain_text("Step 3")
    page.locator('input[name="online"]').check()

    # When another cell is clicked in the matrix: the sensitive voice cell, device only
    page.locator('[data-pick="voice/interactive/sensitive"]').click()
    expect(page.locator('select[name="task_type"]')).to_have_value("voice")
    expect(step).to_contain_text("Step 1")
    expect(page.locator('[data-field="privacy-text"]')).to_contain_text("Kept on the device")

    # ... and forced to cloud_only: the privacy violation is shown
    page.locator(".lab-mode", has_text="cloud_only").click()
    expect(route).to_have_text("cloud")
    expect(page.locator('[data-field="privacy-text"]')).to_contain_text("Violation")

    # And the stream of the seed's tasks runs, with a running α
    expect(page.locator('[data-field="alpha"]')).to_have_text(re.compile(r"^\d+%$"))
    assert errors.take() == []


def test_lab__laptop_and_phone__trace_readable_no_sideways_scroll(
    transactional_db: None, requires_postgres: None, asgi_server: str, browser_page: Page
) -> None:
    # Given a viewer on the lab page
    UserFactory(role=Role.VIEWER, username="vera")
    make_fleet(slug=SLUG)
    page: Any = browser_page
    log_in(page, asgi_server, "vera")
    for name, size in (("lab-1366", LAPTOP), ("lab-390", PHONE)):
        # When it is shown at laptop and phone widths
        page.set_viewport_size(size)
        page.goto(f"{asgi_server}/fleets/{SLUG}/lab/")
        expect(page.locator('[data-field="route"]')).to_have_text("device")
        expect(page.locator('[data-field="stream-count"]')).not_to_have_text("0")
        page.wait_for_timeout(1500)  # a few sample tasks in flight, for the screenshot
        page.screenshot(path=str(screenshot_path(name)), full_page=True)
        page.locator(".lab-matrix-card").screenshot(path=str(screenshot_path(f"{name}-matrix")))
        _slide(page, "rtt_ms", 400)  # far down the controls: the verdict is still in view
        page.screenshot(path=str(screenshot_path(f"{name}-sliding")))

        # Then nothing makes the page scroll sideways
        assert_no_sideways_scroll(page, f"lab at {size['width']} px")


def test_lab__opens_on_what_devices_run__matrix_and_stream_say_what_they_count(
    transactional_db: None, requires_postgres: None, asgi_server: str, browser_page: Page
) -> None:
    # Given devices on v1 and a v2 published that no device runs (no draft)
    publisher: Any = UserFactory(role=Role.PUBLISHER, username="pia")
    fleet = make_fleet(slug=SLUG, actor=publisher)
    draft = services.policy_draft_create(actor=publisher, fleet=fleet)
    draft = services.policy_draft_update_cells(
        actor=publisher,
        fleet=fleet,
        revision=draft.revision,
        edits=[
            {
                "task_type": "text",
                "latency_budget": "interactive",
                "privacy_tier": "normal",
                "values": {"threshold": 0.7},
            }
        ],
    )
    services.policy_version_publish(
        actor=publisher, fleet=fleet, revision=draft.revision, note="v2"
    )
    page = browser_page
    log_in(page, asgi_server, "pia")

    # When the lab opens
    page.goto(f"{asgi_server}/fleets/{SLUG}/lab/")

    # Then it is on v1, named as what the devices run, with v1's θ 0.6
    expect(page.locator("[data-field=running]")).to_have_text(
        "Opened on v1: what devices run (stable)."
    )
    expect(page.locator('select[name="version"] option:checked')).to_have_text(
        "v1 · stable: devices run it"
    )
    expect(page.locator('[data-out="threshold"]')).to_have_text("0.60")

    # And the picked matrix cell reads the score against θ, not "θ <score>"
    why = page.locator('.lab-mcell[data-cell="text/interactive/normal"] [data-field="mwhy"]')
    expect(why).to_have_text("auto · score 0.31 < θ 0.60")

    # And the seed's five tasks are counted five however many dots have gone by
    page.wait_for_timeout(5_000)  # about seven dots
    expect(page.locator('[data-field="stream-count"]')).to_have_text("5")
    expect(page.locator('[data-field="device-ms-source"]')).to_have_text(
        "the seed's on-device latency (30 ms)"
    )

    # When the operator picks v2
    page.locator('select[name="version"]').select_option("2")

    # Then the playground is on v2 (θ 0.7), which it says no device runs
    expect(page.locator('[data-out="threshold"]')).to_have_text("0.70")
    expect(page.locator("[data-field=running]")).to_contain_text(
        "Opened on v2; devices run v1 (stable)"
    )
