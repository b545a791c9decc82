"""The dashboard's cloud cost: known rollups priced by the fleet's cloud price give a known
cost per hour and day, and a known saving against all-cloud."""

import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from routing_policies.models import Device, Fleet, Rollout
from routing_policies.pricing import CloudPrice
from routing_policies.services import device_enroll, rollout_rollback, rollout_start
from telemetry.dashboards.cost import CohortCost, cost_figures
from telemetry.dashboards.selectors import DashboardView, fleet_dashboard
from telemetry.ingest.services import landed_batches_process, telemetry_batch_ingest
from telemetry.rollups import METRIC_FIELDS, Figures, RollupRow
from tests.factories import iso, make_event

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 12, 1, 8, tzinfo=UTC)


def _span(hours: float) -> dict[str, datetime]:
    """A first and a last event `hours` apart, as cost_figures takes them."""
    return {"first": T0, "last": T0 + timedelta(hours=hours)}


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
    # tokens) and 10 draft-refine tasks (5,000 tokens), the first and last 2 hours apart
    figures = Figures()
    figures.add(_row("device", events=100, tokens_sum=20_000))
    figures.add(_row("cloud", events=40, cache_hits=10, tokens_sum=16_000))
    figures.add(_row("draft_refine", events=10, tokens_sum=5_000))
    price = CloudPrice(per_1k_tokens=0.002, per_call=0.001)

    # When priced
    cost = cost_figures(figures=figures, price=price, **_span(2.0))

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
    # and the span that holds data beside it, under the one label
    assert cost["span"]["text"] == "2 h 00 m"
    assert cost["label"] == "Cloud cost / day"


def test_cost_figures__no_events__zero_cost_no_saving_share() -> None:
    cost = cost_figures(
        figures=Figures(), price=CloudPrice(per_1k_tokens=1, per_call=1), first=None, last=None
    )
    assert (cost["window"], cost["saving"], cost["saving_share"]) == (0, 0, None)
    assert (cost["per_day"], cost["span"]["text"]) == (None, None)


def test_fleet_dashboard__reported_events__cost_priced_by_the_fleet(
    phone: tuple[Device, str], fleet: Any, viewer: Any, client_as: Any
) -> None:
    # Given a price of 0.01 per 1k tokens and 0.002 per call, and reported a minute ago:
    # 2 device tasks of 100 tokens, 1 cloud task of 1,000, 1 draft-refine task of 500
    fleet.cloud_price_per_1k_tokens = 0.01
    fleet.cloud_price_per_call = 0.002
    fleet.save()
    ago = datetime.now(UTC) - timedelta(minutes=2)
    events = [
        make_event(ts=iso(ago), tokens=100),
        make_event(ts=iso(ago + timedelta(seconds=30)), tokens=100),
        make_event(ts=iso(ago + timedelta(seconds=60)), route="cloud", tokens=1000),
        make_event(ts=iso(ago + timedelta(seconds=90)), route="draft_refine", tokens=500),
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
    # and per day over the 90 s from the first event to the last: 0.019 × 40 × 24
    assert cost["per_day"] == pytest.approx(0.019 * 40 * 24)
    assert cost["span"]["text"] == "1 m 30 s"
    assert cost["price"] == {"per_1k_tokens": 0.01, "per_call": 0.002}
    assert answered["window"] == pytest.approx(0.019)


def _cohort(*rows: RollupRow) -> Figures:
    figures = Figures()
    for row in rows:
        figures.add(row)
    return figures


def test_cost_figures__rollout_cohorts__saving_against_stable() -> None:
    # Given 0.001 per 1k tokens and 0.01 per call; the stable cohort: 800 tasks, 400 of them
    # cloud calls of 1,000 tokens (4.4, 0.0055 per task); the candidate: 200 tasks, 40 calls
    # (0.44, 0.0022 per task); the whole view is both
    price = CloudPrice(per_1k_tokens=0.001, per_call=0.01)
    stable = _cohort(
        _row("device", events=400, tokens_sum=400_000),
        _row("cloud", events=400, tokens_sum=400_000),
    )
    candidate = _cohort(
        _row("device", events=160, tokens_sum=160_000), _row("cloud", events=40, tokens_sum=40_000)
    )
    view = _cohort(
        _row("device", events=560, tokens_sum=560_000),
        _row("cloud", events=440, tokens_sum=440_000),
    )

    # When the view's cost is figured with the two cohorts
    cost = cost_figures(
        figures=view,
        price=price,
        **_span(2),
        cohorts=CohortCost(
            stable=stable, candidate=candidate, stable_version=3, candidate_version=4
        ),
    )

    # Then against stable the candidate's 200 tasks would have cost 200 x 0.0055 = 1.1, not
    # 0.44: the view on stable costs 4.84 + 0.66, and the saving is 0.66 (12%)
    assert cost["window"] == pytest.approx(4.84)
    assert cost["stable"]["window"] == pytest.approx(5.5)
    assert cost["stable"]["per_day"] == pytest.approx(5.5 / 2 * 24)
    assert cost["saving_vs_stable"]["amount"] == pytest.approx(0.66)
    assert cost["saving_vs_stable"]["share"] == pytest.approx(0.66 / 5.5)
    assert cost["cohorts"]["candidate_change"] == pytest.approx(0.0022 / 0.0055 - 1)
    assert (cost["cohorts"]["stable_version"], cost["cohorts"]["candidate_version"]) == (3, 4)
    assert cost["cohorts_withheld"] is None
    # and against all-cloud: 1,000 calls and 1,000,000 tokens = 11
    assert cost["saving_vs_all_cloud"]["amount"] == pytest.approx(11 - 4.84)


def test_cost_figures__rollout_cohorts__change_with_its_95_percent_interval() -> None:
    # Given calls only (0.01 each): stable 400 calls of 800 tasks (50%), the candidate 40 of
    # 200 (20%): the candidate's change is −60%
    price = CloudPrice(per_1k_tokens=0, per_call=0.01)
    stable = _cohort(_row("device", events=400), _row("cloud", events=400))
    candidate = _cohort(_row("device", events=160), _row("cloud", events=40))

    # When compared
    cohorts = CohortCost(stable=stable, candidate=candidate, stable_version=3, candidate_version=4)
    cost = cost_figures(figures=stable, price=price, **_span(1), cohorts=cohorts)["cohorts"]

    # Then its interval is the ratio of the two call shares, 0.4 × exp(±1.96 × √(0.5/400 +
    # 0.8/40)): −71% to −45%, around −60%
    spread = 1.959964 * ((0.5 / 400 + 0.8 / 40) ** 0.5)
    assert cost["candidate_change"] == pytest.approx(-0.6)
    assert cost["candidate_change_low"] == pytest.approx(0.4 * math.exp(-spread) - 1)
    assert cost["candidate_change_high"] == pytest.approx(0.4 * math.exp(spread) - 1)
    assert cost["candidate_change_low"] < -0.6 < cost["candidate_change_high"]


def test_cost_figures__candidate_below_the_minimum__withheld_saying_why() -> None:
    # Given a stable cohort of 800 tasks and a candidate of 2
    stable = _cohort(_row("cloud", events=800, tokens_sum=1_000))
    candidate = _cohort(_row("cloud", events=2, tokens_sum=10))

    # When compared
    cost = cost_figures(
        figures=stable,
        price=CloudPrice(per_1k_tokens=1, per_call=1),
        **_span(1),
        cohorts=CohortCost(
            stable=stable, candidate=candidate, stable_version=1, candidate_version=4
        ),
    )

    # Then no comparison, and the reason in words
    assert (cost["cohorts"], cost["stable"], cost["saving_vs_stable"]) == (None, None, None)
    assert cost["cohorts_withheld"] == ("v4 has 2 tasks in this view, 200 per cohort needed")


def test_cost_figures__candidate_without_tasks__no_saving_against_stable() -> None:
    stable = _cohort(_row("cloud", events=10, tokens_sum=1_000))
    cost = cost_figures(
        figures=stable,
        price=CloudPrice(per_1k_tokens=1, per_call=1),
        **_span(1),
        cohorts=CohortCost(
            stable=stable, candidate=Figures(), stable_version=1, candidate_version=2
        ),
    )
    assert (cost["stable"], cost["saving_vs_stable"], cost["cohorts"]) == (None, None, None)


def _rollout_traffic(fleet_key: str, *, stable_tasks: int, candidate_tasks: int) -> None:
    """Stable v1 answering half its tasks in the cloud, candidate v2 all of them, over the
    last minute, reported and processed (the open rollout taken to have started 5 minutes
    ago, so that the minute is the candidate's)."""
    Rollout.objects.filter(state__in=["active", "paused"]).update(
        started_at=datetime.now(UTC) - timedelta(minutes=5)
    )
    device, _ = device_enroll(fleet_key=fleet_key, device_id="phone-9", platform="android")
    start = datetime.now(UTC) - timedelta(seconds=70)
    events = [
        make_event(
            "phone-9",
            ts=iso(start + timedelta(milliseconds=100 * index)),
            policy_version=1,
            route="cloud" if index % 2 else "device",
        )
        for index in range(stable_tasks)
    ] + [
        make_event(
            "phone-9",
            ts=iso(start + timedelta(milliseconds=100 * index + 50)),
            policy_version=2,
            route="cloud",
        )
        for index in range(candidate_tasks)
    ]
    telemetry_batch_ingest(device=device, body=json.dumps({"events": events}).encode())
    landed_batches_process()


def test_fleet_dashboard__open_rollout__cost_against_stable(
    fleet: Any, fleet_key: str, publisher: Any, publish_version: Any, client_as: Any, viewer: Any
) -> None:
    # Given 0.002 per call, v2 rolling out, stable v1 answering 100 of 200 tasks in the cloud
    # and the candidate 200 of 200 (each cohort at the minimum of 200 tasks)
    fleet.cloud_price_per_1k_tokens = 0
    fleet.cloud_price_per_call = 0.002
    fleet.save()
    publish_version(fleet)
    rollout_start(actor=publisher, fleet=fleet, version=2)
    _rollout_traffic(fleet_key, stable_tasks=200, candidate_tasks=200)

    # When the dashboard and its API are read
    cost = fleet_dashboard(fleet=fleet, view=DashboardView(window="1h"))["cost"]
    answered = client_as(viewer).get("/api/v1/fleets/fleet-a/dashboard?window=1h").json()["cost"]

    # Then on stable the candidate's 200 tasks would have made 100 calls, not 200: the view
    # costs 0.6, on stable 0.4, so the candidate costs 0.2 more (+100% per task)
    assert cost["window"] == pytest.approx(0.6)
    assert cost["stable"]["window"] == pytest.approx(0.4)
    assert cost["saving_vs_stable"]["amount"] == pytest.approx(-0.2)
    assert cost["cohorts"]["candidate_change"] == pytest.approx(1.0)
    assert answered["saving_vs_stable"]["amount"] == pytest.approx(-0.2)
    assert answered["cohorts"]["candidate_version"] == 2
    # and its 95% interval around it (stable's 100 calls of 200; the candidate's 200 of 200)
    spread = 1.959964 * (0.5 / 100) ** 0.5
    assert answered["cohorts"]["candidate_change_low"] == pytest.approx(2 * math.exp(-spread) - 1)
    assert answered["cohorts"]["candidate_change_high"] == pytest.approx(2 * math.exp(spread) - 1)
    assert answered["cohorts_withheld"] is None


def test_dashboard_api__open_rollout_with_few_candidate_tasks__comparison_withheld_saying_why(
    fleet: Any, fleet_key: str, publisher: Any, publish_version: Any, client_as: Any, viewer: Any
) -> None:
    # Given v2 rolling out with 2 tasks reported against stable's 300
    publish_version(fleet)
    rollout_start(actor=publisher, fleet=fleet, version=2)
    _rollout_traffic(fleet_key, stable_tasks=300, candidate_tasks=2)

    # When the dashboard's API is read
    cost = client_as(viewer).get("/api/v1/fleets/fleet-a/dashboard?window=1h").json()["cost"]

    # Then no per-task comparison on 2 tasks, and why not
    assert (cost["cohorts"], cost["stable"], cost["saving_vs_stable"]) == (None, None, None)
    assert cost["cohorts_withheld"] == ("v2 has 2 tasks in this view, 200 per cohort needed")
    assert cost["min_compared_tasks"] == 200


@pytest.mark.parametrize("window", ["15m", "1h", "24h", "7d"])
def test_dashboard_api__rolled_back_rollout__no_comparison_in_any_window(
    fleet: Any,
    fleet_key: str,
    publisher: Any,
    publish_version: Any,
    client_as: Any,
    viewer: Any,
    window: str,
) -> None:
    # Given v2 rolled out with enough tasks in both cohorts, then rolled back
    publish_version(fleet)
    rollout_start(actor=publisher, fleet=fleet, version=2)
    _rollout_traffic(fleet_key, stable_tasks=300, candidate_tasks=300)
    rollout_rollback(actor=publisher, fleet=fleet, reason="costs too much")

    # When the dashboard's API is read, in each window
    body = client_as(viewer).get(f"/api/v1/fleets/fleet-a/dashboard?window={window}").json()

    # Then the cohort charts still compare the finished rollout, but the cost does not set the
    # rolled-back candidate against stable, and says why
    assert body["compared_rollout"]["candidate"] == 2
    cost = body["cost"]
    assert (cost["cohorts"], cost["stable"], cost["saving_vs_stable"]) == (None, None, None)
    assert cost["cohorts_withheld"] == "no rollout in progress"


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
    cost = cost_figures(
        figures=figures, price=CloudPrice(per_1k_tokens=1, per_call=0.01), **_span(1)
    )

    # Then the 10 that reached the cloud are 10 calls with 2,000 tokens: 2.0 + 0.1
    assert (cost["cloud_calls"], cost["cloud_tokens"]) == (10, 2_000)
    assert cost["window"] == pytest.approx(2.1)


@pytest.mark.parametrize("window", ["15m", "1h", "24h", "7d"])
def test_dashboard_api__three_minutes_of_traffic_on_an_older_fleet__per_day_at_the_traffic_rate(
    phone: tuple[Device, str], fleet: Any, viewer: Any, client_as: Any, window: str
) -> None:
    # Given a fleet created an hour ago at 0.001 per call, whose devices began reporting three
    # minutes ago: one cloud task a second (0.001 × 86,400 = 86.40 a day)
    Fleet.objects.filter(pk=fleet.pk).update(created_at=datetime.now(UTC) - timedelta(hours=1))
    fleet.cloud_price_per_1k_tokens = 0
    fleet.cloud_price_per_call = 0.001
    fleet.save()
    last = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    events = [
        make_event(ts=iso(last - timedelta(seconds=179 - index)), route="cloud")
        for index in range(180)
    ]
    telemetry_batch_ingest(device=phone[0], body=json.dumps({"events": events}).encode())
    landed_batches_process()

    # When the dashboard's API is read
    cost = client_as(viewer).get(f"/api/v1/fleets/fleet-a/dashboard?window={window}").json()["cost"]

    # Then its cost per day is the traffic's rate, over the 2 m 59 s from the first event to
    # the last: not the hour since the fleet's creation, nor the window, nor whole minutes
    assert cost["window"] == pytest.approx(0.18)
    assert cost["span"]["text"] == "2 m 59 s"
    assert cost["per_day"] == pytest.approx(0.18 / 179 * 86_400)
    assert cost["per_day"] == pytest.approx(86.4, rel=0.01)


def test_dashboard_api__a_burst_under_a_minute__no_rate_per_day_yet(
    phone: tuple[Device, str], fleet: Any, viewer: Any, client_as: Any
) -> None:
    # Given 100 cloud tasks reported within 20 seconds, a minute ago
    start = datetime.now(UTC) - timedelta(minutes=1)
    events = [
        make_event(ts=iso(start + timedelta(milliseconds=200 * index)), route="cloud")
        for index in range(100)
    ]
    telemetry_batch_ingest(device=phone[0], body=json.dumps({"events": events}).encode())
    landed_batches_process()

    # When the dashboard's API is read
    cost = client_as(viewer).get("/api/v1/fleets/fleet-a/dashboard?window=15m").json()["cost"]

    # Then the cost is there, but no rate: 20 s scaled to a day would be 4,320 times it
    assert cost["window"] > 0
    assert cost["span"]["text"] == "20 s"
    assert (cost["per_hour"], cost["per_day"]) == (None, None)
