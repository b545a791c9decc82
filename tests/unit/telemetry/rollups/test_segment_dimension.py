"""The segment as a rollup dimension (issue 26): an event counts in the all-devices rows and in
each named segment its device was in when its batch was processed; the metrics API and the
dashboard filter by a segment's name, and their figures equal a computation straight from the
generated events. Bad segment names are refused naming the field, never read as the fleet."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection

from routing_policies.models import Device
from routing_policies.segments.services import segment_create, segment_update
from routing_policies.services import device_enroll
from telemetry.feedback.services import feedback_batch_ingest, feedback_join
from telemetry.ingest.services import landed_batches_process, telemetry_batch_ingest
from telemetry.models import Event, FleetHourRollup, MinuteRollup, RouteCounter
from telemetry.rollups import LEVELS, Figures, read_rows
from telemetry.rollups.maintenance import rollups_compact
from telemetry.rollups.sketch import exact_quantile
from tests.factories import iso, make_event, make_fleet

pytestmark = pytest.mark.django_db

METRICS = "/api/v1/metrics/fleets/fleet-a/"
DASHBOARD = "/api/v1/fleets/fleet-a/dashboard"
# device id → (platform, attributes): two NPU phones (one iOS), one CPU phone, one that
# reports nothing beyond its platform.
DEVICES: dict[str, tuple[str, dict[str, Any]]] = {
    "npu-android": ("android", {"accelerator": "npu", "memory_gb": 12}),
    "npu-ios": ("ios", {"accelerator": "npu", "memory_gb": 8}),
    "cpu-android": ("android", {"accelerator": "cpu", "memory_gb": 4}),
    "plain-android": ("android", {}),
}
SEGMENTS = {
    "npu": {"attribute": "accelerator", "equals": "npu"},
    "android": {"attribute": "platform", "equals": "android"},
    "big-memory": {"attribute": "memory_gb", "range": {"gte": 8}},
}
# Who is in which segment, written out (not computed with the rule evaluation under test).
MEMBERS = {
    "npu": {"npu-android", "npu-ios"},
    "android": {"npu-android", "cpu-android", "plain-android"},
    "big-memory": {"npu-android", "npu-ios"},
}


@pytest.fixture
def devices(fleet: Any, fleet_key: str, publisher: Any) -> dict[str, Device]:
    for name, rule in SEGMENTS.items():
        segment_create(actor=publisher, fleet=fleet, name=name, rule=rule)
    return {
        device_id: device_enroll(
            fleet_key=fleet_key, device_id=device_id, platform=platform, attributes=attributes
        )[0]
        for device_id, (platform, attributes) in DEVICES.items()
    }


def _generated(device_id: str, rng: random.Random, count: int) -> list[dict[str, Any]]:
    """`count` random events of one device, in the last few minutes."""
    now = datetime.now(UTC)
    events = []
    for _ in range(count):
        route = rng.choice(["device", "device", "cloud", "draft_refine"])
        events.append(
            make_event(
                device_id,
                ts=iso(now - timedelta(seconds=rng.uniform(1, 600))),
                route=route,
                latency_ms=round(rng.lognormvariate(4.0 if route == "device" else 5.5, 0.5), 2),
                ok=rng.random() > 0.1,
                cache_hit=rng.random() < 0.15,
                fallback=rng.choice(["none", "none", "none", "device_to_cloud"]),
                score=round(rng.random(), 3),
            )
        )
    return events


def _send(device: Device, events: list[dict[str, Any]]) -> None:
    telemetry_batch_ingest(device=device, body=json.dumps({"events": events}).encode())


def _expected(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of these events, computed from the events themselves."""
    count = len(events)
    latencies = [e["latency_ms"] for e in events]
    return {
        "events": count,
        "alpha": sum(e["route"] == "device" for e in events) / count,
        "cloud_share": sum(e["route"] == "cloud" for e in events) / count,
        "error_rate": sum(not e["ok"] for e in events) / count,
        "cache_hit_rate": sum(e["cache_hit"] for e in events) / count,
        "fallback_rate": sum(e["fallback"] != "none" for e in events) / count,
        "mean": sum(latencies) / count,
        "p95": exact_quantile(sorted(latencies), 0.95),
    }


def _assert_figures(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert got["events"] == want["events"]
    for name in ("alpha", "cloud_share", "error_rate", "cache_hit_rate", "fallback_rate"):
        assert got[name] == pytest.approx(want[name]), name
    assert got["latency_ms"]["p95"] == pytest.approx(want["p95"], rel=0.03)


@pytest.fixture
def reported(devices: dict[str, Device]) -> dict[str, list[dict[str, Any]]]:
    """Each device's generated events, landed, processed and compacted."""
    rng = random.Random(26)
    sent = {}
    for index, (device_id, device) in enumerate(devices.items()):
        sent[device_id] = _generated(device_id, rng, 60 + 25 * index)
        _send(device, sent[device_id])
    landed_batches_process()
    rollups_compact()
    return sent


def test_metrics_api__segment_filter__figures_equal_the_events_of_its_devices(
    reported: dict[str, list[dict[str, Any]]], viewer: Any, client_as: Any
) -> None:
    # Given four devices' events, and three segments over their attributes
    client = client_as(viewer)
    everything = [e for events in reported.values() for e in events]

    # When the metrics API is asked for each segment, and for the whole fleet
    for name, members in MEMBERS.items():
        response = client.get(METRICS, {"window": "1h", "segment": name})
        assert response.status_code == 200, response.content
        body = response.json()
        (group,) = body["groups"]

        # Then each segment's figures are those of its devices' events alone
        _assert_figures(group, _expected([e for d in members for e in reported[d]]))
        assert group["latency_ms"]["mean"] == pytest.approx(
            _expected([e for d in members for e in reported[d]])["mean"]
        )
        assert body["filters"] == {"segment": name}
    whole = client.get(METRICS, {"window": "1h"}).json()["groups"][0]
    # …and the fleet's counts every event once, however many segments its device is in
    _assert_figures(whole, _expected(everything))


def test_metrics_api__segment_and_grouping__routes_of_the_segment(
    reported: dict[str, list[dict[str, Any]]], viewer: Any, client_as: Any
) -> None:
    # Given / When the NPU segment is grouped by route over 24 hours (hour rollups)
    response = client_as(viewer).get(
        METRICS, {"window": "24h", "segment": "npu", "group_by": "route,task_type"}
    )

    # Then each route's count is that of the NPU devices' events on it
    assert response.status_code == 200, response.content
    npu = [e for d in MEMBERS["npu"] for e in reported[d]]
    by_route = {g["route"]: g["events"] for g in response.json()["groups"]}
    assert by_route == {
        route: sum(e["route"] == route for e in npu) for route in {e["route"] for e in npu}
    }


def test_dashboard__segment_filter__summary_equals_the_events_of_its_devices(
    reported: dict[str, list[dict[str, Any]]], viewer: Any, client_as: Any
) -> None:
    # Given four devices' events
    client = client_as(viewer)
    for window in ("15m", "24h"):
        # When the dashboard is asked for the big-memory segment
        response = client.get(DASHBOARD, {"window": window, "segment": "big-memory"})

        # Then its summary, its series and its grid count that segment's events only
        assert response.status_code == 200, response.content
        body = response.json()
        want = _expected([e for d in MEMBERS["big-memory"] for e in reported[d]])
        _assert_figures(body["summary"], want)
        assert sum(n or 0 for n in body["series"]["events"]) == want["events"]
        assert sum(cell["events"] for cell in body["grid"]["cells"]) == want["events"]
        assert body["view"]["segment"] == "big-memory"
        assert "segment=big-memory" in body["view_key"]


def test_rollups__a_device_in_two_segments__counted_once_per_row_kind(
    reported: dict[str, list[dict[str, Any]]],
) -> None:
    # Given / When events were processed and compacted
    npu_android = len(reported["npu-android"])
    total = sum(len(events) for events in reported.values())
    since = datetime.now(UTC) - timedelta(days=1)
    fleet_id = Device.objects.get(device_id="npu-android").fleet_id

    # Then at every level the all-devices rows count each event once
    for level in LEVELS:
        figures = Figures()
        for row in read_rows(level, fleet_id=fleet_id, since=since):
            figures.add(row)
        assert figures.events == total, level.name
    # …the raw events keep the segments they were counted in
    stored = Event.objects.filter(device_id="npu-android").values_list("segments", flat=True)
    assert len(stored) == npu_android
    assert all(len(ids) == 3 for ids in stored)
    # …and the Prometheus counters (from the all-devices rows) count each event once
    assert sum(RouteCounter.objects.values_list("events", flat=True)) == total


def test_membership__fixed_when_processed__later_changes_count_from_then_on(
    devices: dict[str, Device], fleet: Any, publisher: Any, viewer: Any, client_as: Any
) -> None:
    # Given ten events of the CPU phone, processed while it is outside the NPU segment
    cpu = devices["cpu-android"]
    _send(cpu, [make_event("cpu-android") for _ in range(10)])
    landed_batches_process()

    # When the segment's rule is widened to take CPUs too, and five more events arrive
    segment_update(
        actor=publisher,
        fleet=fleet,
        name="npu",
        revision=1,
        rule={"attribute": "accelerator", "in": ["npu", "cpu"]},
    )
    _send(cpu, [make_event("cpu-android") for _ in range(5)])
    landed_batches_process()

    # Then the segment counts the five processed since, never rewriting the ten before
    response = client_as(viewer).get(METRICS, {"window": "1h", "segment": "npu"})
    assert response.json()["groups"][0]["events"] == 5


def test_late_feedback__joins_the_segment_rows_of_its_event(
    devices: dict[str, Device], viewer: Any, client_as: Any
) -> None:
    # Given an event of the iOS NPU phone, processed, without a quality of its own
    device = devices["npu-ios"]
    event = make_event("npu-ios")
    _send(device, [event])
    landed_batches_process()

    # When its quality arrives later and is joined
    result = feedback_batch_ingest(
        device=device,
        body=json.dumps({"feedback": [{"event_id": event["event_id"], "quality": 0.25}]}).encode(),
    )
    feedback_join(ids=result.ids)

    # Then the segments it was counted in carry it as the fleet's figures do
    client = client_as(viewer)
    for query in ({"segment": "npu"}, {"segment": "big-memory"}, {}):
        (group,) = client.get(METRICS, {"window": "1h", **query}).json()["groups"]
        assert group["mean_quality"] == pytest.approx(0.25), query
        assert (group["quality_count"], group["events"]) == (1, 1), query
    # …and a segment the device is not in has nothing
    assert client.get(METRICS, {"window": "1h", "segment": "android"}).json()["groups"] == []


def test_rows_stored_before__read_as_the_all_devices_rows(fleet: Any) -> None:
    # Given rows written as before segments were a dimension (no segment column named)
    minute = datetime.now(UTC).replace(second=0, microsecond=0)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {MinuteRollup._meta.db_table} (fleet_id, minute, policy_version, "
            "cohort, task_type, latency_budget, privacy_tier, route, events, "
            "fallback_cloud_to_device, fallback_device_to_cloud, cache_hits, errors, "
            "privacy_violations, latency_sum_ms, score_count, score_sum, tokens_sum, "
            "refine_reported, refine_kept, refine_edit_sum, refine_edit_count, quality_count, "
            "quality_sum, shadow_refines, latency_hist, score_hist, refine_hist, kept_hist, "
            "compacted) VALUES (%s, %s, 1, 'stable', 'text', 'interactive', 'normal', "
            "'device', 7, 0, 0, 0, 0, 0, 70.0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, '{}', '{}', '{}', "
            "'{}', true)",
            [fleet.pk, minute],
        )

    # When the fleet's rows are read
    rows = list(read_rows(LEVELS[0], fleet_id=fleet.pk, since=minute - timedelta(minutes=1)))

    # Then they are its all-devices rows
    assert [row.events for row in rows] == [7]
    assert MinuteRollup.objects.get(fleet=fleet).segment == 0
    assert not FleetHourRollup.objects.filter(fleet=fleet).exists()


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("nope", "unknown segment"),
        ("x" * 65, "oversized"),
        ("npu\x00", "NUL"),
        ("NPU", "not a name"),
        ("other-npu", "another fleet's segment"),
    ],
)
@pytest.mark.parametrize("url", [METRICS, DASHBOARD])
def test_segment_filter__bad_value__400_naming_the_field(
    devices: dict[str, Device],
    publisher: Any,
    viewer: Any,
    client_as: Any,
    url: str,
    value: str,
    why: str,
) -> None:
    # Given another fleet with a segment of its own
    other = make_fleet(slug="fleet-b", actor=publisher)
    segment_create(actor=publisher, fleet=other, name="other-npu", rule=SEGMENTS["npu"])

    # When a segment filter names what is not one of this fleet's segments
    response = client_as(viewer).get(url, {"window": "1h", "segment": value})

    # Then it is refused, naming the field
    assert response.status_code == 400, why
    assert "segment" in [d.get("field") for d in response.json()["error"]["details"]], why


def test_dashboard_page__unknown_segment__400_with_the_reason(
    devices: dict[str, Device], viewer: Any, client: Any
) -> None:
    # Given a viewer's session
    client.force_login(viewer)

    # When the page is asked for a segment the fleet does not have, and for one it has
    bad = client.get("/fleets/fleet-a/dashboard/", {"segment": "nope"})
    good = client.get("/fleets/fleet-a/dashboard/", {"segment": "npu"})

    # Then the bad one shows the whole fleet with the reason; the good one offers its segments
    assert bad.status_code == 400
    assert "no segment" in bad.content.decode()
    assert good.status_code == 200
    page = good.content.decode()
    assert 'value="npu" selected' in page
    assert 'value="big-memory"' in page
