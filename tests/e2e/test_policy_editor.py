"""The policy editor in a real Chromium against a real ASGI server and PostgreSQL."""

import re
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from controlplane.roles import Role
from routing_policies import selectors, services
from tests.factories import PASSWORD, UserFactory, draft_changed, make_fleet

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


def _log_in(page: Page, server: str, username: str) -> None:
    page.goto(f"{server}/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.locator(".who-name")).to_have_text(username)


def test_policy_editor__refused_and_accepted_saves__selection_kept_and_address_stays(
    transactional_db: None, requires_postgres: None, asgi_server: str, browser_page: Page
) -> None:
    # Given an editor on a fleet's draft
    editor: Any = UserFactory(role=Role.EDITOR, username="eddie")
    fleet = make_fleet(slug=SLUG, actor=editor)
    services.policy_draft_create(actor=editor, fleet=fleet)
    page = browser_page
    _log_in(page, asgi_server, "eddie")
    page.goto(f"{asgi_server}/fleets/{SLUG}/")
    sensitive = page.locator('td[data-cell="voice/interactive/sensitive"]')

    # When they make a sensitive cell without uploads cloud_only, which the server refuses
    sensitive.locator(".cell-hit").click()
    page.locator("#field-mode").select_option("cloud_only")
    page.get_by_role("button", name="Save changes").click()

    # Then the refusal is shown, the address bar still names the fleet page (not /draft/cells/),
    # and the cell still reads as selected (checked, outlined) with Save ready for a retry
    expect(page.locator(".alert-error")).to_contain_text("nothing was saved")
    assert "/draft/cells/" not in page.url
    assert page.url.endswith(f"/fleets/{SLUG}/?cell=voice/interactive/sensitive")
    expect(sensitive).to_have_class(re.compile(r"\bselected\b"))
    expect(sensitive).to_have_class(re.compile(r"\bhas-error\b"))
    expect(sensitive.locator(".cell-select")).to_be_checked()
    expect(sensitive).to_have_css("box-shadow", re.compile(r"rgb\(36, 86, 199\)"))
    expect(page.locator("[data-selection-summary]")).to_contain_text(
        "Nothing was saved: fix the fields marked below"
    )
    expect(page.get_by_role("button", name="Save changes")).to_be_enabled()
    page.screenshot(path=str(screenshot_path("policy-editor-refused-save")), full_page=True)

    # When they reload, the grid comes back (no 405 from a POST-only address)
    page.reload()
    expect(page.locator(".chip-draft")).to_have_text("Draft · revision 1")

    # When they instead save a valid θ on text/interactive/normal
    cell = page.locator(f'td[data-cell="{CELL}"]')
    if sensitive.locator(".cell-select").is_checked():
        sensitive.locator(".cell-hit").click()
    cell.locator(".cell-hit").click()
    page.locator("#field-threshold").fill("0.7")
    page.get_by_role("button", name="Save changes").click()

    # Then the cell is still selected, showing its new value, marked as changed since v1, and
    # Publish's summary counts it with a link to the diff
    expect(page.locator(".flash")).to_contain_text("Saved Threshold θ on text/interactive/normal")
    expect(cell.locator(".cell-select")).to_be_checked()
    expect(page.locator("#field-threshold")).to_have_value("0.7")
    expect(page.locator("[data-selection-summary]")).to_contain_text(f"Editing {CELL}")
    expect(cell.locator(".mark-changed")).to_have_text("changed")
    expect(page.locator("[data-marks-legend]")).to_contain_text("differs from v1")
    expect(page.locator("td.cell .mark-changed")).to_have_count(1)
    page.get_by_role("link", name="1 cell changed since v1").click()
    expect(page.locator(".page-title")).to_contain_text("From v1 to draft")


def test_policy_editor__not_a_number__refused_in_the_browser_naming_the_field(
    transactional_db: None, requires_postgres: None, asgi_server: str, browser_page: Page
) -> None:
    # Given an editor with a cell selected
    editor: Any = UserFactory(role=Role.EDITOR, username="eddie")
    fleet = make_fleet(slug=SLUG, actor=editor)
    services.policy_draft_create(actor=editor, fleet=fleet)
    page = browser_page
    _log_in(page, asgi_server, "eddie")
    page.goto(f"{asgi_server}/fleets/{SLUG}/")
    page.locator(f'td[data-cell="{CELL}"] .cell-hit').click()

    # When they type "abc" as θ and 12.5 as the latency budget, and save
    page.locator("#field-threshold").fill("abc")
    page.locator("#field-latency_budget_ms").fill("12.5")
    page.get_by_role("button", name="Save changes").click()

    # Then the browser refuses before sending, naming each field, and the draft is untouched
    expect(page.locator("#field-threshold-client-error")).to_have_text(
        "Threshold θ: must be a number such as 0.6; got 'abc'"
    )
    expect(page.locator("#field-latency_budget_ms-client-error")).to_have_text(
        "Latency budget: must be a whole number; got 12.5"
    )
    expect(page.locator("#field-threshold")).to_be_focused()
    assert page.url.endswith(f"/fleets/{SLUG}/")
    draft = selectors.draft_get(fleet=fleet)
    assert draft is not None
    assert draft.revision == 1

    # When θ is out of range, the range is named; when fixed, the messages go and it saves
    page.locator("#field-latency_budget_ms").fill("")
    page.locator("#field-threshold").fill("1.5")
    page.get_by_role("button", name="Save changes").click()
    expect(page.locator("#field-threshold-client-error")).to_have_text(
        "Threshold θ: must be in 0 – 1; got 1.5"
    )
    page.locator("#field-threshold").fill("0.55")
    expect(page.locator("[data-client-error]")).to_have_count(0)
    page.get_by_role("button", name="Save changes").click()
    expect(page.locator(".chip-draft")).to_have_text("Draft · revision 2")


def test_policy_editor__pinned_mode_cells__theta_marked_not_used(
    transactional_db: None, requires_postgres: None, asgi_server: str, browser_page: Page
) -> None:
    # Given an editor on the draft (voice/interactive/sensitive is device_only)
    editor: Any = UserFactory(role=Role.EDITOR, username="eddie")
    fleet = make_fleet(slug=SLUG, actor=editor)
    services.policy_draft_create(actor=editor, fleet=fleet)
    page = browser_page
    _log_in(page, asgi_server, "eddie")
    page.goto(f"{asgi_server}/fleets/{SLUG}/")
    pinned = page.locator('td[data-cell="voice/interactive/sensitive"]')

    # When they look at the cell and select it
    expect(pinned.locator(".theta-na")).to_contain_text("not used")
    expect(pinned.locator(".theta")).to_have_count(0)
    pinned.locator(".cell-hit").click()

    # Then the θ field says it changes nothing there; switching the mode to auto drops the note
    note = page.locator("[data-theta-na]")
    expect(note).to_be_visible()
    expect(note).to_contain_text("Not used: device_only cells route without a score")
    page.locator("#field-mode").select_option("auto")
    expect(note).to_be_hidden()


def test_policy_editor__publish_without_note__refused_then_page_says_what_devices_run(
    transactional_db: None, requires_postgres: None, asgi_server: str, browser_page: Page
) -> None:
    # Given a publisher on a draft (one θ changed) of a fleet whose devices run v1
    publisher: Any = UserFactory(role=Role.PUBLISHER, username="pia")
    fleet = make_fleet(slug=SLUG, actor=publisher)
    draft_changed(fleet=fleet, actor=publisher)
    page = browser_page
    _log_in(page, asgi_server, "pia")
    page.goto(f"{asgi_server}/fleets/{SLUG}/")

    # When they press Publish with a blank (then whitespace-only) note
    publish = page.get_by_role("button", name="Publish as v2")
    publish.click()
    note = page.locator("#publish-note")
    assert note.evaluate("el => el.validity.valueMissing") is True
    note.fill("   ")
    publish.click()
    assert note.evaluate("el => el.validity.patternMismatch") is True

    # Then nothing was published
    expect(page.locator(".chip-draft")).to_be_visible()
    assert selectors.latest_published(fleet=fleet).number == 1  # type: ignore[union-attr]

    # When they publish with a note
    note.fill("Nudge θ on voice")
    publish.click()

    # Then the page says devices still run v1, v2 runs on no device, and how to ship it
    expect(page.locator(".flash")).to_contain_text("Devices still run v1")
    expect(page.locator("[data-version-running]")).to_have_text("runs on no device")
    expect(page.locator("[data-runs]")).to_contain_text("Devices run v1 (stable): every device.")
    expect(page.locator("[data-next-step]")).to_contain_text(
        "v2 is published but runs on no device yet."
    )
    page.get_by_role("link", name="Start a rollout of v2").click()
    expect(page).to_have_url(re.compile(rf"/fleets/{SLUG}/rollout/$"))
