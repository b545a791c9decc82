"""`/api/v1/metrics/…` for operators (viewer role) and `/metrics` for Prometheus."""

import json
import re
from datetime import datetime, timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from routing_policies.models import Device
from telemetry.ingest.services import landed_batches_process, telemetry_batch_ingest
from telemetry.rollups.maintenance import rollups_compact
from telemetry.rollups.prometheus import LATENCY_BUCKETS_MS
from tests.factories import make_event

pytestmark = pytest.mark.django_db

METRICS = "/api/v1/metrics/fleets/fleet-a/"


def _ingest_and_roll_up(device: Device, events: list[dict[str, Any]]) -> None:
    telemetry_batch_ingest(device=device, body=json.dumps({"events": events}).encode())
    landed_batches_process()
    rollups_compact()


@pytest.fixture
def reported(phone: tuple[Device, str]) -> None:
    """Four events of phone-1: 3 on the device (one at 900 ms), one in the cloud that failed."""
    _ingest_and_roll_up(
        phone[0],
        [
            make_event(latency_ms=20.0),
            make_event(latency_ms=40.0, decided_by="privacy"),
            make_event(latency_ms=900.0),
            make_event(route="cloud", latency_ms=300.0, ok=False, fallback="cloud_to_device"),
        ],
    )


def test_fleet_metrics_api__viewer__figures_per_group(
    reported: None, viewer: Any, client_as: Any
) -> None:
    # Given / When a viewer asks for the last hour by route, with the score histogram
    response = client_as(viewer).get(METRICS, {"window": "1h", "group_by": "route", "scores": 1})

    # Then each route has its figures
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["fleet"] == "fleet-a"
    assert body["window"]["resolution"] == "minute"
    by_route = {g["route"]: g for g in body["groups"]}
    assert by_route["device"]["events"] == 3
    assert by_route["cloud"]["error_rate"] == 1.0
    assert by_route["cloud"]["fallback_rates"]["cloud_to_device"] == 1.0
    assert by_route["device"]["latency_ms"]["p99"] == pytest.approx(
        900 * 0.98 + 40 * 0.02, rel=0.01
    )
    assert sum(by_route["device"]["score_histogram"]["counts"]) == 3


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"window": "fortnight"}, "window"),
        ({"window": "0m"}, "window"),
        ({"window": "500d"}, "window"),
        ({"group_by": "colour"}, "group_by"),
        ({"version": "v7"}, "version"),
    ],
)
def test_fleet_metrics_api__bad_query__400_names_it(
    fleet: Any, viewer: Any, client_as: Any, params: dict[str, str], field: str
) -> None:
    response = client_as(viewer).get(METRICS, params)
    assert response.status_code == 400
    assert response.json()["error"]["details"][0]["field"] == field


def test_fleet_metrics_api__anonymous_or_no_role__refused(
    fleet: Any, make_user: Any, client_as: Any, api_client: APIClient
) -> None:
    assert api_client.get(METRICS).status_code == 401
    assert client_as(make_user(None)).get(METRICS).status_code == 403


def test_fleet_metrics_api__unknown_fleet__404(viewer: Any, client_as: Any) -> None:
    assert client_as(viewer).get("/api/v1/metrics/fleets/nope/").status_code == 404


def test_fleet_metrics_api__pinned_queries(
    reported: None, viewer: Any, client_as: Any, django_assert_max_num_queries: Any
) -> None:
    # Given four reported events and a logged-in viewer
    client = client_as(viewer)

    # When they read a week grouped by version, cohort and cell
    # Then it costs the fleet lookup, the role check, the rollout whose arms the cohorts are
    # (issue 22: one cohort definition, as the dashboard's) and one rollup query
    with django_assert_max_num_queries(4):
        response = client.get(METRICS, {"window": "7d", "group_by": "version,cohort,cell"})
    assert response.status_code == 200
    # and the four events are in their one group
    (group,) = response.json()["groups"]
    assert group["events"] == 4
    assert (group["version"], group["cohort"]) == (1, "stable")


def test_ingest_status_api__landed_batch_waiting__lag_and_backlog(
    phone: tuple[Device, str], viewer: Any, client_as: Any
) -> None:
    # Given a landed, unprocessed batch of 2 events
    telemetry_batch_ingest(
        device=phone[0], body=json.dumps({"events": [make_event(), make_event()]}).encode()
    )

    # When a viewer asks for the ingest status
    body = client_as(viewer).get("/api/v1/metrics/ingest").json()

    # Then one batch of 2 events is waiting
    assert (body["landed_batches"], body["landed_events"]) == (1, 2)
    assert body["lag_seconds"] >= 0


# --- Prometheus ----------------------------------------------------------------------------------

SAMPLE = re.compile(r"\A([a-z_]+)(\{[^}]*\})? (-?[0-9.e+]+|\+Inf)\Z")


def _samples(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith("#"):
            assert re.match(r"\A# (HELP|TYPE) [a-z_]+ .+\Z", line), line
            continue
        match = SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        out[match.group(1) + (match.group(2) or "")] = float(match.group(3))
    return out


def test_prometheus_metrics__after_rollup__counters_and_cumulative_histogram(
    reported: None, api_client: APIClient
) -> None:
    # Given processed and compacted events / When Prometheus scrapes
    response = api_client.get("/metrics")

    # Then the text format carries the counters by fleet, route and deciding step
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    samples = _samples(response.content.decode())
    labels = '{fleet="fleet-a",route="device",decided_by="threshold"}'
    assert samples["controlplane_routing_decisions_total" + labels] == 2
    errors = (
        'controlplane_routing_errors_total{fleet="fleet-a",route="cloud",decided_by="threshold"}'
    )
    assert samples[errors] == 1
    # and a cumulative latency histogram per route whose +Inf bucket is the count
    buckets = [
        samples[
            f'controlplane_routing_latency_ms_bucket{{fleet="fleet-a",route="device",le="{b:g}"}}'
        ]
        for b in LATENCY_BUCKETS_MS
    ]
    assert buckets == sorted(buckets)
    assert (
        samples['controlplane_routing_latency_ms_bucket{fleet="fleet-a",route="device",le="25"}']
        == 1
    )
    assert (
        samples['controlplane_routing_latency_ms_bucket{fleet="fleet-a",route="device",le="1000"}']
        == 3
    )
    assert (
        samples['controlplane_routing_latency_ms_bucket{fleet="fleet-a",route="device",le="+Inf"}']
        == 3
    )
    assert samples['controlplane_routing_latency_ms_count{fleet="fleet-a",route="device"}'] == 3
    assert samples['controlplane_routing_latency_ms_sum{fleet="fleet-a",route="device"}'] == 960
    assert samples["controlplane_telemetry_ingest_lag_seconds"] == 0


def test_prometheus_metrics__landed_backlog__lag_gauge(
    phone: tuple[Device, str], api_client: APIClient
) -> None:
    # Given a batch accepted but not processed
    telemetry_batch_ingest(device=phone[0], body=json.dumps({"events": [make_event()]}).encode())

    # When Prometheus scrapes / Then the backlog shows
    samples = _samples(api_client.get("/metrics").content.decode())
    assert samples["controlplane_telemetry_landed_batches"] == 1
    assert samples["controlplane_telemetry_landed_events"] == 1
    assert samples["controlplane_telemetry_ingest_lag_seconds"] >= 0


def test_prometheus_metrics__token_set__bearer_required(
    reported: None, api_client: APIClient, settings: Any
) -> None:
    # Given a scrape token set
    settings.METRICS_TOKEN = "scrape-secret"

    # When Prometheus scrapes without it / Then it is refused
    assert api_client.get("/metrics").status_code == 401
    # When it scrapes with it / Then it gets the samples
    api_client.credentials(HTTP_AUTHORIZATION="Bearer scrape-secret")
    assert api_client.get("/metrics").status_code == 200
    scraped = _samples(api_client.get("/metrics").content.decode())
    assert "controlplane_telemetry_landed_batches" in scraped


def test_fleet_metrics_api__day_window__current_hour_and_23_before(
    reported: None, viewer: Any, client_as: Any
) -> None:
    # Given / When a viewer reads the last 24 hours
    body = client_as(viewer).get(METRICS, {"window": "24h"}).json()

    # Then it is read at hour resolution, from the start of the hour 23 hours ago
    window = body["window"]
    start = datetime.fromisoformat(window["from"])
    end = datetime.fromisoformat(window["to"])
    assert window["resolution"] == "hour"
    assert start == end.replace(minute=0, second=0, microsecond=0) - timedelta(hours=23)
    assert body["groups"][0]["events"] == 4


def test_fleet_metrics_api__tokens_reported__mean_tokens_per_task_per_route(
    phone: tuple[Device, str], viewer: Any, client_as: Any
) -> None:
    # Given device tasks of 100 and 200 tokens, cloud tasks of 900 and of unreported tokens,
    # and no draft-refine task
    _ingest_and_roll_up(
        phone[0],
        [
            make_event(tokens=100),
            make_event(tokens=200),
            make_event(route="cloud", tokens=900),
            make_event(route="cloud", tokens=None),
        ],
    )

    # When a viewer reads the last hour, for the fleet and by route
    client = client_as(viewer)
    fleet = client.get(METRICS, {"window": "1h"}).json()["groups"]
    by_route = client.get(METRICS, {"window": "1h", "group_by": "route"}).json()["groups"]

    # Then each route's mean counts its tasks (one without tokens as 0); none on draft-refine
    expected = {"device": 150.0, "cloud": 450.0, "draft_refine": None}
    assert [group["tokens_per_task"] for group in fleet] == [expected]
    assert {g["route"]: g["tokens_per_task"][g["route"]] for g in by_route} == {
        "cloud": 450.0,
        "device": 150.0,
    }
