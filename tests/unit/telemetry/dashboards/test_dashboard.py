"""The dashboard's figures (selectors.fleet_dashboard) and its API, against events that went
through the real ingest and rollup path; query counts pinned."""

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from controlplane.exceptions import ValidationFailed
from routing_policies.models import Device
from routing_policies.services import device_enroll, rollout_start
from telemetry.dashboards.schemas import parse_view
from telemetry.dashboards.selectors import DashboardView, fleet_dashboard
from telemetry.ingest.services import landed_batches_process, telemetry_batch_ingest
from tests.factories import iso, make_event

pytestmark = pytest.mark.django_db

API = "/api/v1/fleets/fleet-a/dashboard"


def _report(device: Device, events: list[dict[str, Any]]) -> None:
    telemetry_batch_ingest(device=device, body=json.dumps({"events": events}).encode())
    landed_batches_process()


def _minutes_ago(minutes: float) -> str:
    return iso(datetime.now(UTC) - timedelta(minutes=minutes))


@pytest.fixture
def reported(phone: tuple[Device, str]) -> None:
    """Ten minutes ago: 3 text events on the device (one cache hit), 1 failed cloud event that
    fell back; two minutes ago: 2 voice events in the cloud (400 and 600 ms)."""
    ten, two = _minutes_ago(10), _minutes_ago(2)
    _report(
        phone[0],
        [
            make_event(ts=ten, latency_ms=20.0),
            make_event(ts=ten, latency_ms=40.0, cache_hit=True),
            make_event(ts=ten, latency_ms=30.0),
            make_event(
                ts=ten, route="cloud", latency_ms=300.0, ok=False, fallback="cloud_to_device"
            ),
            make_event(ts=two, task_type="voice", route="cloud", latency_ms=400.0),
            make_event(ts=two, task_type="voice", route="cloud", latency_ms=600.0),
        ],
    )


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _index_of(payload: dict[str, Any], minutes_ago: float) -> int:
    moment = datetime.now(UTC) - timedelta(minutes=minutes_ago)
    start = datetime.fromisoformat(payload["buckets"][0].replace("Z", "+00:00"))
    return int((moment - start).total_seconds() // payload["window"]["bucket_seconds"])


def test_fleet_dashboard__hour__headline_series_latency_grid(reported: None, fleet: Any) -> None:
    # Given six reported events / When the last hour's dashboard is computed
    payload = fleet_dashboard(fleet=fleet, view=DashboardView(window="1h"))

    # Then the headline figures count them all
    summary = payload["summary"]
    assert summary["events"] == 6
    assert summary["alpha"] == pytest.approx(3 / 6)
    assert summary["cloud_share"] == pytest.approx(3 / 6)
    assert summary["fallback_rates"]["cloud_to_device"] == pytest.approx(1 / 6)
    assert summary["error_rate"] == pytest.approx(1 / 6)
    assert summary["cache_hit_rate"] == pytest.approx(1 / 6)
    assert summary["privacy_violations"] == 0
    # and the series put them in their minutes, with nothing elsewhere
    assert len(payload["buckets"]) == 60
    assert payload["window"]["resolution"] == "minute"
    series = payload["series"]
    ten, two = _index_of(payload, 10), _index_of(payload, 2)
    assert series["events"][ten] == 4
    assert series["events"][two] == 2
    assert sum(n for n in series["events"] if n is not None) == 6
    assert series["alpha"][ten] == pytest.approx(0.75)
    assert series["cloud_share"][two] == 1.0
    assert series["alpha"][0] is None
    # and latency per route: the cloud's three events over both minutes
    cloud = payload["routes"]["cloud"]
    assert cloud["events"] == 3
    assert cloud["latency_ms"]["p50"] == pytest.approx(400, rel=0.01)
    assert cloud["p95_ms"][two] == pytest.approx(400 + 0.95 * 200, rel=0.01)
    assert payload["routes"]["draft_refine"]["events"] == 0
    # and the grid: the voice cell all cloud, against the policy's budget for that cell
    cells = {
        (c["task_type"], c["latency_budget"], c["privacy_tier"]): c
        for c in payload["grid"]["cells"]
    }
    voice = cells[("voice", "interactive", "normal")]
    assert voice["events"] == 2
    assert voice["cloud_share"] == 1.0
    assert voice["budget_ms"] > 0
    assert voice["mode"]
    assert len(payload["grid"]["cells"]) == 12  # every cell of v1, with or without events
    assert {b["latency_budget"] for b in payload["budgets"]} == {"interactive", "background"}
    # and the time axis marks v1's publication; convergence counts the enrolled phone
    assert [m["label"] for m in payload["markers"]] == ["v1 published"]
    assert payload["convergence"]["devices"] == 1
    assert payload["stable_version"] == 1
    assert payload["rollout"] is None


def test_fleet_dashboard__minutes_without_events__null_not_zero(reported: None, fleet: Any) -> None:
    # Given events ten and two minutes ago, none in the minutes between
    # When the last hour's dashboard is computed
    payload = fleet_dashboard(fleet=fleet, view=DashboardView(window="1h"))

    # Then every minute between is a gap in each series (null), never a 0 a line runs down to
    ten, two = _index_of(payload, 10), _index_of(payload, 2)
    series = payload["series"]
    for index in range(ten + 1, two):
        assert series["events"][index] is None
        assert series["privacy_violations"][index] is None
        assert series["alpha"][index] is None
        assert payload["cohorts"]["stable"]["series"]["events"][index] is None
    # and the minutes that had events keep their counts, 0 violations included
    assert (series["events"][ten], series["privacy_violations"][ten]) == (4, 0)
    # and the buckets are all there: a missing bucket is null, not left out
    assert all(len(values) == len(payload["buckets"]) for values in series.values())


def test_fleet_dashboard__7d_hours_without_events__null_not_zero(
    phone: tuple[Device, str], fleet: Any
) -> None:
    # Given events five hours ago and one hour ago, none in the hours between
    _report(phone[0], [make_event(ts=_minutes_ago(5 * 60)) for _ in range(3)])
    _report(phone[0], [make_event(ts=_minutes_ago(60)) for _ in range(2)])

    # When the 7-day dashboard is computed (hour buckets)
    payload = fleet_dashboard(fleet=fleet, view=DashboardView(window="7d"))

    # Then the hours between are null (a gap), the two hours keep their counts
    events = payload["series"]["events"]
    five, one = _index_of(payload, 5 * 60), _index_of(payload, 60)
    assert (events[five], events[one]) == (3, 2)
    assert events[five + 1 : one] == [None] * (one - five - 1)
    assert events[0] is None


def test_fleet_dashboard__minute_in_progress__marked_partial(
    phone: tuple[Device, str], fleet: Any
) -> None:
    # Given an event in the minute now in progress
    now = datetime.now(UTC)
    _report(phone[0], [make_event(ts=iso(now))])

    # When the dashboard is computed
    payload = fleet_dashboard(fleet=fleet, view=DashboardView(window="1h"), now=now)

    # Then the last bucket is named as the one in progress, from the start of this minute
    window = payload["window"]
    assert window["partial_bucket"] == len(payload["buckets"]) - 1
    assert window["partial_from"] == payload["buckets"][-1]
    assert _at(window["partial_from"]) == now.replace(second=0, microsecond=0)
    # and its events so far are counted there, and the page is told it is not whole yet
    assert payload["series"]["events"][window["partial_bucket"]] == 1
    assert "minute in progress" in payload["captions"]["partial"]


def test_fleet_dashboard__filters__only_matching_rollups(reported: None, fleet: Any) -> None:
    voice = fleet_dashboard(fleet=fleet, view=DashboardView(task_type="voice"))
    assert voice["summary"]["events"] == 2
    assert {c["task_type"] for c in voice["grid"]["cells"]} == {"voice"}
    device = fleet_dashboard(fleet=fleet, view=DashboardView(route="device"))
    assert device["summary"]["events"] == 3
    assert device["summary"]["alpha"] == 1.0
    nothing = fleet_dashboard(fleet=fleet, view=DashboardView(version=2))
    assert nothing["summary"]["events"] == 0
    assert nothing["summary"]["alpha"] is None


def test_fleet_dashboard__24h_and_7d__hour_buckets_same_totals(reported: None, fleet: Any) -> None:
    for window, buckets in (("24h", 24), ("7d", 168)):
        payload = fleet_dashboard(fleet=fleet, view=DashboardView(window=window))
        assert payload["window"]["resolution"] == "hour"
        assert len(payload["buckets"]) == buckets
        assert payload["summary"]["events"] == 6
        assert payload["routes"]["cloud"]["latency_ms"]["p50"] == pytest.approx(400, rel=0.01)


def test_fleet_dashboard__open_rollout__candidate_beside_stable(
    fleet: Any, fleet_key: str, publisher: Any, publish_version: Any
) -> None:
    # Given v2 rolling out at 5% and events of both versions
    publish_version(fleet)
    rollout_start(actor=publisher, fleet=fleet, version=2)
    device, _ = device_enroll(fleet_key=fleet_key, device_id="phone-9", platform="android")
    after_start = _minutes_ago(0)
    _report(
        device,
        [
            make_event("phone-9", ts=after_start, policy_version=1),
            make_event("phone-9", ts=after_start, policy_version=2, route="cloud"),
            make_event("phone-9", ts=after_start, policy_version=2, route="cloud"),
        ],
    )

    # When the dashboard is computed
    payload = fleet_dashboard(fleet=fleet, view=DashboardView())

    # Then each cohort has its own figures on the same buckets, and the rollout is marked
    stable, candidate = payload["cohorts"]["stable"], payload["cohorts"]["candidate"]
    assert (stable["summary"]["events"], candidate["summary"]["events"]) == (1, 2)
    assert candidate["versions"] == [2]
    assert stable["versions"] == [1]
    assert candidate["summary"]["cloud_share"] == 1.0
    assert stable["summary"]["alpha"] == 1.0
    assert len(candidate["series"]["alpha"]) == len(payload["buckets"])
    assert payload["rollout"]["candidate"] == 2
    assert payload["rollout"]["stage"] == 5
    assert [m["label"] for m in payload["markers"]][-1] == "5%"
    assert {row["version"] for row in payload["convergence"]["versions"]} == {1, 2}
    only_candidate = fleet_dashboard(fleet=fleet, view=DashboardView(cohort="candidate"))
    assert only_candidate["summary"]["events"] == 2


@pytest.mark.parametrize(
    ("window", "task_type", "queries"),
    [("15m", None, 7), ("1h", "voice", 7), ("24h", None, 8), ("7d", "voice", 7)],
)
def test_fleet_dashboard__pinned_queries(
    reported: None,
    fleet: Any,
    window: str,
    task_type: str | None,
    queries: int,
    django_assert_num_queries: Any,
) -> None:
    # Given six reported events, two of them voice
    view = DashboardView(window=window, task_type=task_type)

    # When the dashboard is computed for a window, whole or for one task type
    # Then it costs a fixed number of queries: the rollup scan (hour windows: fleet-hour
    # rollups for the series, hour rollups for the grid, unless filtered by task type),
    # routing, open rollout, cells, markers, convergence, and the span of the view's events
    # (the cost per day's: one aggregate of the raw events)
    with django_assert_num_queries(queries):
        payload = fleet_dashboard(fleet=fleet, view=view)
    # and they count every event of the view
    assert payload["summary"]["events"] == (2 if task_type == "voice" else 6)
    assert payload["view"]["window"] == window


def test_fleet_dashboard__pinned_queries_during_rollout(
    reported: None, fleet: Any, publisher: Any, publish_version: Any, django_assert_num_queries: Any
) -> None:
    # Given six reported events and v2 rolling out to 5%
    publish_version(fleet)
    rollout_start(actor=publisher, fleet=fleet, version=2)

    # When the last hour's dashboard is computed
    # Then it costs one query more: the candidate's share of the devices (counted in SQL
    # over their buckets)
    with django_assert_num_queries(8):
        payload = fleet_dashboard(fleet=fleet, view=DashboardView(window="1h"))
    # and shows the rollout beside every event
    assert (payload["rollout"]["candidate"], payload["rollout"]["stage"]) == (2, 5)
    assert payload["summary"]["events"] == 6


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"window": "2h"}, "window"),
        ({"window": ["1h"]}, "window"),
        ({"version": "v"}, "version"),
        ({"version": "0"}, "version"),
        ({"version": "99999999999"}, "version"),
        ({"version": "٣"}, "version"),
        ({"cohort": "canary"}, "cohort"),
        ({"route": "edge"}, "route"),
        ({"task_type": "Voice Memo"}, "task_type"),
        ({"task_type": "x" * 33}, "task_type"),
        ({"task_type": True}, "task_type"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_parse_view__bad_input__names_the_field(params: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationFailed) as caught:
        parse_view(params)
    assert caught.value.details[0]["field"] == field


def test_parse_view__same_view__same_key() -> None:
    a = parse_view({"window": "24h", "task_type": "voice", "version": "v3"})
    b = parse_view({"version": 3, "task_type": "voice", "window": "24h", "route": ""})
    assert a == b
    assert a.key == b.key == "window=24h&version=3&task_type=voice"
    assert parse_view({}).key == "window=1h"


# --- the API ----------------------------------------------------------------------------------


def test_dashboard_api__viewer__payload(reported: None, viewer: Any, client_as: Any) -> None:
    response = client_as(viewer).get(API, {"window": "15m", "route": "cloud"})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["view"]["window"] == "15m"
    assert body["view"]["route"] == "cloud"
    assert body["summary"]["events"] == 3
    assert len(body["buckets"]) == 15


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"window": "fortnight"}, "window"),
        ({"version": "v7x"}, "version"),
        ({"cohort": "both"}, "cohort"),
        ({"route": "satellite"}, "route"),
        ({"tasktype": "voice"}, "tasktype"),
    ],
)
def test_dashboard_api__bad_query__400_names_it(
    fleet: Any, viewer: Any, client_as: Any, params: dict[str, str], field: str
) -> None:
    response = client_as(viewer).get(API, params)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "validation_failed"
    assert error["details"][0]["field"] == field
    assert error["message"]


def test_dashboard_api__oversized_parameter__400(fleet: Any, viewer: Any, client_as: Any) -> None:
    response = client_as(viewer).get(API, {"task_type": "v" * 5000})
    assert response.status_code == 400
    assert response.json()["error"]["details"][0]["field"] == "task_type"


def test_dashboard_api__anonymous_or_no_role__refused(
    fleet: Any, make_user: Any, client_as: Any, api_client: APIClient
) -> None:
    assert api_client.get(API).status_code == 401
    assert client_as(make_user(None)).get(API).status_code == 403


def test_dashboard_api__unknown_fleet__404(viewer: Any, client_as: Any) -> None:
    response = client_as(viewer).get("/api/v1/fleets/nope/dashboard")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_dashboard_api__pinned_queries(
    reported: None, viewer: Any, client_as: Any, django_assert_num_queries: Any
) -> None:
    # Given six reported events and a viewer
    client = client_as(viewer)

    # When the viewer reads the last 24 hours
    # Then it costs the role check, the fleet, then the selector's eight
    with django_assert_num_queries(10):
        response = client.get(API, {"window": "24h"})
    assert response.status_code == 200
    # and the answer counts every event
    body = response.json()
    assert body["view"]["window"] == "24h"
    assert body["summary"]["events"] == 6


def test_dashboard_page__viewer__charts_and_payload(
    reported: None, viewer: Any, client: Any
) -> None:
    client.force_login(viewer)
    response = client.get("/fleets/fleet-a/dashboard/", {"window": "15m"})
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="dashboard-data"' in html
    assert 'id="figure-alerts"' in html
    assert "vendor/plotly.min.js" in html
    bad = client.get("/fleets/fleet-a/dashboard/", {"window": "3y"})
    assert bad.status_code == 400
    assert "`window` must be one of" in bad.content.decode()


def test_dashboard_page__anonymous__login_no_role__403(
    fleet: Any, make_user: Any, client: Any
) -> None:
    assert client.get("/fleets/fleet-a/dashboard/").status_code == 302
    client.force_login(make_user(None))
    assert client.get("/fleets/fleet-a/dashboard/").status_code == 403
