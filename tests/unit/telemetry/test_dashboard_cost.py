"""The dashboard's cloud cost: known rollups priced by the fleet's cloud price give a known
cost per hour and day, and a known saving against all-cloud."""

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from routing_policies.models import Device
from routing_policies.pricing import CloudPrice
from routing_policies.services import device_enroll, rollout_start
from telemetry.dashboards.cost import CohortCost, cost_figures
from telemetry.dashboards.selectors import DashboardView, fleet_dashboard
from telemetry.ingest.services import landed_batches_process, telemetry_batch_ingest
from telemetry.rollups import METRIC_FIELDS, Figures, RollupRow
from tests.factories import iso, make_event

pytestmark = pytest.mark.django_db


def _row(route: str, **sums: float) -> RollupRow:
    return RollupRow(
        bucket=datetime(2026, 12, 1, tzinfo=UTC),
        policy_version=1,
        cohort="stable",
        route=route,
        task_type="text",
        latency_budget="interactive",
        privacy_tier="normal",
        decided_by="",
        sums=tuple(float(sums.get(name, 0)) for name in METRIC_FIELDS),
    )


def test_cost_figures__known_rollups__known_cost_and_saving() -> None:
    # Given 100 device tasks (20,000 tokens), 40 cloud tasks (10 of them cache hits, 16,000
    # tokens) and 10 draft-refine tasks (5,000 tokens), over 2 hours
    figures = Figures()
    figures.add(_row("device", events=100, tokens_sum=20_000))
    figures.add(_row("cloud", events=40, cache_hits=10, tokens_sum=16_000))
    figures.add(_row("draft_refine", events=10, tokens_sum=5_000))
    price = CloudPrice(per_1k_tokens=0.002, per_call=0.001)

    # When priced
    cost = cost_figures(figures=figures, price=price, hours=2.0)

    # Then 30 + 10 calls carry 12,000 + 5,000 tokens: 17 × 0.002 + 40 × 0.001 = 0.074
    assert cost["cloud_calls"] == 40
    assert cost["cloud_tokens"] == pytest.approx(17_000)
    assert cost["window"] == pytest.approx(0.074)
    assert cost["per_hour"] == pytest.approx(0.037)
    assert cost["per_day"] == pytest.approx(0.888)
    # And all-cloud: 150 calls with 41,000 tokens = 0.082 + 0.15 = 0.232; saving 0.158
    assert cost["all_cloud"]["window"] == pytest.approx(0.232)
    assert cost["all_cloud"]["per_day"] == pytest.approx(0.232 / 2 * 24)
    assert cost["saving"] == pytest.approx(0.158)
    assert cost["saving_share"] == pytest.approx(0.158 / 0.232)
    assert cost["currency"] == "USD"


def test_cost_figures__no_events__zero_cost_no_saving_share() -> None:
    cost = cost_figures(figures=Figures(), price=CloudPrice(per_1k_tokens=1, per_call=1), hours=1)
    assert (cost["window"], cost["saving"], cost["saving_share"]) == (0, 0, None)


def test_fleet_dashboard__reported_events__cost_priced_by_the_fleet(
    phone: tuple[Device, str], fleet: Any, viewer: Any, client_as: Any
) -> None:
    # Given a price of 0.01 per 1k tokens and 0.002 per call, and reported a minute ago:
    # 2 device tasks of 100 tokens, 1 cloud task of 1,000, 1 draft-refine task of 500
    fleet.cloud_price_per_1k_tokens = 0.01
    fleet.cloud_price_per_call = 0.002
    fleet.save()
    ago = iso(datetime.now(UTC) - timedelta(minutes=1))
    events = [
        make_event(ts=ago, tokens=100),
        make_event(ts=ago, tokens=100),
        make_event(ts=ago, route="cloud", tokens=1000),
        make_event(ts=ago, route="draft_refine", tokens=500),
    ]
    telemetry_batch_ingest(device=phone[0], body=json.dumps({"events": events}).encode())
    landed_batches_process()

    # When the dashboard of the last hour is read, and its API
    cost = fleet_dashboard(fleet=fleet, view=DashboardView(window="1h"))["cost"]
    api: APIClient = client_as(viewer)
    answered = api.get("/api/v1/fleets/fleet-a/dashboard?window=1h").json()["cost"]

    # Then 2 calls with 1,500 tokens: 0.015 + 0.004; all-cloud 4 calls, 1,700 tokens
    assert cost["window"] == pytest.approx(0.019)
    assert cost["all_cloud"]["window"] == pytest.approx(0.017 + 0.008)
    assert cost["saving"] == pytest.approx(0.006)
    assert cost["per_day"] == pytest.approx(cost["per_hour"] * 24)
    assert cost["price"] == {"per_1k_tokens": 0.01, "per_call": 0.002}
    assert answered["window"] == pytest.approx(0.019)


def _cohort(*rows: RollupRow) -> Figures:
    figures = Figures()
    for row in rows:
        figures.add(row)
    return figures


def test_cost_figures__rollout_cohorts__saving_against_stable() -> None:
    # Given 0.001 per 1k tokens and 0.01 per call; the stable cohort: 80 tasks, 40 of them
    # cloud calls of 1,000 tokens (0.44, 0.0055 per task); the candidate: 20 tasks, 4 calls
    # (0.044, 0.0022 per task); the whole view is both
    price = CloudPrice(per_1k_tokens=0.001, per_call=0.01)
    stable = _cohort(
        _row("device", events=40, tokens_sum=40_000), _row("cloud", events=40, tokens_sum=40_000)
    )
    candidate = _cohort(
        _row("device", events=16, tokens_sum=16_000), _row("cloud", events=4, tokens_sum=4_000)
    )
    view = _cohort(
        _row("device", events=56, tokens_sum=56_000), _row("cloud", events=44, tokens_sum=44_000)
    )

    # When the view's cost is figured with the two cohorts
    cost = cost_figures(
        figures=view,
        price=price,
        hours=2,
        cohorts=CohortCost(
            stable=stable, candidate=candidate, stable_version=3, candidate_version=4
        ),
    )

    # Then against stable the candidate's 20 tasks would have cost 20 x 0.0055 = 0.11, not
    # 0.044: the view on stable costs 0.484 + 0.066, and the saving is 0.066 (12%)
    assert cost["window"] == pytest.approx(0.484)
    assert cost["stable"]["window"] == pytest.approx(0.55)
    assert cost["stable"]["per_day"] == pytest.approx(0.55 / 2 * 24)
    assert cost["saving_vs_stable"]["amount"] == pytest.approx(0.066)
    assert cost["saving_vs_stable"]["share"] == pytest.approx(0.066 / 0.55)
    assert cost["cohorts"]["candidate_change"] == pytest.approx(0.0022 / 0.0055 - 1)
    assert (cost["cohorts"]["stable_version"], cost["cohorts"]["candidate_version"]) == (3, 4)
    # and against all-cloud: 100 calls and 100,000 tokens = 1.1
    assert cost["saving_vs_all_cloud"]["amount"] == pytest.approx(1.1 - 0.484)


def test_cost_figures__candidate_without_tasks__no_saving_against_stable() -> None:
    stable = _cohort(_row("cloud", events=10, tokens_sum=1_000))
    cost = cost_figures(
        figures=stable,
        price=CloudPrice(per_1k_tokens=1, per_call=1),
        hours=1,
        cohorts=CohortCost(
            stable=stable, candidate=Figures(), stable_version=1, candidate_version=2
        ),
    )
    assert (cost["stable"], cost["saving_vs_stable"], cost["cohorts"]) == (None, None, None)


def test_fleet_dashboard__open_rollout__cost_against_stable(
    fleet: Any, fleet_key: str, publisher: Any, publish_version: Any, client_as: Any, viewer: Any
) -> None:
    # Given 0.002 per call, v2 rolling out, stable v1 answering 1 of 2 tasks in the cloud and
    # the candidate 2 of 2
    fleet.cloud_price_per_1k_tokens = 0
    fleet.cloud_price_per_call = 0.002
    fleet.save()
    publish_version(fleet)
    rollout_start(actor=publisher, fleet=fleet, version=2)
    device, _ = device_enroll(fleet_key=fleet_key, device_id="phone-9", platform="android")
    now = iso(datetime.now(UTC))
    events = [
        make_event("phone-9", ts=now, policy_version=1),
        make_event("phone-9", ts=now, policy_version=1, route="cloud"),
        make_event("phone-9", ts=now, policy_version=2, route="cloud"),
        make_event("phone-9", ts=now, policy_version=2, route="cloud"),
    ]
    telemetry_batch_ingest(device=device, body=json.dumps({"events": events}).encode())
    landed_batches_process()

    # When the dashboard and its API are read
    cost = fleet_dashboard(fleet=fleet, view=DashboardView(window="1h"))["cost"]
    answered = client_as(viewer).get("/api/v1/fleets/fleet-a/dashboard?window=1h").json()["cost"]

    # Then on stable the candidate's 2 tasks would have made 1 call, not 2: the view costs
    # 0.006, on stable 0.004, so the candidate costs 0.002 more (+100% per task)
    assert cost["window"] == pytest.approx(0.006)
    assert cost["stable"]["window"] == pytest.approx(0.004)
    assert cost["saving_vs_stable"]["amount"] == pytest.approx(-0.002)
    assert cost["cohorts"]["candidate_change"] == pytest.approx(1.0)
    assert answered["saving_vs_stable"]["amount"] == pytest.approx(-0.002)
    assert answered["cohorts"]["candidate_version"] == 2


def test_cost_figures__device_tasks_that_reached_the_cloud__priced_as_calls() -> None:
    # Given 100 device tasks of 200 tokens each, 4 of which fell back to the cloud and 6 of
    # which were refined in the background, at 1 per 1k tokens and 0.01 per call
    figures = Figures()
    figures.add(
        _row(
            "device",
            events=100,
            tokens_sum=20_000,
            fallback_device_to_cloud=4,
            shadow_refines=6,
        )
    )

    # When priced
    cost = cost_figures(figures=figures, price=CloudPrice(per_1k_tokens=1, per_call=0.01), hours=1)

    # Then the 10 that reached the cloud are 10 calls with 2,000 tokens: 2.0 + 0.1
    assert (cost["cloud_calls"], cost["cloud_tokens"]) == (10, 2_000)
    assert cost["window"] == pytest.approx(2.1)
