"""The backtest (docs/lab.md): its figures equal an independent computation on generated events
whose decisions are known; replaying the version that ran reproduces its routing exactly;
drafts that would send sensitive data off the device are flagged."""

from __future__ import annotations

import math
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from edge_sdk.decision import Cell
from lab.backtests.models import Backtest, BacktestStatus
from lab.backtests.services import backtest_run, backtest_start
from lab.replay import EventFilters, NudgeHistory, recorded_events
from routing_policies.models import AuditEntry, PolicyCell
from routing_policies.policies.sdk_cells import table_cells
from routing_policies.pricing import CloudPrice
from routing_policies.selectors import version_table
from routing_policies.services import policy_draft_create, policy_draft_update_cells
from tests.factories import decided_events
from tests.lab_events import event_key, replayed_figures, stored_route

pytestmark = pytest.mark.django_db

TEXT = ("text", "interactive", "normal")
SENSITIVE = ("voice", "interactive", "sensitive")


def _cells(fleet: Any, number: int = 1) -> dict[tuple[str, str, str], Cell]:
    return table_cells(version_table(version=fleet.versions.get(number=number)))


def _run(actor: Any, fleet: Any, **data: Any) -> dict[str, Any]:
    backtest, created = backtest_start(actor=actor, fleet=fleet, **data)
    assert created
    done = backtest_run(backtest_id=backtest.pk)
    assert done is not None
    assert done.status == BacktestStatus.DONE, done.error
    assert done.result is not None
    return done.result


def _draft_with(fleet: Any, publisher: Any, key: tuple[str, str, str], **values: Any) -> Any:
    draft = policy_draft_create(actor=publisher, fleet=fleet)
    policy_draft_update_cells(
        actor=publisher,
        fleet=fleet,
        revision=draft.revision,
        edits=[
            {
                "task_type": key[0],
                "latency_budget": key[1],
                "privacy_tier": key[2],
                "values": values,
            }
        ],
    )
    draft.refresh_from_db()
    return draft


def test_recorded_events__stored_rows__streamed_in_batches_with_their_inputs(
    fleet: Any,
) -> None:
    # Given 25 stored events
    stored = decided_events(fleet, _cells(fleet), count=25, pressure=0.1)
    now = datetime.now(UTC)

    # When they are read in batches of 10
    batches = list(
        recorded_events(fleet_id=fleet.pk, start=now - timedelta(days=1), end=now, batch_size=10)
    )

    # Then every event comes once, in batches of at most 10, with what was recorded
    assert [len(batch) for batch in batches] == [10, 10, 5]
    by_route = Counter(event.route for batch in batches for event in batch)
    assert by_route == Counter(event.route for event in stored)
    first = batches[0][0]
    assert first.replayable
    assert first.device.cloud_pressure == 0.1


def test_recorded_events__cell_and_cohort_filters__only_those_events(fleet: Any) -> None:
    # Given events in every cell, of two cohorts
    decided_events(fleet, _cells(fleet), count=48)
    decided_events(fleet, _cells(fleet), count=24, seed=2, cohort="candidate")
    now = datetime.now(UTC)

    # When one cell of the candidate cohort is asked for
    events = [
        event
        for batch in recorded_events(
            fleet_id=fleet.pk,
            start=now - timedelta(days=1),
            end=now,
            filters=EventFilters(cohort="candidate", cells=[TEXT]),
        )
        for event in batch
    ]

    # Then only those come
    assert len(events) == 2
    assert {(event.cell, event.cohort) for event in events} == {(TEXT, "candidate")}


def test_backtest__running_version_replayed__reproduces_its_routing_exactly(
    fleet: Any, publisher: Any
) -> None:
    # Given 600 events decided by v1 (the stable version)
    stored = decided_events(fleet, _cells(fleet), count=600)

    # When v1 itself is backtested
    result = _run(publisher, fleet, version=1)

    # Then every decision that was not a fallback or cache hit is reproduced
    check = result["self_check"]
    clean = [e for e in stored if not e.cache_hit and e.fallback == "none"]
    assert (check["eligible"], check["agree"], check["agreement"]) == (len(clean), len(clean), 1.0)
    assert check["mismatches"] == []
    # and the replayed routes are what happened, cell by cell
    overall = result["overall"]
    assert overall["subject"]["routes"] == overall["observed"]["routes"]
    assert overall["subject"]["alpha"] == overall["observed"]["alpha"]
    for cell in result["cells"]:
        assert cell["subject"]["routes"] == cell["observed"]["routes"], cell["label"]


def test_backtest__draft__figures_equal_an_independent_computation(
    fleet: Any, publisher: Any
) -> None:
    # Given 900 events decided by v1, and a draft with a lower θ in text/interactive/normal
    # and draft_refine in text/background/normal
    stored = decided_events(fleet, _cells(fleet), count=900)
    draft = _draft_with(fleet, publisher, TEXT, threshold=0.2)
    policy_draft_update_cells(
        actor=publisher,
        fleet=fleet,
        revision=draft.revision,
        edits=[
            {
                "task_type": "text",
                "latency_budget": "background",
                "privacy_tier": "normal",
                "values": {"mode": "draft_refine"},
            }
        ],
    )
    draft.refresh_from_db()
    cells = table_cells(version_table(version=draft))

    # When the draft is backtested
    result = _run(publisher, fleet, version="draft", revision=draft.revision)

    # Then α, cloud and draft-refine shares, calls, tokens and cost are what an independent
    # loop over the same events gives
    expected = replayed_figures(cells, stored)
    routes, calls, tokens = expected["routes"], expected["calls"], expected["tokens"]
    subject = result["overall"]["subject"]
    assert subject["routes"] == routes
    assert subject["alpha"] == pytest.approx(routes["device"] / len(stored))
    assert subject["cloud_share"] == pytest.approx(routes["cloud"] / len(stored))
    assert subject["draft_refine_share"] == pytest.approx(routes["draft_refine"] / len(stored))
    assert (subject["cloud_calls"], subject["cloud_tokens"]) == (calls, tokens)
    price = CloudPrice.of_fleet(fleet)
    assert subject["cost"] == pytest.approx(price.cost(tokens=tokens, calls=calls))
    # and its cost report: per day at the window's rate, against all-cloud (every event a
    # call with its tokens) and against the stable version replayed on the same events
    stable = replayed_figures(_cells(fleet), stored)
    stable_calls, stable_tokens = stable["calls"], stable["tokens"]
    stable_cost = price.cost(tokens=stable_tokens, calls=stable_calls)
    all_cloud = price.cost(tokens=sum(e.tokens for e in stored), calls=len(stored))
    report = result["cost"]["subject"]
    assert report["per_day"] == pytest.approx(subject["cost"] / report["hours"] * 24)
    assert report["saving_vs_all_cloud"]["amount"] == pytest.approx(all_cloud - subject["cost"])
    assert report["saving_vs_stable"]["amount"] == pytest.approx(stable_cost - subject["cost"])
    assert result["cost"]["stable"]["saving_vs_stable"] is None
    # and the changed cells are marked, the draft moves more text tasks to the cloud
    changed = {cell["label"] for cell in result["cells"] if cell["changed"]}
    assert changed == {"text/interactive/normal", "text/background/normal"}
    text = next(cell for cell in result["cells"] if cell["label"] == "text/interactive/normal")
    assert text["subject"]["alpha"] < text["stable"]["alpha"]
    # and the headline compares the stable version with the draft
    assert result["headline"]["alpha"] == [
        result["overall"]["stable"]["alpha"],
        subject["alpha"],
    ]


def test_backtest__draft_with_a_shadow_refine_rate__its_expected_refines_priced(
    fleet: Any, publisher: Any
) -> None:
    # Given 600 events decided by v1, and a draft whose text/interactive/normal cell also
    # refines 5% of its device answers in the background
    stored = decided_events(fleet, _cells(fleet), count=600)
    draft = _draft_with(fleet, publisher, TEXT, shadow_refine_rate=0.05)

    # When the draft is backtested
    result = _run(publisher, fleet, version="draft", revision=draft.revision)

    # Then the draft's cost adds 5% of that cell's device runs as cloud calls with 5% of their
    # tokens; the stable version (no shadow refines) costs what its routes cost
    cells = _cells(fleet)
    device_runs = [
        e
        for e in stored
        if event_key(e) == TEXT and not e.cache_hit and stored_route(cells[TEXT], e) == "device"
    ]
    price = CloudPrice.of_fleet(fleet)
    subject, stable = result["overall"]["subject"], result["overall"]["stable"]
    extra = price.cost(
        tokens=0.05 * sum(e.tokens for e in device_runs), calls=0.05 * len(device_runs)
    )
    assert device_runs
    assert subject["shadow_refines"] == pytest.approx(0.05 * len(device_runs))
    assert stable["shadow_refines"] == 0
    assert subject["cost"] == pytest.approx(stable["cost"] + extra)
    text = next(cell for cell in result["cells"] if cell["label"] == "text/interactive/normal")
    assert text["subject"]["shadow_refines"] == pytest.approx(0.05 * len(device_runs))
    # and that cell is marked changed (its decision is not: only its shadow refines' rate)
    assert {cell["label"] for cell in result["cells"] if cell["changed"]} == {
        "text/interactive/normal"
    }


def test_backtest__device_latency__predicted_from_the_cells_own_observations(
    fleet: Any, publisher: Any
) -> None:
    # Given events decided by v1
    stored = decided_events(fleet, _cells(fleet), count=900)

    # When v1 is backtested
    result = _run(publisher, fleet, version=1)

    # Then the predicted device P50 is the observed one within the sketch's accuracy (1%)
    observed = sorted(
        e.latency_ms
        for e in stored
        if e.route == "device" and not e.cache_hit and e.fallback == "none"
    )
    median = observed[len(observed) // 2]
    predicted = result["overall"]["subject"]["latency_ms"]["device"]["p50"]
    assert predicted == pytest.approx(median, rel=0.03)
    # and the self-check states the error of every latency figure it could measure
    errors = result["self_check"]["latency"]
    assert errors["device"]["p50"]["error"] < 0.03
    assert result["self_check"]["latency_error_max"] < 0.25


def test_backtest__draft_sends_sensitive_data_to_cloud__flagged_with_violations(
    fleet: Any, publisher: Any
) -> None:
    # Given events, and a draft whose sensitive voice/interactive cell is cloud_only with
    # uploads forbidden (written to the table directly: the editor refuses it)
    stored = decided_events(fleet, _cells(fleet), count=240)
    draft = policy_draft_create(actor=publisher, fleet=fleet)
    PolicyCell.objects.filter(
        version=draft, task_type="voice", latency_budget="interactive", privacy_tier="sensitive"
    ).update(mode="cloud_only", upload_allowed=False)

    # When the draft is backtested
    result = _run(publisher, fleet, version="draft")

    # Then the cell is flagged, with every one of its tasks that did not hit the cache
    assert result["privacy"] == {"flagged_cells": ["voice/interactive/sensitive"], "ok": False}
    voice = next(c for c in result["cells"] if c["label"] == "voice/interactive/sensitive")
    expected = sum(1 for e in stored if event_key(e) == SENSITIVE and not e.cache_hit)
    assert voice["privacy_flag"] is True
    assert voice["subject"]["privacy_violations"] == expected > 0
    assert voice["stable"]["privacy_violations"] == 0
    assert result["headline"]["privacy_ok"] is False


def test_backtest__older_events_without_pressure__nudge_history_reconstructs_it(
    fleet: Any, publisher: Any
) -> None:
    # Given events decided under a cloud-pressure nudge of +0.3 by an SDK that did not record it,
    # and the nudge in the fleet's audit log from before the first of them
    cells = _cells(fleet)
    stored = decided_events(fleet, cells, count=400, pressure=0.3, record_inputs=False, hours=2)
    entry = AuditEntry.objects.create(
        action="fleet.cloud_pressure",
        fleet=fleet,
        target=f"fleet {fleet.slug}",
        after={"theta_offset": 0.3, "ttl_s": 3 * 3600},
    )
    AuditEntry.objects.filter(pk=entry.pk).update(
        created_at=datetime.now(UTC) - timedelta(hours=2, minutes=5)
    )

    # When v1 is backtested
    result = _run(publisher, fleet, version=1)

    # Then the reconstructed offset reproduces the decisions (those that used it included)
    check = result["self_check"]
    assert check["agreement"] == 1.0, check["mismatches"]
    assert check["eligible_replayable"] == 0  # nothing fully recorded: said so
    assert result["replayable"] == 0
    assert len(stored) == result["events"]


def test_nudge_history__later_nudge_and_lapse__offset_in_force_at_each_time() -> None:
    # Given +0.2 from t=100 for 50 s, replaced at t=120 by -0.1 for 10 s
    history = NudgeHistory([(100.0, 150.0, 0.2), (120.0, 130.0, -0.1)])

    # Then each time sees the latest nudge until it lapses, and nothing otherwise
    assert [history.offset_at(t) for t in (99, 100, 119, 120, 129.9, 130, 140)] == [
        0.0,
        0.2,
        0.2,
        -0.1,
        -0.1,
        0.0,
        0.0,
    ]


def test_backtest_start__same_request_twice__the_kept_backtest_returned(
    fleet: Any, publisher: Any
) -> None:
    # Given a backtest of v1 over the 24 h up to a fixed end
    end = datetime.now(UTC) - timedelta(minutes=1)
    first, created = backtest_start(actor=publisher, fleet=fleet, version=1, end=end)

    # When the same is asked again
    again, created_again = backtest_start(actor=publisher, fleet=fleet, version=1, end=end)

    # Then the kept one is answered, not a second
    assert (created, created_again, again.pk) == (True, False, first.pk)
    assert Backtest.objects.count() == 1
    assert math.isclose((first.end - first.start).total_seconds(), 24 * 3600)
