"""The backtest in a real Chromium, on a real ASGI server with a real Celery worker.

An editor replays the draft over the last hours of recorded events: the page shows the run's
progress, then the results with their self-check; the draft page shows the headline beside
Publish; after the draft is published and rolled out, the rollout page shows the backtest's
prediction for the candidate beside its cohort's observed figures. Screenshots at 1366 and 390
px are kept in test-artifacts/.
"""

from typing import Any

import pytest
from django.db import transaction
from playwright.sync_api import Page, expect

from controlplane.roles import Role
from routing_policies.policies.sdk_cells import table_cells
from routing_policies.selectors import version_table
from routing_policies.services import (
    policy_draft_create,
    policy_draft_update_cells,
    policy_version_publish,
    rollout_start,
)
from tests.factories import UserFactory, decided_events, make_fleet
from tests.integration.test_telemetry_durability import Worker

from .conftest import screenshot_path
from .pages import log_in

pytestmark = pytest.mark.e2e

SLUG = "e2e-lab"
LIVE_TIMEOUT_MS = 120_000  # an outer bound: each check passes as soon as the page shows it


def _shots(page: Page, name: str) -> None:
    for width in (1366, 390):
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=str(screenshot_path(f"{name}-{width}")), full_page=True)
    page.set_viewport_size({"width": 1366, "height": 900})


def test_backtest_page__editor_replays_the_draft__progress_results_headline_prediction(
    asgi_server: str,
    transactional_db: None,
    requires_postgres: None,
    worker: Worker,
    browser_page: Page,
) -> None:
    page = browser_page
    # Given a fleet on v1 with 3,000 recorded events, and a draft that lowers text's θ
    publisher: Any = UserFactory(role=Role.PUBLISHER, username="pia")
    UserFactory(role=Role.EDITOR, username="eddie")
    fleet = make_fleet(slug=SLUG, actor=publisher)
    decided_events(fleet, table_cells(version_table(version=fleet.versions.get())), count=3000)
    with transaction.atomic():
        draft = policy_draft_create(actor=publisher, fleet=fleet)
        policy_draft_update_cells(
            actor=publisher,
            fleet=fleet,
            revision=draft.revision,
            edits=[
                {
                    "task_type": "text",
                    "latency_budget": budget,
                    "privacy_tier": "normal",
                    "values": {"threshold": 0.35},
                }
                for budget in ("interactive", "background")
            ],
        )
    page.set_viewport_size({"width": 1366, "height": 900})
    log_in(page, asgi_server, "eddie")

    # When the editor runs a backtest of the draft from the backtests page
    page.goto(f"{asgi_server}/fleets/{SLUG}/lab/backtests/")
    page.get_by_role("button", name="Run backtest").click()

    # Then the worker replays it and the page shows the results with the self-check
    result = page.locator("#backtest-result")
    expect(result).to_have_attribute("data-status", "done", timeout=LIVE_TIMEOUT_MS)
    expect(page.locator("[data-field=agreement]")).to_have_text("100.00%")
    expect(page.locator("#backtest-cells tr[data-cell='text/interactive/normal']")).to_contain_text(
        "changed"
    )
    expect(page.locator("[data-field=privacy]")).to_contain_text("No cell")
    _shots(page, "backtest-results")

    # And the draft page shows the headline beside Publish
    page.goto(f"{asgi_server}/fleets/{SLUG}/")
    headline = page.locator("#backtest-headline")
    expect(headline).to_have_attribute("data-ready", "true")
    expect(headline.locator("[data-field=backtest-text]")).to_contain_text("α ")
    expect(headline.locator("[data-field=backtest-text]")).to_contain_text("cloud P95")
    _shots(page, "draft-backtest-headline")

    # When the draft is published and rolled out
    with transaction.atomic():
        draft.refresh_from_db()
        policy_version_publish(actor=publisher, fleet=fleet, revision=draft.revision, note="θ")
        rollout_start(actor=publisher, fleet=fleet, version=2)

    # Then the rollout page shows the backtest's prediction for v2 beside its cohort's figures
    page.goto(f"{asgi_server}/fleets/{SLUG}/rollout/")
    prediction = page.locator("#rollout-prediction")
    expect(prediction).to_contain_text("Backtest prediction for v2")
    expect(prediction.locator("tbody tr").first).to_contain_text("α (device share)")
    _shots(page, "rollout-prediction")
