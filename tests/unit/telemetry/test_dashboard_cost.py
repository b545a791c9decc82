"""The dashboard's cloud cost: known rollups priced by the fleet's cloud price give a known
cost per hour and day, and a known saving against all-cloud."""

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from routing_policies.models import Device
from routing_policies.pricing import CloudPrice
from telemetry.dashboards.cost import cost_figures
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
