"""Processing landed batches: rollup arithmetic, attribution by the event's own time and version,
compaction that changes no figure, percentiles from rollups against exact ones."""

import json
import math
import random
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection

from routing_policies.models import Device
from routing_policies.services import rollout_rollback, rollout_start
from telemetry.dashboards.metrics import fleet_metrics
from telemetry.ingest.services import landed_batches_process, landed_drain, telemetry_batch_ingest
from telemetry.models import (
    Event,
    EventKey,
    FleetHourRollup,
    HourRollup,
    LandedBatch,
    MinuteRollup,
    RouteCounter,
)
from telemetry.rollups.maintenance import rollups_compact, storage_maintain
from telemetry.rollups.sketch import exact_quantile
from tests.factories import iso, make_event

pytestmark = pytest.mark.django_db


def _ingest(device: Device, events: list[dict[str, Any]]) -> None:
    for start in range(0, len(events), 1000):
        body = json.dumps({"events": events[start : start + 1000]}).encode()
        telemetry_batch_ingest(device=device, body=body)


def _only_group(**kwargs: Any) -> dict[str, Any]:
    result = fleet_metrics(**kwargs)
    (group,) = result["groups"]
    return group  # type: ignore[no-any-return]


def test_landed_batches_process__mixed_events__figures_add_up(
    fleet: Any, phone: tuple[Device, str]
) -> None:
    # Given 10 events: 6 on the device, 3 in the cloud, 1 draft_refine; 2 fallbacks, 3 cache
    # hits, 1 error, and 2 sensitive tasks sent out (one de-identified, one not)
    device = phone[0]
    events = [make_event(latency_ms=10.0) for _ in range(6)]
    events[0]["cache_hit"] = True
    events[1]["cache_hit"] = True
    events[2]["ok"] = False
    events[3]["fallback"] = "device_to_cloud"
    events += [make_event(route="cloud", latency_ms=300.0) for _ in range(3)]
    events[6]["fallback"] = "cloud_to_device"
    events[7]["cache_hit"] = True
    events[8].update(privacy_tier="sensitive", deidentified=False)
    events.append(
        make_event(
            route="draft_refine", privacy_tier="sensitive", deidentified=True, latency_ms=500.0
        )
    )
    _ingest(device, events)

    # When they are processed
    landed_batches_process()

    # Then the fleet's last 15 minutes add up
    group = _only_group(fleet_id=fleet.pk, window=timedelta(minutes=15))
    assert group["events"] == 10
    assert group["alpha"] == pytest.approx(0.6)
    assert group["cloud_share"] == pytest.approx(0.3)
    assert group["draft_refine_share"] == pytest.approx(0.1)
    assert group["fallback_rate"] == pytest.approx(0.2)
    assert group["fallback_rates"] == {
        "cloud_to_device": pytest.approx(0.1),
        "device_to_cloud": pytest.approx(0.1),
    }
    assert group["cache_hit_rate"] == pytest.approx(0.3)
    assert group["error_rate"] == pytest.approx(0.1)
    assert group["privacy_violations"] == 1
    assert group["latency_ms"]["mean"] == pytest.approx((6 * 10 + 3 * 300 + 500) / 10)
    assert group["latency_ms"]["p50"] == pytest.approx(10.0, rel=0.01)
    assert group["score_mean"] == pytest.approx(0.42)


def test_fleet_metrics__grouped_by_route__one_group_per_route(
    fleet: Any, phone: tuple[Device, str]
) -> None:
    # Given events on two routes
    _ingest(phone[0], [make_event() for _ in range(3)] + [make_event(route="cloud")])
    landed_batches_process()

    # When the figures are grouped by route, over 24 hours and 7 days as well
    windows = [timedelta(hours=1), timedelta(hours=24), timedelta(days=7)]
    results = [fleet_metrics(fleet_id=fleet.pk, window=w, group_by=["route"]) for w in windows]

    # Then each window has the same two groups
    for result in results:
        assert [(g["route"], g["events"], g["alpha"]) for g in result["groups"]] == [
            ("cloud", 1, 0.0),
            ("device", 3, 1.0),
        ]


def test_fleet_metrics__group_by_cell_over_a_day__reads_cell_hour_rollups(
    fleet: Any, phone: tuple[Device, str]
) -> None:
    # Given events in two cells
    _ingest(phone[0], [make_event(), make_event(task_type="voice", privacy_tier="sensitive")])
    landed_batches_process()

    # When a day is grouped by cell and filtered to voice
    result = fleet_metrics(
        fleet_id=fleet.pk,
        window=timedelta(hours=24),
        group_by=["task_type", "latency_budget", "privacy_tier"],
        filters={"task_type": "voice"},
    )

    # Then the one voice cell is there, at hour resolution
    assert result["window"]["resolution"] == "hour"
    assert [(g["task_type"], g["privacy_tier"], g["events"]) for g in result["groups"]] == [
        ("voice", "sensitive", 1)
    ]


def test_landed_batches_process__late_event__attributed_to_its_own_minute(
    fleet: Any, phone: tuple[Device, str]
) -> None:
    # Given an event buffered offline for 3 hours, arriving now
    happened = datetime.now(UTC) - timedelta(hours=3)
    _ingest(phone[0], [make_event(ts=iso(happened))])

    # When it is processed
    landed_batches_process()

    # Then it counts in its own minute and hour, not now
    minute = MinuteRollup.objects.get()
    assert minute.minute == happened.replace(second=0, microsecond=0)
    assert HourRollup.objects.get().hour == happened.replace(minute=0, second=0, microsecond=0)
    assert fleet_metrics(fleet_id=fleet.pk, window=timedelta(hours=1))["groups"] == []
    assert _only_group(fleet_id=fleet.pk, window=timedelta(hours=4))["events"] == 1


def test_landed_batches_process__during_rollout__cohort_by_version_and_time(
    fleet: Any, phone: tuple[Device, str], publisher: Any, publish_version: Any
) -> None:
    # Given v2 published, an event from before the rollout, then a rollout of v2 at 5%
    publish_version(fleet, threshold=0.7)
    before = make_event(policy_version=2, ts=iso(datetime.now(UTC) - timedelta(minutes=3)))
    rollout_start(actor=publisher, fleet=fleet, version=2)

    # When events of v1 and v2 arrive during the rollout (and the old one late)
    during = iso(datetime.now(UTC) + timedelta(seconds=1))
    _ingest(phone[0], [make_event(), make_event(policy_version=2, ts=during), before])
    landed_batches_process()

    # Then v2 during the rollout is the candidate cohort and v1 the stable one; v2 before the
    # rollout is in neither (docs/telemetry.md, "Cohorts": one definition, issue 22), and is
    # still counted in its version
    groups = fleet_metrics(
        fleet_id=fleet.pk, window=timedelta(minutes=15), group_by=["version", "cohort"]
    )["groups"]
    assert sorted(((g["version"], g["cohort"] or "", g["events"]) for g in groups), key=str) == [
        (1, "stable", 1),
        (2, "", 1),
        (2, "candidate", 1),
    ]


def test_landed_batches_process__after_rollback__straggler_in_no_cohort(
    fleet: Any, phone: tuple[Device, str], publisher: Any, publish_version: Any
) -> None:
    # Given a rollout of v2 that was rolled back
    publish_version(fleet, threshold=0.7)
    rollout_start(actor=publisher, fleet=fleet, version=2)
    rollout_rollback(actor=publisher, fleet=fleet, reason="p99 up")

    # When a straggler still on v2 reports afterwards
    after = iso(datetime.now(UTC) + timedelta(seconds=1))
    _ingest(phone[0], [make_event(policy_version=2, ts=after)])
    landed_batches_process()

    # Then it is not counted in a candidate cohort that no longer exists, nor in stable (whose
    # version it does not run): it is in no cohort, as on the dashboard (issue 22)
    group = _only_group(fleet_id=fleet.pk, window=timedelta(minutes=15), group_by=["cohort"])
    assert group["cohort"] is None
    assert group["events"] == 1


def test_rollups_compact__partial_rows__merged_and_figures_unchanged(
    fleet: Any, phone: tuple[Device, str]
) -> None:
    # Given three processed batches of the same minute (three partial rows per key)
    ts = iso(datetime.now(UTC).replace(second=0) - timedelta(minutes=1))
    for latency in (10.0, 20.0, 40.0):
        _ingest(phone[0], [make_event(latency_ms=latency, ts=ts) for _ in range(5)])
        landed_batches_process(max_batches=1)
    before = fleet_metrics(fleet_id=fleet.pk, window=timedelta(hours=1))["groups"]
    assert MinuteRollup.objects.count() == 3

    # When the rollups are compacted (twice: the second run has nothing to do)
    rollups_compact()
    rollups_compact()

    # Then one compacted row per key remains and every figure is the same
    assert MinuteRollup.objects.filter(compacted=True).count() == 1
    assert not MinuteRollup.objects.filter(compacted=False).exists()
    assert HourRollup.objects.count() == 1
    assert FleetHourRollup.objects.count() == 1
    assert fleet_metrics(fleet_id=fleet.pk, window=timedelta(hours=1))["groups"] == before
    # and the Prometheus totals counted each event once
    counter = RouteCounter.objects.get()
    assert (counter.route, counter.decided_by, counter.events) == ("device", "threshold", 15)


@pytest.mark.parametrize(
    "distribution",
    [
        lambda rng: rng.lognormvariate(math.log(60), 0.8),
        lambda rng: 25 * rng.paretovariate(1.3),
        lambda rng: rng.expovariate(1 / 120),
    ],
    ids=["lognormal", "pareto", "exponential"],
)
def test_fleet_metrics__percentiles_from_rollups__within_1_percent_of_exact(
    fleet: Any, phone: tuple[Device, str], distribution: Any
) -> None:
    # Given 12,000 events over the last 30 minutes with a known latency distribution
    rng = random.Random(7)
    now = datetime.now(UTC)
    latencies = [round(distribution(rng), 3) for _ in range(12_000)]
    events = [
        make_event(latency_ms=latency, ts=iso(now - timedelta(seconds=rng.uniform(1, 1800))))
        for latency in latencies
    ]
    _ingest(phone[0], events)

    # When they are processed (in several transactions) and read back from the rollups
    while landed_batches_process(max_batches=3).batches:
        pass
    group = _only_group(fleet_id=fleet.pk, window=timedelta(hours=1))

    # Then P50 / P95 / P99 are within 1% of the exact percentiles of the same events
    ordered = sorted(latencies)
    for name, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99)):
        exact = exact_quantile(ordered, q)
        assert abs(group["latency_ms"][name] - exact) / exact <= 0.01, name


def test_fleet_metrics__any_window__one_query(
    fleet: Any, phone: tuple[Device, str], django_assert_num_queries: Any
) -> None:
    # Given processed events
    _ingest(phone[0], [make_event(), make_event(route="cloud")])
    landed_batches_process()

    # When figures are read for each window and grouping / Then each read is one query (and
    # one more by cohort: the rollout the cohorts are read against, docs/telemetry.md)
    for window in (timedelta(minutes=15), timedelta(hours=1), timedelta(hours=24)):
        for group_by in ([], ["version", "cohort"], ["task_type", "route"]):
            with django_assert_num_queries(2 if "cohort" in group_by else 1):
                result = fleet_metrics(fleet_id=fleet.pk, window=window, group_by=group_by)
            # and holds both events, split by route only when grouped by it
            assert sum(group["events"] for group in result["groups"]) == 2
            assert len(result["groups"]) == (2 if "route" in group_by else 1)
    with django_assert_num_queries(1):
        week = fleet_metrics(fleet_id=fleet.pk, window=timedelta(days=7), with_scores=True)
    (group,) = week["groups"]
    assert group["events"] == 2
    assert sum(group["score_histogram"]["counts"]) == 2


def test_landed_batches_process__event_past_retention_by_now__dropped_as_expired(
    fleet: Any, phone: tuple[Device, str], settings: Any
) -> None:
    # Given an accepted event that, by the time a worker sees it, is older than retention
    _ingest(phone[0], [make_event(ts=iso(datetime.now(UTC) - timedelta(days=2))), make_event()])
    settings.TELEMETRY_RETENTION_DAYS = 1

    # When it is processed
    result = landed_batches_process()

    # Then it is dropped and counted, the other stored
    assert (result.events, result.expired) == (1, 1)
    assert Event.objects.count() == 1


def test_storage_maintain__old_days__partitions_and_ids_dropped(
    requires_postgres: None, fleet: Any, phone: tuple[Device, str], settings: Any
) -> None:
    # Given events 5 days old and fresh ones, then retention cut to 3 days
    old = datetime.now(UTC) - timedelta(days=5)
    _ingest(phone[0], [make_event(ts=iso(old)), make_event()])
    landed_batches_process()
    settings.TELEMETRY_RETENTION_DAYS = 3

    # When storage maintenance runs
    result = storage_maintain()

    # Then the old day's partition and ids are gone, today's kept, and days ahead exist
    assert f"telemetry_event_p{old:%Y%m%d}" in result.partitions_dropped
    assert Event.objects.count() == 1
    assert EventKey.objects.count() == 1
    with connection.cursor() as cursor:
        ahead = datetime.now(UTC) + timedelta(days=2)
        cursor.execute("SELECT to_regclass(%s)", [f"telemetry_event_p{ahead:%Y%m%d}"])
        assert cursor.fetchone()[0] is not None
    assert not LandedBatch.objects.exists()


def test_telemetry_maintain_command__landed_batches__processed_and_compacted(
    fleet: Any, phone: tuple[Device, str]
) -> None:
    # Given two landed batches and no worker (as where no beat runs)
    _ingest(phone[0], [make_event()])
    _ingest(phone[0], [make_event(route="cloud")])

    # When the maintenance command runs
    out = StringIO()
    call_command("telemetry_maintain", stdout=out)

    # Then the batches are processed, the rollups compacted, and storage maintained
    assert "processed 2 landed events" in out.getvalue()
    assert not LandedBatch.objects.exists()
    assert not MinuteRollup.objects.filter(compacted=False).exists()
    assert Event.objects.count() == 2


def test_landed_drain__several_batches__all_processed_in_few_transactions(
    fleet: Any, phone: tuple[Device, str], settings: Any
) -> None:
    # Given five landed batches and room for all of them in one transaction
    settings.TELEMETRY_PROCESS_MAX_BATCHES = 20
    ts = iso(datetime.now(UTC).replace(second=0) - timedelta(minutes=1))
    for _ in range(5):
        _ingest(phone[0], [make_event(ts=ts), make_event(ts=ts)])

    # When a drain runs (as the first request after an idle spell wakes it)
    events = landed_drain()

    # Then everything is processed, and together: one set of partial rows for the minute
    assert events == 10
    assert not LandedBatch.objects.exists()
    assert Event.objects.count() == 10
    assert MinuteRollup.objects.count() == 1
