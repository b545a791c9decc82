"""The rollup read model: the field list, the window planner, the row reader and Figures."""

import json
from dataclasses import fields
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from routing_policies.models import Device
from telemetry.ingest.services import landed_batches_process, telemetry_batch_ingest
from telemetry.models import RollupMetrics
from telemetry.rollups import (
    FLEET_HOUR,
    HOUR,
    METRIC_FIELDS,
    MINUTE,
    Figures,
    RollupRow,
    Tally,
    plan_window,
    read_rows,
)
from telemetry.rollups.schema import HISTOGRAM_FIELDS, ZERO_SUMS
from tests.factories import make_event


def _row(route: str, events: int, latency: dict[str, int], **sums: float) -> RollupRow:
    """A minute row of v1 stable text/interactive/normal with these sums (others 0)."""
    values = dict(zip(METRIC_FIELDS, ZERO_SUMS, strict=True))
    values.update(events=events, **sums)
    return RollupRow(
        bucket=datetime(2026, 12, 1, 12, 0, tzinfo=UTC),
        policy_version=1,
        cohort="stable",
        route=route,
        task_type="text",
        latency_budget="interactive",
        privacy_tier="normal",
        decided_by="",
        sums=tuple(values[name] for name in METRIC_FIELDS),
        latency_hist=latency,
    )


def test_metric_fields__rollup_models__every_summed_column_named_once() -> None:
    # Given the rollup models' figure columns (all but the sketches and the compaction flag)
    summed = [
        f.name
        for f in RollupMetrics._meta.get_fields()
        if f.name not in (*HISTOGRAM_FIELDS, "compacted")
    ]

    # Then the field list names each of them once, and the write-side tally carries them all
    assert list(METRIC_FIELDS) == summed
    assert [f.name for f in fields(Tally)] == [*METRIC_FIELDS, *HISTOGRAM_FIELDS]


@pytest.mark.parametrize(
    ("window", "resolution", "buckets", "cell_level", "level"),
    [
        (timedelta(minutes=15), "minute", 15, False, MINUTE),
        (timedelta(hours=6), "minute", 360, True, MINUTE),
        (timedelta(hours=7), "hour", 7, True, HOUR),
        (timedelta(hours=24), "hour", 24, False, FLEET_HOUR),
        (timedelta(days=7), "hour", 168, True, HOUR),
    ],
)
def test_plan_window__window__whole_buckets_ending_now_and_table(
    window: timedelta, resolution: str, buckets: int, cell_level: bool, level: Any
) -> None:
    # Given now, 12:34:56 / When a window is planned
    now = datetime(2026, 12, 1, 12, 34, 56, tzinfo=UTC)
    plan = plan_window(window, now=now)

    # Then it is so many whole buckets, the last one holding now, read from the right table
    assert (plan.resolution, plan.buckets, plan.end) == (resolution, buckets, now)
    assert plan.bucket_index(now) == buckets - 1
    assert plan.bucket_index(plan.start) == 0
    assert plan.level(cell_level=cell_level) is level


def test_figures__merged_halves__same_as_all_rows_at_once() -> None:
    # Given rows of three routes, split in two halves
    rows = [
        _row("device", 3, {"10": 3}, tokens_sum=300, latency_sum_ms=30.0, errors=1),
        _row("cloud", 1, {"90": 1}, tokens_sum=50, latency_sum_ms=400.0, cache_hits=1),
        _row("draft_refine", 2, {"50": 2}, fallback_device_to_cloud=2, latency_sum_ms=90.0),
        _row("device", 4, {"10": 1, "11": 3}, tokens_sum=100, latency_sum_ms=44.0),
    ]
    everything, first, second = Figures(), Figures(), Figures()
    for row in rows:
        everything.add(row)
    for row in rows[:2]:
        first.add(row)
    for row in rows[2:]:
        second.add(row)

    # When the halves merge
    first.merge(second)

    # Then they are the figures of all rows
    assert first.totals() == everything.totals()
    assert first.routes == everything.routes
    assert first.latency_hist == everything.latency_hist == {"10": 4, "11": 3, "50": 2, "90": 1}
    assert first.headline() == everything.headline()
    # And the figures follow from the sums
    assert everything.events == 10
    assert everything.share("device") == pytest.approx(0.7)
    assert everything.rate("errors") == pytest.approx(0.1)
    assert everything.fallback_rate() == pytest.approx(0.2)
    assert everything.latency_mean() == pytest.approx(56.4)
    assert everything.tokens_per_task() == {
        "device": pytest.approx(400 / 7),
        "cloud": 50.0,
        "draft_refine": 0.0,
    }


def test_figures__no_rows__every_figure_unknown() -> None:
    # Given no rows / Then there is nothing to divide by: every figure is unknown
    figures = Figures()
    assert figures.events == 0
    assert figures.share("device") is None
    assert figures.tokens_per_task() == {"device": None, "cloud": None, "draft_refine": None}
    assert figures.latency_quantiles() == [None, None, None]


@pytest.mark.django_db
def test_read_rows__each_level__typed_rows_keys_it_lacks_empty(
    phone: tuple[Device, str],
) -> None:
    # Given two processed events of phone-1, on the device and in the cloud
    events = [make_event(tokens=120), make_event(route="cloud", tokens=80)]
    telemetry_batch_ingest(device=phone[0], body=json.dumps({"events": events}).encode())
    landed_batches_process()
    since = datetime.now(UTC) - timedelta(hours=2)

    # When the rows of each level are read
    minute = read_rows(MINUTE, fleet_id=phone[0].fleet_id, since=since, latency=True)
    fleet_hour = read_rows(
        FLEET_HOUR, fleet_id=phone[0].fleet_id, since=since, where={"route": "cloud"}
    )

    # Then the rows are typed: aware UTC buckets, the sums in field-list order, the sketches
    # read only when asked, and "" for a key the level does not keep
    assert sorted((row.route, row.events) for row in minute) == [("cloud", 1), ("device", 1)]
    assert all(
        row.bucket.tzinfo is not None and row.bucket.utcoffset() == timedelta(0) for row in minute
    )
    assert all(row.decided_by == "" and sum(row.latency_hist.values()) == 1 for row in minute)
    (cloud,) = fleet_hour
    assert (cloud.task_type, cloud.decided_by, cloud.latency_hist) == ("", "threshold", None)
    assert cloud.sums[METRIC_FIELDS.index("tokens_sum")] == 80
