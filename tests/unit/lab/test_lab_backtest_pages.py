"""The backtests page, `manage.py backtest`, and the lab's panels on the draft and rollout
pages (routing_policies, through extensions)."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from lab.backtests.models import Backtest, BacktestStatus
from lab.backtests.services import backtest_run
from routing_policies.policies.sdk_cells import table_cells
from routing_policies.reviews.services import change_request_open
from routing_policies.selectors import version_table
from routing_policies.services import (
    policy_draft_create,
    policy_draft_update_cells,
    policy_version_publish,
    rollout_start,
)
from tests.factories import decided_events

pytestmark = pytest.mark.django_db

PAGE = "/fleets/fleet-a/lab/backtests/"


@pytest.fixture
def recorded(fleet: Any) -> Any:
    decided_events(fleet, table_cells(version_table(version=fleet.versions.get())), count=300)
    return fleet


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _draft(fleet: Any, publisher: Any) -> Any:
    draft = policy_draft_create(actor=publisher, fleet=fleet)
    policy_draft_update_cells(
        actor=publisher,
        fleet=fleet,
        revision=draft.revision,
        edits=[
            {
                "task_type": "text",
                "latency_budget": "interactive",
                "privacy_tier": "normal",
                "values": {"threshold": 0.2},
            }
        ],
    )
    draft.refresh_from_db()
    return draft


def test_backtests_page__editor_starts__redirected_to_its_results(
    recorded: Any, editor: Any
) -> None:
    # Given an editor on the page / When they run a backtest of v1
    client = _client(editor)
    response = client.post(f"{PAGE}start/", {"version": "1", "hours": "24"})
    backtest = Backtest.objects.get()
    backtest_run(backtest_id=backtest.pk)  # (the worker's part; the unit test's on_commit waits)

    # Then they land on its results, with the self-check and every cell
    assert response.status_code == 302
    assert response["Location"].endswith(f"?id={backtest.pk}")
    page = client.get(response["Location"]).content.decode()
    assert 'data-status="done"' in page
    assert 'data-field="agreement">100.00%' in page
    assert page.count("<tr data-cell=") == 12


def test_backtests_page__bad_hours__400_on_the_page_nothing_started(
    recorded: Any, editor: Any
) -> None:
    response = _client(editor).post(f"{PAGE}start/", {"version": "1", "hours": "0"})

    assert response.status_code == 400
    assert "hours" in response.content.decode()
    assert not Backtest.objects.exists()


def test_backtests_page__viewer__reads_but_cannot_start(recorded: Any, viewer: Any) -> None:
    client = _client(viewer)

    assert client.get(PAGE).status_code == 200
    assert "Run backtest" not in client.get(PAGE).content.decode()
    assert client.post(f"{PAGE}start/", {"version": "1"}).status_code == 403
    assert not Backtest.objects.exists()


def test_backtests_page__queued__progress_bar_polling_the_api(recorded: Any, editor: Any) -> None:
    _client(editor).post(f"{PAGE}start/", {"version": "1"})

    page = _client(editor).get(PAGE).content.decode()

    assert 'data-status="queued"' in page
    assert 'role="progressbar"' in page
    assert f"/api/v1/fleets/fleet-a/lab/backtests/{Backtest.objects.get().pk}" in page


def test_draft_page__backtest_of_this_revision__headline_beside_publish(
    recorded: Any, publisher: Any
) -> None:
    # Given a draft and no backtest of it: the page offers one
    draft = _draft(recorded, publisher)
    client = _client(publisher)
    before = client.get("/fleets/fleet-a/").content.decode()
    assert f"No backtest of revision {draft.revision} yet" in before

    # When the draft at this revision is backtested
    client.post(f"{PAGE}start/", {"version": "draft", "revision": str(draft.revision)})
    backtest_run(backtest_id=Backtest.objects.get().pk)

    # Then the headline shows beside Publish: α, cloud P95 and cost, stable → draft
    page = client.get("/fleets/fleet-a/").content.decode()
    assert 'id="backtest-headline"' in page
    assert 'data-ready="true"' in page
    assert "α " in page
    assert "cloud P95" in page
    assert "cost " in page


def test_rollout_page__candidate_backtested__prediction_beside_observed(
    recorded: Any, publisher: Any
) -> None:
    # Given a draft backtested, then published as v2 and rolled out
    draft = _draft(recorded, publisher)
    client = _client(publisher)
    client.post(f"{PAGE}start/", {"version": "draft", "revision": str(draft.revision)})
    backtest_run(backtest_id=Backtest.objects.get().pk)
    policy_version_publish(actor=publisher, fleet=recorded, revision=draft.revision, note="θ")
    rollout_start(actor=publisher, fleet=recorded, version=2)

    # Then the rollout page shows the draft's backtest as the prediction for v2
    page = client.get("/fleets/fleet-a/rollout/").content.decode()
    assert "Backtest prediction for v2" in page
    assert "draft r" in page
    assert "α (device share)" in page


def test_manage_backtest__version__prints_headline_and_self_check(recorded: Any) -> None:
    out = StringIO()

    call_command("backtest", "fleet-a", "--subject", "1", stdout=out)

    text = out.getvalue()
    assert "v1 over 24 h, 300 events" in text
    assert "reproduces 100.00%" in text
    assert Backtest.objects.get().status == BacktestStatus.DONE


def test_change_request_page__draft_backtested__headline_in_the_review(
    recorded: Any, publisher: Any
) -> None:
    # Given a draft under review (a publish change request) and no backtest of it yet
    draft = _draft(recorded, publisher)
    request = change_request_open(actor=publisher, fleet=recorded, kind="publish", note="θ down")
    client = _client(publisher)
    url = f"/fleets/fleet-a/reviews/{request.pk}/"
    before = client.get(url).content.decode()
    assert f"No backtest of revision {draft.revision} yet" in before

    # When the draft at this revision is backtested
    client.post(f"{PAGE}start/", {"version": "draft", "revision": str(draft.revision)})
    backtest_run(backtest_id=Backtest.objects.get().pk)

    # Then the reviewer sees the lab's headline beside the diff: stable → draft
    page = client.get(url).content.decode()
    assert 'id="backtest-headline"' in page
    assert 'data-ready="true"' in page
    assert "cloud P95" in page
