"""The dashboard's device-quality figures (issue #15): the draft-kept rate and the mean app
quality per cell, per bucket and per cohort, against a direct computation on generated rollup
rows and on events through the real ingest path; "no reports" is None, never 0; the pinned
query counts hold with the new figures."""

import json
import random
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from routing_policies.models import Device
from telemetry.dashboards.selectors import (
    DashboardView,
    Scan,
    _fold_rows,
    _grid,
    _series,
    fleet_dashboard,
)
from telemetry.feedback.services import feedback_batch_ingest, feedback_join
from telemetry.ingest.services import landed_batches_process, telemetry_batch_ingest
from telemetry.rollups import Figures, RollupRow, figures_at, plan_window
from telemetry.rollups.schema import FIELD_INDEX, ZERO_SUMS
from tests.factories import iso, make_event

CELLS = (
    ("text", "interactive", "normal"),
    ("voice", "interactive", "normal"),
    ("image", "background", "normal"),
)
NOW = datetime(2026, 12, 1, 12, 0, 30, tzinfo=UTC)


def generated_rows(seed: int) -> list[RollupRow]:
    """An hour of minute rows over three cells and both cohorts; the image cell never reports
    a refine or a quality."""
    rng = random.Random(seed)
    rows = []
    for minute in range(60):
        for cell in CELLS:
            for cohort in ("stable", "candidate"):
                sums = list(ZERO_SUMS)
                reported = 0 if cell[0] == "image" else rng.randint(0, 12)
                counted = 0 if cell[0] == "image" else rng.randint(0, 6)
                sums[FIELD_INDEX["events"]] = reported + rng.randint(1, 20)
                sums[FIELD_INDEX["refine_reported"]] = reported
                sums[FIELD_INDEX["refine_kept"]] = rng.randint(0, reported)
                sums[FIELD_INDEX["quality_count"]] = counted
                sums[FIELD_INDEX["quality_sum"]] = sum(rng.random() for _ in range(counted))
                rows.append(
                    RollupRow(
                        NOW.replace(second=0) - timedelta(minutes=59 - minute),
                        1 if cohort == "stable" else 2,
                        cohort,
                        rng.choice(["device", "draft_refine"]),
                        *cell,
                        "",
                        tuple(sums),
                    )
                )
    return rows


def _sum(rows: list[RollupRow], name: str) -> float:
    return sum(row.sums[FIELD_INDEX[name]] for row in rows)  # type: ignore[index]


def test_grid_and_series__generated_rows__quality_figures_equal_the_direct_sums() -> None:
    # Given an hour of generated rows folded as the dashboard folds them
    rows = generated_rows(7)
    plan = plan_window(timedelta(hours=1), now=NOW)
    scan = Scan()
    _fold_rows(scan, plan, rows)

    # When the grid and the per-bucket series are drawn
    grid = {
        (c["task_type"], c["latency_budget"], c["privacy_tier"]): c
        for c in _grid(scan, {}, None)["cells"]
    }
    per_bucket: dict[int, Figures] = {}
    for (index, _route, _cohort, _version), figures in scan.by_bucket.items():
        figures_at(per_bucket, index).merge(figures)
    series = _series(per_bucket, plan.buckets, with_latency=False)

    # Then each cell's draft-kept rate and mean quality are its sums' ratios, with the reports
    # behind them; the cell that reported nothing shows None and 0 reports, never 0%
    for cell in CELLS:
        mine = [r for r in rows if (r.task_type, r.latency_budget, r.privacy_tier) == cell]
        figure = grid[cell]
        reported, counted = _sum(mine, "refine_reported"), _sum(mine, "quality_count")
        assert figure["refine_reported"] == reported
        assert figure["quality_count"] == counted
        if cell[0] == "image":
            assert figure["draft_kept_rate"] is None
            assert figure["mean_quality"] is None
            continue
        assert figure["draft_kept_rate"] == pytest.approx(_sum(mine, "refine_kept") / reported)
        assert figure["mean_quality"] == pytest.approx(_sum(mine, "quality_sum") / counted)
    # and each bucket's series is the ratio of that minute's rows
    by_minute: dict[int, list[RollupRow]] = defaultdict(list)
    for row in rows:
        by_minute[plan.bucket_index(row.bucket)].append(row)
    for index, mine in by_minute.items():
        reported = _sum(mine, "refine_reported")
        assert series["refine_reported"][index] == reported
        if reported:
            assert series["draft_kept_rate"][index] == pytest.approx(
                _sum(mine, "refine_kept") / reported
            )
        else:
            assert series["draft_kept_rate"][index] is None
        counted = _sum(mine, "quality_count")
        assert series["quality_count"][index] == counted
        assert (series["mean_quality"][index] is None) == (counted == 0)


# --- through ingest ------------------------------------------------------------------------


def _report(device: Device, events: list[dict[str, Any]]) -> None:
    telemetry_batch_ingest(device=device, body=json.dumps({"events": events}).encode())
    landed_batches_process()


@pytest.fixture
def reported(phone: tuple[Device, str]) -> None:
    """Five minutes ago, in the text cell: 8 draft-refines (6 kept, 2 changed) and 4 device
    events with app quality 0.5, 0.7, 0.9, 1.0; in the voice cell: 3 cloud events that report
    nothing."""
    at = iso(datetime.now(UTC) - timedelta(minutes=5))
    events = [make_event(ts=at, route="draft_refine", refine_changed=False) for _ in range(6)]
    events += [make_event(ts=at, route="draft_refine", refine_changed=True) for _ in range(2)]
    events += [make_event(ts=at, quality=q) for q in (0.5, 0.7, 0.9, 1.0)]
    events += [make_event(ts=at, task_type="voice", route="cloud") for _ in range(3)]
    _report(phone[0], events)


@pytest.mark.parametrize("window", ["1h", "24h"])
def test_fleet_dashboard__quality_signals__headline_grid_and_cohort_series(
    reported: None, fleet: Any, window: str
) -> None:
    payload = fleet_dashboard(fleet=fleet, view=DashboardView(window=window))

    # The headline: 6 of 8 drafts kept, mean app quality 0.775 over 4 readings
    summary = payload["summary"]
    assert summary["draft_kept_rate"] == pytest.approx(6 / 8)
    assert summary["refine_reported"] == 8
    assert summary["mean_quality"] == pytest.approx(0.775)
    assert summary["quality_count"] == 4
    # The grid: the text cell has them; the voice cell reported nothing (None, never 0)
    cells = {
        (c["task_type"], c["latency_budget"], c["privacy_tier"]): c
        for c in payload["grid"]["cells"]
    }
    text, voice = cells[CELLS[0]], cells[CELLS[1]]
    assert text["draft_kept_rate"] == pytest.approx(0.75)
    assert text["mean_quality"] == pytest.approx(0.775)
    assert (voice["draft_kept_rate"], voice["refine_reported"]) == (None, 0)
    assert (voice["mean_quality"], voice["quality_count"]) == (None, 0)
    # Over time, per cohort: the bucket with the reports has the rate, the others None
    stable = payload["cohorts"]["stable"]["series"]
    values = [v for v in stable["draft_kept_rate"] if v is not None]
    assert values == [pytest.approx(0.75)]
    assert sum(stable["refine_reported"]) == 8
    assert sum(stable["quality_count"]) == 4
    assert payload["cohorts"]["candidate"]["summary"]["draft_kept_rate"] is None
    assert payload["series"]["draft_kept_rate"].count(None) == len(payload["buckets"]) - 1


@pytest.mark.parametrize(
    ("window", "task_type", "queries"),
    [("15m", None, 7), ("1h", "text", 7), ("24h", None, 8), ("7d", "text", 7)],
)
def test_fleet_dashboard__quality_signals__pinned_queries_unchanged(
    reported: None,
    fleet: Any,
    window: str,
    task_type: str | None,
    queries: int,
    django_assert_num_queries: Any,
) -> None:
    # Given events with quality signals / When the dashboard is computed
    # Then the quality figures come from the same rollup scan: no query more
    with django_assert_num_queries(queries):
        payload = fleet_dashboard(
            fleet=fleet, view=DashboardView(window=window, task_type=task_type)
        )
    assert payload["summary"]["refine_reported"] == 8


def test_fleet_dashboard__shadow_refines__device_kept_rate_of_the_device_route_alone(
    phone: tuple[Device, str], fleet: Any
) -> None:
    # Given 10 draft-refines (all kept) and 4 shadow refines of device answers (1 kept)
    at = iso(datetime.now(UTC) - timedelta(minutes=3))
    events = [make_event(ts=at, route="draft_refine", refine_changed=False) for _ in range(10)]
    events += [
        make_event(ts=at, shadow_refine=True, refine_changed=changed)
        for changed in (True, True, True, False)
    ]
    _report(phone[0], events)

    payload = fleet_dashboard(fleet=fleet, view=DashboardView())

    # Then the pooled rate counts all 14, the device's own only the shadow refines
    summary = payload["summary"]
    assert summary["draft_kept_rate"] == pytest.approx(11 / 14)
    assert (summary["device_kept_rate"], summary["device_refine_reported"]) == (0.25, 4)
    text = next(c for c in payload["grid"]["cells"] if c["task_type"] == "text" and c["events"])
    assert (text["device_kept_rate"], text["device_refine_reported"]) == (0.25, 4)
    assert payload["cohorts"]["stable"]["summary"]["device_kept_rate"] == 0.25


def test_fleet_dashboard__late_feedback_joined_not_yet_compacted__counted_at_once(
    phone: tuple[Device, str], fleet: Any
) -> None:
    # Given 4 device events folded into the rollups, then feedback on 3 of them, joined (its
    # quality a partial rollup row without events until the next compaction)
    at = iso(datetime.now(UTC) - timedelta(minutes=2))
    events = [make_event(ts=at) for _ in range(4)]
    _report(phone[0], events)
    items = [
        {"event_id": e["event_id"], "quality": q}
        for e, q in zip(events, (0.2, 0.4, 0.9), strict=False)
    ]
    stored = feedback_batch_ingest(device=phone[0], body=json.dumps({"feedback": items}).encode())
    assert feedback_join(ids=stored.ids) == 3

    # When the dashboard is drawn before any compaction
    payload = fleet_dashboard(fleet=fleet, view=DashboardView())

    # Then the late readings count, in the headline, the grid and the series
    assert payload["summary"]["quality_count"] == 3
    assert payload["summary"]["mean_quality"] == pytest.approx(0.5)
    assert payload["summary"]["events"] == 4
    text = next(c for c in payload["grid"]["cells"] if c["task_type"] == "text" and c["events"])
    assert (text["quality_count"], text["mean_quality"]) == (3, pytest.approx(0.5))
    assert sum(payload["series"]["quality_count"]) == 3
