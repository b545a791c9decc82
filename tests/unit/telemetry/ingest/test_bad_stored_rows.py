"""Reads robust to bad rows already stored (as a version before the physical ranges of
telemetry numbers stored them): the metrics API, the dashboard, alert evaluation, compaction
and the Prometheus scrape answer, and one fleet's bad rows never break another's figures."""

import json
import math
import uuid
from datetime import UTC, timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from routing_policies.models import Fleet
from routing_policies.services import device_enroll, fleet_enrollment_key_rotate
from telemetry.alerts.services import SEED_RULES, alert_rules_seed, alerts_evaluate
from telemetry.ingest.services import landed_batches_process, telemetry_batch_ingest
from telemetry.models import (
    Event,
    FleetHourRollup,
    HourRollup,
    LandedBatch,
    MinuteRollup,
    RouteCounter,
)
from telemetry.rollups.maintenance import rollups_compact
from tests.factories import make_event, make_fleet

pytestmark = pytest.mark.django_db

# What an older version stored for two events of 1e308 ms: an infinite sum, and the sketch
# bucket of 1e308, whose representative value overflows a float.
OVERFLOWING_BUCKET = "70978"
BAD_LATENCY_HIST = {OVERFLOWING_BUCKET: 2, "nan": 1, "5": "many", "6": -3, "7": 1.5}
BAD_SCORE_HIST = {"150": 1, "y": 2, "42": 1}


@pytest.fixture
def other_fleet(publisher: Any) -> Any:
    """fleet-b with one device that reported 4 good events (20, 40, 60, 80 ms)."""
    fleet_b = make_fleet(slug="fleet-b", actor=publisher)
    key = fleet_enrollment_key_rotate(actor=publisher, fleet=fleet_b)
    device, _ = device_enroll(fleet_key=key, device_id="car-1")
    events = [make_event("car-1", latency_ms=float(ms)) for ms in (20, 40, 60, 80)]
    telemetry_batch_ingest(device=device, body=json.dumps({"events": events}).encode())
    landed_batches_process()
    return fleet_b


def _cell(**extra: Any) -> dict[str, Any]:
    return {
        "policy_version": 1,
        "cohort": "stable",
        "route": "device",
        **extra,
    }


@pytest.fixture
def bad_rows(fleet: Any, publisher: Any) -> None:
    """fleet-a's rollups and counter as an older version stored them: an infinite and a NaN
    latency sum, histograms with an overflowing bucket, bad keys and bad counts, a counter of
    the wrong shape. And its seeded alert rules."""
    now = timezone.now().astimezone(UTC)
    minute = now.replace(second=0, microsecond=0)
    hour = now.replace(minute=0, second=0, microsecond=0)
    cell = {"task_type": "text", "latency_budget": "interactive", "privacy_tier": "normal"}
    metrics = {
        "events": 2,
        "score_count": 2,
        "score_sum": math.inf,
        "latency_hist": BAD_LATENCY_HIST,
        "score_hist": BAD_SCORE_HIST,
    }
    for latency_sum in (math.inf, math.nan):
        MinuteRollup.objects.create(
            fleet=fleet, minute=minute, **_cell(**cell), **metrics, latency_sum_ms=latency_sum
        )
        HourRollup.objects.create(
            fleet=fleet, hour=hour, **_cell(**cell), **metrics, latency_sum_ms=latency_sum
        )
        FleetHourRollup.objects.create(
            fleet=fleet,
            hour=hour,
            **_cell(decided_by="threshold"),
            **metrics,
            latency_sum_ms=latency_sum,
        )
    RouteCounter.objects.create(
        fleet=fleet,
        route="cloud",
        decided_by="threshold",
        events=2,
        latency_sum_ms=math.inf,
        latency_le=[1, "x"],
    )
    alert_rules_seed(actor=publisher, fleet=fleet)


def test_metrics_api__bad_rows_stored__200_unknown_mean_and_other_fleet_exact(
    bad_rows: None, other_fleet: Any, viewer: Any, client_as: Any
) -> None:
    # Given fleet-a's bad rows and fleet-b's good ones
    client: APIClient = client_as(viewer)

    # When a viewer reads both fleets' figures, with the score histogram
    bad = client.get("/api/v1/metrics/fleets/fleet-a/", {"scores": 1, "group_by": "route"})
    good = client.get("/api/v1/metrics/fleets/fleet-b/", {"scores": 1})

    # Then fleet-a answers, with an unknown (not infinite) mean and finite percentiles
    assert bad.status_code == 200, bad.content
    (group,) = bad.json()["groups"]
    assert group["events"] == 4
    assert group["latency_ms"]["mean"] is None
    assert group["score_mean"] is None
    assert all(math.isfinite(group["latency_ms"][q]) for q in ("p50", "p95", "p99"))
    assert sum(group["score_histogram"]["counts"]) == 2  # only bin 42, twice
    # And fleet-b's figures are exactly its own
    assert good.status_code == 200, good.content
    (figures,) = good.json()["groups"]
    assert figures["events"] == 4
    assert figures["latency_ms"]["mean"] == pytest.approx(50.0)


@pytest.mark.parametrize("window", ["1h", "24h"])
def test_dashboard_api__bad_rows_stored__200(
    bad_rows: None, viewer: Any, client_as: Any, window: str
) -> None:
    # Given fleet-a's bad rows / When its dashboard is read (minute and hour rollups)
    response = client_as(viewer).get("/api/v1/fleets/fleet-a/dashboard", {"window": window})

    # Then it answers
    assert response.status_code == 200, response.content
    # with the stored rows' events counted, not dropped
    assert response.json()["summary"]["events"] == 4


def test_alert_evaluation__bad_rows_stored__evaluates_every_rule(
    bad_rows: None, fleet: Any
) -> None:
    # Given fleet-a's bad rows and its seeded rules (latency ones among them)
    # When its alerts are evaluated
    evaluation = alerts_evaluate(fleet_id=fleet.pk)

    # Then every seeded rule was judged (none failed the run)
    assert evaluation.rules == len(SEED_RULES)


def test_compaction_then_scrape__bad_rows_stored__both_work_other_fleet_counted(
    bad_rows: None, other_fleet: Any, api_client: APIClient
) -> None:
    # Given fleet-a's bad rows and fleet-b's good ones
    # When the compaction runs, and Prometheus scrapes
    rollups_compact()
    response = api_client.get("/metrics")

    # Then the scrape answers, with fleet-b's four decisions and fleet-a's sum spelled +Inf
    assert response.status_code == 200, response.content
    text = response.content.decode()
    assert (
        'controlplane_routing_decisions_total{fleet="fleet-b",route="device",'
        'decided_by="threshold"} 4'
    ) in text
    assert 'controlplane_routing_latency_ms_sum{fleet="fleet-a",route="cloud"} +Inf' in text
    # And the compacted rows hold only the good histogram entries
    compacted = MinuteRollup.objects.get(fleet=Fleet.objects.get(slug="fleet-a"), compacted=True)
    assert compacted.latency_hist == {OVERFLOWING_BUCKET: 4}
    assert compacted.score_hist == {"150": 2, "42": 2}


def test_processing__batch_landed_by_older_version_out_of_range__rest_stored(
    fleet: Any, fleet_key: str
) -> None:
    # Given a batch an older version landed (validated then): two events of 1e308 ms and one
    # good event
    device, _ = device_enroll(fleet_key=fleet_key, device_id="phone-1")
    events = [make_event(latency_ms=1e308), make_event(rtt_ms=1.7e308), make_event()]
    LandedBatch.objects.create(
        fleet=fleet,
        device_pk=device.pk,
        received_at=timezone.now() - timedelta(seconds=5),
        event_count=3,
        payload=json.dumps({"events": events}).encode(),
    )

    # When a worker processes it
    result = landed_batches_process()

    # Then the good event is stored and rolled up, the two others left out, nothing left landed
    assert result.events == 1
    assert list(Event.objects.values_list("event_id", flat=True)) == [
        uuid.UUID(events[2]["event_id"])
    ]
    assert sum(MinuteRollup.objects.values_list("events", flat=True)) == 1
    assert not LandedBatch.objects.exists()
