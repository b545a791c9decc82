"""The quality target of calibration and the curve score → draft kept (docs/lab.md, "Device
quality"): the estimator against a direct computation over the generated events, the target
reached on a generated sample, and refused where a cell has too few reports."""

import math
import random
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from rest_framework.test import APIClient

from edge_sdk.decision import Cell, decide
from lab.calibration.quality import (
    MIN_QUALITY_REPORTS,
    KeptGroups,
    display_curve,
    kept_groups,
    predict,
    wilson,
)
from lab.calibration.sweep import STEPS, CellSweep, SweepResult
from lab.calibration.targets import Target
from lab.estimate import LatencyModel
from lab.replay import RecordedEvent
from routing_policies.models import AuditEntry, Device
from routing_policies.pricing import CloudPrice
from telemetry.rollups import Figures, RollupRow
from telemetry.rollups.schema import FIELD_INDEX, ZERO_SUMS
from telemetry.rollups.sketch import SCORE_BINS, score_bin
from tests.factories import demo_cell, protocol_event, recorded_sample
from tests.lab_events import ingest, refined_events, true_kept

TEXT = ("text", "interactive", "normal")
PRICE = CloudPrice(per_1k_tokens=0.002, per_call=0.0001)
Client = Callable[[Any], APIClient]


def reports(count: int, *, seed: int = 3) -> tuple[dict[str, int], dict[str, int]]:
    """`count` refine reports at uniform scores, kept with the probability `true_kept`: the
    refine and kept histograms a cell's rollups would hold."""
    rng = random.Random(seed)
    reported: dict[str, int] = {}
    kept: dict[str, int] = {}
    for _ in range(count):
        score = rng.random()
        key = str(score_bin(score))
        reported[key] = reported.get(key, 0) + 1
        if rng.random() < true_kept(score):
            kept[key] = kept.get(key, 0) + 1
    return reported, kept


def sweep(
    cell: Cell, events: list[RecordedEvent], target: Target, kept: KeptGroups | None
) -> SweepResult:
    model = LatencyModel()
    model.observe_all(events)
    cell_sweep = CellSweep(cell=cell)
    for event in events:
        cell_sweep.add(event.task, event.device, cache_hit=event.cache_hit)
    return cell_sweep.result(target=target, model=model, hours=1.0, price=PRICE, kept=kept)


def direct_quality(
    cell: Cell, events: list[RecordedEvent], threshold: float, groups: KeptGroups
) -> tuple[float, int]:
    """The prediction computed the long way: decide each event at `threshold`; each device task
    with a score counts with its group's kept rate."""
    at = replace(cell, threshold=threshold)
    rates = []
    for event in events:
        decision = decide(at, event.task, event.device)
        if decision.route == "device" and decision.score is not None:
            reported, kept = groups.groups[groups.group_of[score_bin(decision.score)]]
            rates.append(kept / reported)
    return sum(rates) / len(rates), len(rates)


@pytest.mark.parametrize("reported", [1, 4, 10, 19, 50, 399, 10_000])
def test_wilson__every_count__the_interval_holds_the_share(reported: int) -> None:
    # Given every kept count of `reported` reports, all kept and none kept among them
    for kept in range(reported + 1) if reported < 500 else (0, 1, reported - 1, reported):
        # When its interval is computed
        low, high = wilson(kept, reported)

        # Then it holds the measured share, also at 0 and 1 (rounding put them a hair outside)
        assert 0.0 <= low <= kept / reported <= high <= 1.0, (kept, reported)


def test_wilson__known_interval__matches_the_formula() -> None:
    # 8 of 10: the textbook Wilson 95% interval
    low, high = wilson(8, 10)
    assert low == pytest.approx(0.4902, abs=1e-4)
    assert high == pytest.approx(0.9433, abs=1e-4)
    assert wilson(0, 0) == (0.0, 1.0)
    assert wilson(0, 50)[0] == pytest.approx(0.0)
    assert wilson(50, 50)[1] == pytest.approx(1.0)


def test_kept_groups__generated_reports__contiguous_groups_of_enough_reports() -> None:
    # Given 1,000 reports spread over the score
    reported, kept = reports(1000)

    # When the bins are pooled
    groups = kept_groups(reported, kept, reports=1000)

    # Then every bin is in a group, groups run in score order, each holds ≥ 30 reports, and
    # together they hold every report exactly once
    assert len(groups.group_of) == SCORE_BINS
    assert list(groups.group_of) == sorted(groups.group_of)
    assert set(groups.group_of) == set(range(len(groups.groups)))
    assert all(r >= 30 for r, _ in groups.groups)
    assert sum(r for r, _ in groups.groups) == groups.scored == 1000
    assert sum(k for _, k in groups.groups) == sum(kept.values())
    assert groups.enough


def test_predict__weights_and_interval__equal_the_direct_computation() -> None:
    # Given two groups (40 reports, 30 kept; 60 reports, 30 kept) and tasks 1 : 3
    groups = KeptGroups(
        reports=100, scored=100, group_of=(0,) * 50 + (1,) * 50, groups=((40, 30), (60, 30))
    )

    # When the quality of 10 and 30 device tasks is predicted
    prediction = predict(groups, [10, 30])

    # Then it is the task-weighted mean of the kept rates, with the delta-method interval
    assert prediction is not None
    assert prediction.quality == pytest.approx(0.25 * 0.75 + 0.75 * 0.5)
    p0, p1 = 30.5 / 41, 30.5 / 61
    se = math.sqrt(0.25**2 * p0 * (1 - p0) / 40 + 0.75**2 * p1 * (1 - p1) / 60)
    assert prediction.low == pytest.approx(prediction.quality - 1.959964 * se)
    assert prediction.high == pytest.approx(prediction.quality + 1.959964 * se)
    assert prediction.tasks == 40
    assert predict(groups, [0, 0]) is None


def test_display_curve__deciles__counts_rates_and_wilson_per_bin() -> None:
    # Given a cell's figures with refine and kept histograms
    reported, kept = reports(2000, seed=5)
    figures = Figures()
    sums = list(ZERO_SUMS)
    sums[FIELD_INDEX["events"]] = 2000
    sums[FIELD_INDEX["refine_reported"]] = 2000
    sums[FIELD_INDEX["refine_kept"]] = sum(kept.values())
    row = RollupRow(
        bucket=None,  # type: ignore[arg-type]  # not read by the figures
        policy_version=1,
        cohort="stable",
        route="draft_refine",
        task_type="text",
        latency_budget="interactive",
        privacy_tier="normal",
        decided_by="threshold",
        sums=tuple(sums),
        refine_hist=reported,
        kept_hist=kept,
    )
    figures.add(row)

    # When the lab's curve is drawn
    curve = display_curve(figures)

    # Then it has ten deciles, each with the reports and kept of its ten bins, its Wilson
    # interval, and the rates follow the generated model within their intervals (roughly)
    assert len(curve) == 10
    for index, point in enumerate(curve):
        bins = [str(b) for b in range(index * 10, index * 10 + 10)]
        assert point["reported"] == sum(reported.get(b, 0) for b in bins)
        assert point["kept"] == sum(kept.get(b, 0) for b in bins)
        assert point["kept_rate"] == pytest.approx(point["kept"] / point["reported"])
        assert (point["low"], point["high"]) == wilson(point["kept"], point["reported"])
        middle = (point["score_from"] + point["score_to"]) / 2
        assert abs(point["kept_rate"] - true_kept(middle)) < 0.1


@pytest.mark.parametrize("floor", [0.65, 0.7, 0.74])
def test_calibration_sweep__quality_target__highest_alpha_at_or_above_the_floor(
    floor: float,
) -> None:
    # Given 4,000 generated events of the text cell and 3,000 refine reports of its curve
    cell = demo_cell(TEXT)
    events = recorded_sample(cell, 4000)
    reported, kept = reports(3000)
    groups = kept_groups(reported, kept, reports=3000)

    # When θ is calibrated for a device quality floor
    result = sweep(cell, events, Target(kind="quality", value=floor), groups)

    # Then the chosen θ meets it, no curve point with more α does, and the prediction equals
    # the direct computation over the events decide keeps on the device at that θ
    assert result.reached
    chosen = result.chosen
    assert chosen.device_quality is not None
    assert chosen.device_quality >= floor
    assert chosen.device_quality_low is not None
    assert chosen.device_quality_high is not None
    assert chosen.device_quality_low <= chosen.device_quality <= chosen.device_quality_high
    assert not [
        p
        for p in result.curve
        if p.alpha > chosen.alpha and p.device_quality is not None and p.device_quality >= floor
    ]
    quality, judged = direct_quality(cell, events, chosen.threshold, groups)
    assert chosen.device_quality == pytest.approx(quality)
    assert chosen.device_judged == judged
    # and the true quality of those tasks (the generated model) lies within its interval
    at = replace(cell, threshold=chosen.threshold)
    truth = [
        true_kept(d.score)
        for e in events
        if (d := decide(at, e.task, e.device)).route == "device" and d.score is not None
    ]
    assert (
        chosen.device_quality_low - 0.02
        <= sum(truth) / len(truth)
        <= (chosen.device_quality_high + 0.02)
    )


def test_calibration_sweep__quality_floor_out_of_reach__best_point_not_reached() -> None:
    # Given the generated cell, whose device quality never reaches 90%
    cell = demo_cell(TEXT)
    events = recorded_sample(cell, 2000)
    reported, kept = reports(3000)
    groups = kept_groups(reported, kept, reports=3000)

    result = sweep(cell, events, Target(kind="quality", value=0.9), groups)

    # Then the target is not reached and the chosen point is the best predicted quality
    assert not result.reached
    best = max(p.device_quality for p in result.curve if p.device_quality is not None)
    assert result.chosen.device_quality is not None
    assert result.chosen.device_quality >= best


def test_calibration_sweep__quality_too_few_reports__refused_current_theta_kept() -> None:
    # Given the text cell's events but only 60 refine reports
    cell = demo_cell(TEXT)
    events = recorded_sample(cell, 1000)
    reported, kept = reports(60)
    groups = kept_groups(reported, kept, reports=60)

    # When θ is calibrated for device quality 80%
    result = sweep(cell, events, Target(kind="quality", value=0.8), groups)

    # Then it is refused with the reason, θ stays where it is, and no quality is predicted
    assert not result.reached
    assert "too few draft reports" in result.quality_refused
    assert f"{MIN_QUALITY_REPORTS}" in result.quality_refused
    assert result.chosen.threshold == result.current.threshold == cell.threshold
    assert all(p.device_quality is None for p in result.curve)


def test_calibration_sweep__other_target__device_quality_on_the_curve_too() -> None:
    # Given enough reports, an α target
    cell = demo_cell(TEXT)
    events = recorded_sample(cell, 2000)
    reported, kept = reports(1500)
    groups = kept_groups(reported, kept, reports=1500)

    result = sweep(cell, events, Target(kind="alpha", value=0.6), groups)

    # Then the curve carries the predicted device quality wherever a task is on the device
    assert result.reached
    assert result.chosen.device_quality is not None
    assert result.curve[-1].device_quality is not None
    assert len(result.curve) == STEPS // 10 + 1


# --- through ingest, rollups and the API ----------------------------------------------------

IMAGE = {"task_type": "image", "latency_budget": "interactive", "privacy_tier": "normal"}
TEXT_BODY = {"task_type": "text", "latency_budget": "interactive", "privacy_tier": "normal"}
BASE = "/api/v1/fleets/fleet-a/lab/calibrations"


@pytest.fixture
def refined(phone: tuple[Device, Any]) -> int:
    """1,500 events of the draft-refine image cell as phone-1 sent them, with their refine
    reports (`refined_events`): how many report `refine_changed`."""
    events = refined_events(1500)
    ingest(phone[0].fleet, events)
    return sum("refine_changed" in e for e in events)


def test_calibration_api__quality_target__reached_with_interval_and_reports(
    refined: int, viewer: Any, client_as: Client
) -> None:
    # Given the image cell's events with their refine reports; the curve of device quality
    # over θ, as an α calibration shows it
    client = client_as(viewer)
    first = client.post(
        BASE, {"target": {"kind": "alpha", "value": 0.5}, "cells": [IMAGE]}, format="json"
    )
    assert first.status_code == 200, first.content
    qualities = [
        p["device_quality"] for p in first.json()["cells"][0]["curve"] if p["device_quality"]
    ]
    floor = round((min(qualities) + max(qualities)) / 2, 3)

    # When the cell is calibrated for a device quality in the middle of that range
    response = client.post(
        BASE, {"target": {"kind": "quality", "value": floor}, "cells": [IMAGE]}, format="json"
    )

    # Then it is reached, the chosen point's quality is at or above it with its interval and
    # the tasks it judges, and the cell's curve score → draft kept counts every report
    assert response.status_code == 200, response.content
    (cell,) = response.json()["cells"]
    assert cell["reached"]
    chosen = cell["chosen"]
    assert chosen["device_quality"] >= floor
    assert chosen["device_quality_low"] <= chosen["device_quality"] <= chosen["device_quality_high"]
    assert chosen["device_judged"] > 0
    quality = cell["quality"]
    assert quality["reports"] == quality["scored_reports"] == refined
    assert quality["refused"] == ""
    assert sum(b["reported"] for b in quality["curve"]) == refined
    for point in quality["curve"]:
        assert point["low"] <= point["kept_rate"] <= point["high"]
    assert response.json()["target"]["label"] == f"highest α with device quality ≥ {floor:.0%}"
    # and the device-route reports alone (the shadow refines) measure the device beside it
    shadow = quality["device_reports"]
    assert 0 < shadow < refined
    assert 0 <= quality["device_kept_rate"] <= 1


def test_calibration_api__quality_without_reports__409_naming_the_cell(
    phone: tuple[Device, Any], viewer: Any, client_as: Client
) -> None:
    # Given text-cell events that report nothing of the draft
    cell = demo_cell(("text", "interactive", "normal"))
    ingest(phone[0].fleet, [protocol_event(e) for e in recorded_sample(cell, 300, seed=2)])
    audit = AuditEntry.objects.count()

    # When the cell is calibrated for device quality
    response = client_as(viewer).post(
        BASE, {"target": {"kind": "quality", "value": 0.8}, "cells": [TEXT_BODY]}, format="json"
    )

    # Then 409 too_few_quality_reports, naming the cell and the reports it needs; nothing stored
    assert response.status_code == 409, response.content
    error = response.json()["error"]
    assert error["code"] == "too_few_quality_reports"
    assert "text/interactive/normal" in error["details"][0]["message"]
    assert f"{MIN_QUALITY_REPORTS}" in error["details"][0]["message"]
    assert AuditEntry.objects.count() == audit


def test_calibration_page__quality_target__curve_and_quality_shown(
    refined: int, viewer: Any, client: Any
) -> None:
    client.force_login(viewer)
    response = client.get(
        "/fleets/fleet-a/lab/calibrate/",
        {"kind": "quality", "value": "60", "hours": "24", "cells": "image/interactive/normal"},
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert "Score → draft kept" in html
    assert "data-kept-chart" in html
    assert 'data-field="chosen-quality"' in html


def test_calibration_page__quality_without_reports__409_with_the_reason(
    phone: tuple[Device, Any], viewer: Any, client: Any
) -> None:
    client.force_login(viewer)
    response = client.get(
        "/fleets/fleet-a/lab/calibrate/",
        {"kind": "quality", "value": "80", "hours": "24", "cells": "text/interactive/normal"},
    )
    assert response.status_code == 409
    assert "Too few draft reports" in response.content.decode()
