"""The policy editor in a real Chromium against a real ASGI server and PostgreSQL."""

from typing import Any

import pytest
from playwright.sync_api import Page, expect

from routing_policies import selectors, services
from routing_policies.roles import Role
from tests.factories import PASSWORD, UserFactory, make_fleet

from .conftest import screenshot_path

pytestmark = pytest.mark.e2e

SLUG = "e2e-voice"
CELL = "text/interactive/normal"


def test_policy_editor__publisher_edits_theta_and_publishes__diff_highlights_the_change(
    transactional_db: None, requires_postgres: None, asgi_server: str, browser_page: Page
) -> None:
    # Given a publisher, and a fleet published as v1 with a draft open
    publisher: Any = UserFactory(role=Role.PUBLISHER, username="pia")
    fleet = make_fleet(slug=SLUG, actor=publisher)
    services.policy_draft_create(actor=publisher, fleet=fleet)
    page = browser_page

    # When the publisher logs in
    page.goto(f"{asgi_server}/login/")
    page.get_by_label("Username").fill("pia")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.locator(".who-name")).to_have_text("pia")
    expect(page.locator(".role-chip")).to_have_text("publisher")

    # ... opens the fleet's grid and selects one cell, whose values fill the edit panel
    page.goto(f"{asgi_server}/fleets/{SLUG}/")
    cell = page.locator(f'td[data-cell="{CELL}"]')
    expect(cell.locator(".theta")).to_have_text("0.6")
    cell.locator(".cell-hit").click()
    expect(cell).to_have_class("cell mode-auto selected")
    expect(page.locator("[data-selection-summary]")).to_contain_text(f"Editing {CELL}")
    expect(page.locator("#field-threshold")).to_have_value("0.6")

    # ... changes θ and saves
    page.locator("#field-threshold").fill("0.72")
    page.get_by_role("button", name="Save changes").click()

    # Then the grid shows the new value
    expect(page.locator(".flash")).to_contain_text("Saved Threshold θ on text/interactive/normal")
    expect(page.locator(f'td[data-cell="{CELL}"] .theta')).to_have_text("0.72")
    expect(page.locator(".chip-draft")).to_have_text("Draft · revision 2")

    # When they publish the draft with a note
    page.get_by_label("Publish this draft").fill("Raise θ for interactive text")
    page.get_by_role("button", name="Publish as v2").click()

    # Then v2 is shown with its note
    expect(page.locator(".chip-published")).to_have_text("v2 · published")
    expect(page.locator(".version-note")).to_contain_text("Raise θ for interactive text")

    # When they open the diff between v1 and v2
    page.get_by_role("link", name="Diff").click()
    expect(page.locator(".page-title")).to_contain_text("From v1 to v2")

    # Then the changed cell is outlined, and its θ shows the old and the new value
    changed = page.locator(f'td[data-cell="{CELL}"]')
    expect(changed).to_have_class("cell mode-auto changed")
    expect(changed.locator(".theta.hl")).to_have_text("0.72")
    expect(changed.locator(".cell-changes")).to_contain_text("Threshold θ 0.6 → 0.72")
    expect(page.locator("td.cell.changed")).to_have_count(1)
    row = page.locator(".diff-table tbody tr", has_text="Threshold θ")
    expect(row.locator("th")).to_have_text(CELL)
    expect(row.locator("td.before del")).to_have_text("0.6")
    expect(row.locator("td.after ins")).to_have_text("0.72")
    page.screenshot(path=str(screenshot_path("policy-editor-diff")), full_page=True)

    # And the server really stored v2 with the new θ
    latest = selectors.latest_published(fleet=fleet)
    assert latest is not None
    assert latest.number == 2
    assert (
        selectors.version_table(version=latest)[("text", "interactive", "normal")]["threshold"]
        == 0.72
    )
