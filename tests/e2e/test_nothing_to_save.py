"""The policy editor in Chromium when there is nothing to save or publish (issue 22): a value
typed again is not an edit and the panel says so; Publish is off on a draft identical to the
version it started from, and the page says why. Screenshots at 1366 and 390 px."""

from typing import Any

import pytest
from playwright.sync_api import Page, expect

from controlplane.roles import Role
from routing_policies import services
from routing_policies.models import PolicyVersion
from tests.factories import PASSWORD, UserFactory, make_fleet

from .conftest import screenshot_path

pytestmark = pytest.mark.e2e

SLUG = "e2e-voice"
CELL = "text/interactive/normal"


def test_policy_editor__same_value_saved_and_unchanged_draft__says_nothing_to_save_or_publish(
    transactional_db: None, requires_postgres: None, asgi_server: str, browser_page: Page
) -> None:
    # Given a publisher, and a fleet published as v1 with a draft just started from it
    publisher: Any = UserFactory(role=Role.PUBLISHER, username="pia")
    fleet = make_fleet(slug=SLUG, actor=publisher)
    services.policy_draft_create(actor=publisher, fleet=fleet)
    page = browser_page
    page.set_viewport_size({"width": 1366, "height": 900})
    page.goto(f"{asgi_server}/login/")
    page.get_by_label("Username").fill("pia")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.locator(".who-name")).to_have_text("pia")

    # When they open the draft
    page.goto(f"{asgi_server}/fleets/{SLUG}/")

    # Then Publish is off, and the page says why
    publish = page.get_by_role("button", name="Publish as v2")
    expect(publish).to_be_disabled()
    expect(page.locator("[data-draft-changes]")).to_contain_text(
        "Nothing to publish: this draft is identical to v1, the version it started from."
    )

    # When they select a cell and type its θ again, unchanged, and save
    cell = page.locator(f'td[data-cell="{CELL}"]')
    cell.locator(".cell-hit").click()
    expect(page.locator("#field-threshold")).to_have_value("0.6")
    page.locator("#field-threshold").fill("0.6")
    page.get_by_role("button", name="Save changes").click()

    # Then the panel says nothing changed and why, in the page's words, and nothing is sent
    summary = page.locator("[data-selection-summary]")
    expect(summary).to_contain_text(
        f"Nothing changed: every field still shows the value {CELL} already has."
    )
    expect(summary).not_to_contain_text("values")
    expect(page.locator(".chip-draft")).to_have_text("Draft · revision 1")
    for width in (1366, 390):
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=str(screenshot_path(f"nothing-to-save-{width}")), full_page=True)
    page.set_viewport_size({"width": 1366, "height": 900})

    # When they change θ for real and save
    page.locator("#field-threshold").fill("0.72")
    page.get_by_role("button", name="Save changes").click()

    # Then the draft moves on, and Publish is on again with the change counted
    expect(page.locator(".chip-draft")).to_have_text("Draft · revision 2")
    expect(page.get_by_role("button", name="Publish as v2")).to_be_enabled()
    expect(page.locator("[data-draft-changes]")).to_contain_text("1 cell changed since v1")
    expect(page.locator("[data-draft-changes]")).not_to_contain_text("Nothing to publish")
    assert PolicyVersion.objects.filter(fleet=fleet, published_at__isnull=False).count() == 1
