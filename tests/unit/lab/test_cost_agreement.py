"""One cost per day everywhere: on steady traffic, the dashboard (every window), the backtest
and the calibration of the same events give the same cost per day, over the span that holds
data (docs/lab.md, "Cost"), and the pages print it under one label with that span."""

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lab.backtests.services import backtest_run
from routing_policies.models import Device
from telemetry.ingest.services import landed_batches_process, telemetry_batch_ingest
from tests.factories import demo_cell, iso, protocol_event, recorded_sample

pytestmark = pytest.mark.django_db

TEXT = {"task_type": "text", "latency_budget": "interactive", "privacy_tier": "normal"}
TEXT_KEY = ("text", "interactive", "normal")
BASE = "/api/v1/fleets/fleet-a"
# Steady traffic: one task a second for two hours, the same ten tasks over and over, so every
# window from 15 minutes up holds the same mix to within one cycle of ten.
SPAN = timedelta(hours=2)
EVERY = timedelta(seconds=1)
CYCLE = 10


@pytest.fixture
def steady(fleet: Any, phone: tuple[Device, Any]) -> datetime:
    """Two hours of steady traffic of the text cell up to a second ago, decided by v1 as the
    fleet runs it, ingested as phone-1 sent it and processed; returns the first event's time."""
    fleet.cloud_price_per_1k_tokens = 0.002
    fleet.cloud_price_per_call = 0.0005
    fleet.save()
    tasks = [protocol_event(e) for e in recorded_sample(demo_cell(TEXT_KEY), CYCLE, seed=11)]
    last = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    count = int(SPAN / EVERY)
    first = last - EVERY * (count - 1)
    events = [
        {**tasks[index % CYCLE], "event_id": f"00000000-0000-4000-8000-{index:012d}"}
        | {"ts": iso(first + EVERY * index)}
        for index in range(count)
    ]
    for start in range(0, len(events), 1000):
        batch = {"events": events[start : start + 1000]}
        telemetry_batch_ingest(device=phone[0], body=json.dumps(batch).encode())
        landed_batches_process()
    return first


def test_cost_per_day__steady_traffic__dashboard_backtest_and_calibration_agree_within_5_percent(
    steady: datetime, viewer: Any, editor: Any, client_as: Any
) -> None:
    # Given two hours of steady traffic (7,200 tasks, one a second)
    api = client_as(viewer)

    # When the dashboard's API is read in each window
    dashboard = {
        window: api.get(f"{BASE}/dashboard", {"window": window}).json()["cost"]
        for window in ("15m", "1h", "24h", "7d")
    }
    # and a backtest of v1 over the last 24 hours runs (what happened, and v1 replayed)
    started = client_as(editor).post(f"{BASE}/lab/backtests", {"version": 1}, format="json")
    assert started.status_code == 202, started.content
    backtest_run(backtest_id=started.json()["id"])
    backtest = api.get(started.json()["url"]).json()["result"]["cost"]
    # and the text cell is calibrated over the same 24 hours, for the α it has now (so the
    # chosen θ routes as v1 did)
    calibrate = {"cells": [TEXT], "hours": 24}
    probe = api.post(
        f"{BASE}/lab/calibrations",
        {**calibrate, "target": {"kind": "alpha", "value": 0.5}},
        format="json",
    )
    assert probe.status_code == 200, probe.content
    alpha = probe.json()["cells"][0]["current"]["alpha"]
    calibrated = api.post(
        f"{BASE}/lab/calibrations",
        {**calibrate, "target": {"kind": "alpha", "value": alpha}},
        format="json",
    )
    assert calibrated.status_code == 200, calibrated.content
    calibration = calibrated.json()["cost"]

    # Then each is the cost over the span that holds data: 2 h in the backtest, the
    # calibration and the 24-hour and 7-day views; 1 h and 15 m in theirs (to the second)
    assert backtest["observed"]["span"]["text"] == "1 h 59 m"  # 7,199 s: first to last event
    assert calibration["span"]["text"] == "1 h 59 m"
    assert dashboard["24h"]["span"]["text"] == dashboard["7d"]["span"]["text"] == "1 h 59 m"
    assert 59 * 60 <= dashboard["1h"]["hours"] * 3600 <= 3600
    assert 14 * 60 <= dashboard["15m"]["hours"] * 3600 <= 15 * 60
    # and the cost per day agrees within 5% across all of them
    figures = {
        **{f"dashboard {window}": cost["per_day"] for window, cost in dashboard.items()},
        "backtest (what happened)": backtest["observed"]["per_day"],
        "backtest (v1 replayed)": backtest["subject"]["per_day"],
        "calibration": calibration["per_day"],
    }
    reference = backtest["observed"]["per_day"]
    assert reference > 0
    for name, per_day in figures.items():
        assert per_day == pytest.approx(reference, rel=0.05), (name, figures)
    # and every one carries the one label
    assert {cost["label"] for cost in (*dashboard.values(), backtest["observed"], calibration)} == {
        "Cloud cost / day"
    }


def test_backtest_and_calibration_pages__steady_traffic__per_day_with_the_span_of_data(
    steady: datetime, viewer: Any, editor: Any, client: Any, client_as: Any
) -> None:
    # Given two hours of steady traffic and a backtest of v1 over the last 24 hours
    started = client_as(editor).post(f"{BASE}/lab/backtests", {"version": 1}, format="json")
    backtest_run(backtest_id=started.json()["id"])
    client.force_login(viewer)

    # When the backtest's page and the calibration's page (for α 50%) are read
    backtest_page = client.get(f"/fleets/fleet-a/lab/backtests/?id={started.json()['id']}")
    calibration_page = client.get(
        "/fleets/fleet-a/lab/calibrate/",
        {
            "kind": "alpha",
            "value": "50",
            "cells": "text/interactive/normal",
            "hours": "24",
        },
    )

    # Then both print the cost per day under the one label, with the span it is taken over
    # (the window is 24 h; the data, 2 h of it)
    backtest_text = backtest_page.content.decode()
    assert "Cloud cost / day" in backtest_text
    assert "/day (from 1 h 59 m of data)" in backtest_text
    calibration_text = calibration_page.content.decode()
    assert "Cloud cost / day" in calibration_text, calibration_text[:2000]
    assert "/day (from 1 h 59 m of data;" in calibration_text


@pytest.fixture
def burst(fleet: Any, phone: tuple[Device, Any]) -> None:
    """300 tasks of the text cell reported within 30 seconds, ten minutes ago."""
    start = datetime.now(UTC) - timedelta(minutes=10)
    events = [
        {**protocol_event(e), "ts": iso(start + timedelta(milliseconds=100 * index))}
        for index, e in enumerate(recorded_sample(demo_cell(TEXT_KEY), 300, seed=5))
    ]
    telemetry_batch_ingest(device=phone[0], body=json.dumps({"events": events}).encode())
    landed_batches_process()


def test_calibration_api__a_burst_under_a_minute__no_rate_and_no_cost_ceiling(
    burst: None, viewer: Any, client_as: Any
) -> None:
    # Given 300 tasks within 30 seconds / When the text cell is calibrated for α 50%
    api = client_as(viewer)
    body = {"cells": [TEXT], "hours": 24}
    answer = api.post(
        f"{BASE}/lab/calibrations",
        {**body, "target": {"kind": "alpha", "value": 0.5}},
        format="json",
    )

    # Then its cost is there for the window, but no rate per hour or day: 30 s is no day
    assert answer.status_code == 200, answer.content
    cost = answer.json()["cost"]
    assert cost["window"] > 0
    assert (cost["per_hour"], cost["per_day"], cost["span"]["text"]) == (None, None, "30 s")
    assert answer.json()["cells"][0]["chosen"]["cost_per_hour"] is None
    # and a cost ceiling per hour is refused, naming the target and saying why
    ceiling = api.post(
        f"{BASE}/lab/calibrations",
        {**body, "target": {"kind": "cost_ceiling", "value": 0.01}},
        format="json",
    )
    assert ceiling.status_code == 409, ceiling.content
    error = ceiling.json()["error"]
    assert error["code"] == "too_little_data_for_a_rate"
    assert error["details"][0]["field"] == "target"
