"""A rollout scoped to a segment from the rollout page (issue 26): the publisher picks a segment
in the start form (each offered with how many enrolled devices it matches; one that matches
none cannot be picked), starts, and the page shows the scope with its rule; at 100% the
complete button says it reaches the whole fleet. Read at 1366 and 390 px
(test-artifacts/rollout-scoped-*.png)."""

from typing import Any

import pytest
from django.db import transaction
from playwright.sync_api import Page, expect

from controlplane.roles import Role
from routing_policies import services
from routing_policies.models import Rollout
from tests.factories import NPU_RULE as NPU
from tests.factories import UserFactory, draft_changed, make_fleet, npu_and_cpu_fleet

from .conftest import screenshot_path
from .pages import LAPTOP, PHONE, assert_no_sideways_scroll, log_in

pytestmark = pytest.mark.e2e

SLUG = "e2e-scoped"


def _fleet() -> None:
    """v1 stable, v2 published; 3 NPU phones and 5 CPU ones; segments `npu` and `cars` (no
    device matches it)."""
    publisher: Any = UserFactory(role=Role.PUBLISHER, username="rhea")
    fleet = make_fleet(slug=SLUG, actor=publisher)
    draft = draft_changed(fleet=fleet, actor=publisher)
    services.policy_version_publish(
        actor=publisher, fleet=fleet, revision=draft.revision, note="voice θ nudged"
    )
    with transaction.atomic():
        key = services.fleet_enrollment_key_rotate(actor=None, fleet=fleet)
    npu_and_cpu_fleet(fleet=fleet, fleet_key=key, actor=publisher, npu=3, total=8)


def test_rollout_page__start_for_a_segment__scope_shown_and_complete_says_whole_fleet(
    asgi_server: str, transactional_db: None, requires_postgres: None, browser_page: Page
) -> None:
    # Given the publisher on the rollout page
    _fleet()
    page = browser_page
    log_in(page, asgi_server, "rhea")
    page.set_viewport_size(LAPTOP)
    page.goto(f"{asgi_server}/fleets/{SLUG}/rollout/")
    scope = page.locator("select[name=segment]")

    # Then the start form offers the whole fleet and each segment with its device count; a
    # segment that matches nobody cannot be picked
    expect(scope.locator("option")).to_have_text(
        ["Whole fleet", "segment cars (0 devices)", "segment npu (3 devices)"]
    )
    expect(scope.locator("option[value=cars]")).to_be_disabled()
    page.screenshot(path=str(screenshot_path("rollout-scoped-start-1366")), full_page=True)

    # When they start v2 for segment npu
    scope.select_option("npu")
    page.get_by_role("button", name="Start rollout at 5%").click()

    # Then the rollout is scoped and the page says so, with the rule it keeps
    line = page.locator('[data-field="scope-line"]')
    expect(line).to_be_visible()
    expect(line.locator('[data-field="scope"]')).to_have_text("npu")
    expect(line.locator('[data-field="scope-rule"]')).to_have_text("accelerator = npu")
    expect(page.get_by_text("at 5% of segment npu")).to_be_visible()
    rollout = Rollout.objects.get()
    assert (rollout.segment_name, rollout.segment_rule) == ("npu", NPU)

    # When it is at 100%: the complete button says it reaches the whole fleet
    page.get_by_role("button", name="Advance to 25%").click()
    page.get_by_role("button", name="Advance to 100%").click()
    expect(
        page.get_by_role("button", name="Complete: make v2 stable for the whole fleet")
    ).to_be_visible()

    for size, name in ((LAPTOP, "1366"), (PHONE, "390")):
        page.set_viewport_size(size)
        page.goto(f"{asgi_server}/fleets/{SLUG}/rollout/")
        expect(line).to_be_visible()
        assert_no_sideways_scroll(page, f"rollout page at {name} px")
        page.screenshot(path=str(screenshot_path(f"rollout-scoped-{name}")), full_page=True)

    # When they complete it (accepting the confirmation): v2 is the whole fleet's stable
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Complete: make v2 stable for the whole fleet").click()
    expect(page.locator('[data-field="state"]')).to_have_text("completed")
    expect(line).to_be_hidden()  # the scope is the open rollout's, no longer
    rollout.refresh_from_db()
    assert rollout.state == "completed"
