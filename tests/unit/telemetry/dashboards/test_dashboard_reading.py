"""What the dashboard's words and axes say (selectors.fleet_dashboard): the cohort legend names
one rollout's two versions, captions follow the bucket size, a young fleet's time axis starts
where its data does, and each budget line names whose budget it is."""

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from routing_policies.models import Device, Fleet
from routing_policies.services import (
    device_enroll,
    rollout_advance,
    rollout_complete,
    rollout_start,
)
from telemetry.dashboards.selectors import DashboardView, fleet_dashboard
from telemetry.ingest.services import landed_batches_process, telemetry_batch_ingest
from tests.factories import iso, make_event

pytestmark = pytest.mark.django_db


def _report(device: Device, events: list[dict[str, Any]]) -> None:
    telemetry_batch_ingest(device=device, body=json.dumps({"events": events}).encode())
    landed_batches_process()


def _now() -> str:
    """Now: events stamped after the rollout started, so they count in its cohorts."""
    return iso(datetime.now(UTC))


def _at(moment: str) -> datetime:
    return datetime.fromisoformat(moment.replace("Z", "+00:00"))


def test_cohort_legend__second_rollout_in_window__names_only_its_two_versions(
    fleet: Any, fleet_key: str, publisher: Any, publish_version: Any
) -> None:
    # Given v2 rolled out and completed, then v3 rolling out over it, all within the hour,
    # with candidate events of both rollouts and stable events of v1 and v2
    device, _ = device_enroll(fleet_key=fleet_key, device_id="phone-7", platform="android")
    publish_version(fleet, threshold=0.7)
    rollout_start(actor=publisher, fleet=fleet, version=2)
    _report(
        device,
        [
            make_event("phone-7", ts=_now(), policy_version=1),
            make_event("phone-7", ts=_now(), policy_version=2),
        ],
    )
    rollout_advance(actor=publisher, fleet=fleet, to_stage=100)
    rollout_complete(actor=publisher, fleet=fleet)
    publish_version(fleet, threshold=0.8)
    rollout_start(actor=publisher, fleet=fleet, version=3)
    _report(
        device,
        [
            make_event("phone-7", ts=_now(), policy_version=2),
            make_event("phone-7", ts=_now(), policy_version=3, route="cloud"),
            make_event("phone-7", ts=_now(), policy_version=3, route="cloud"),
        ],
    )

    # When the dashboard is computed
    payload = fleet_dashboard(fleet=fleet, view=DashboardView(window="1h"))

    # Then the cohort lines are named after the open rollout alone: no "stable (v1, v2)"
    stable, candidate = payload["cohorts"]["stable"], payload["cohorts"]["candidate"]
    assert stable["label"] == "stable v2"
    assert candidate["label"] == "candidate v3"
    # and they count only those versions' events
    assert candidate["summary"]["events"] == 2
    assert candidate["summary"]["cloud_share"] == 1.0
    assert stable["versions"] == [2]
    assert payload["compared_rollout"]["candidate"] == 3
    # while the fleet's own figures still count every event
    assert payload["summary"]["events"] == 5


def test_cohort_legend__rollout_finished__names_the_last_rollout(
    fleet: Any, fleet_key: str, publisher: Any, publish_version: Any
) -> None:
    # Given v2 rolled out over v1 and completed within the hour
    device, _ = device_enroll(fleet_key=fleet_key, device_id="phone-8", platform="android")
    publish_version(fleet)
    rollout_start(actor=publisher, fleet=fleet, version=2)
    _report(device, [make_event("phone-8", ts=_now(), policy_version=2)])
    rollout_advance(actor=publisher, fleet=fleet, to_stage=100)
    rollout_complete(actor=publisher, fleet=fleet)

    # When the dashboard is computed with no rollout open
    payload = fleet_dashboard(fleet=fleet, view=DashboardView(window="1h"))

    # Then the comparison is labelled with that rollout's versions and its end
    assert payload["rollout"] is None
    assert payload["compared_rollout"]["state"] == "completed"
    assert payload["cohorts"]["candidate"]["label"] == "candidate v2"
    assert payload["cohorts"]["stable"]["label"] == "stable v1"


@pytest.mark.parametrize(
    ("window", "per"), [("15m", "per minute"), ("1h", "per minute"), ("24h", "per hour")]
)
def test_captions__window__name_the_bucket_size_drawn(fleet: Any, window: str, per: str) -> None:
    # Given a fleet / When its dashboard is computed for a window
    payload = fleet_dashboard(fleet=fleet, view=DashboardView(window=window))

    # Then the words beside the charts say the buckets the charts draw
    captions = payload["captions"]
    assert captions["shares"].startswith(f"share of events {per},")
    assert captions["events_axis"] == f"events {per}"
    assert captions["window"].startswith(f"{payload['window']['resolution']} buckets from ")
    other = "per hour" if per == "per minute" else "per minute"
    assert other not in " ".join(captions.values())


def test_time_axis__fleet_five_minutes_old__starts_at_its_first_minutes(
    fleet: Any, phone: tuple[Device, str]
) -> None:
    # Given a fleet created five minutes ago that reported since
    Fleet.objects.filter(pk=fleet.pk).update(created_at=datetime.now(UTC) - timedelta(minutes=5))
    fleet.refresh_from_db()
    _report(phone[0], [make_event(ts=iso(datetime.now(UTC) - timedelta(minutes=4)))])

    # When its default (one hour) dashboard is computed
    payload = fleet_dashboard(fleet=fleet, view=DashboardView())

    # Then the hour is still counted, but the axis starts at its first minutes, not an hour back
    assert len(payload["buckets"]) == 60
    shown = _at(payload["window"]["shown_from"])
    end = _at(payload["buckets"][-1])
    assert timedelta(minutes=4) <= end - shown <= timedelta(minutes=6)
    assert shown <= _at(iso(datetime.now(UTC) - timedelta(minutes=4)))
    assert "buckets from" in payload["captions"]["window"]
    assert payload["captions"]["window"].startswith(f"minute buckets from {shown:%H:%M}")


def test_time_axis__fleet_older_than_the_window__starts_at_the_window(
    fleet: Any, phone: tuple[Device, str]
) -> None:
    # Given a fleet created three hours ago
    Fleet.objects.filter(pk=fleet.pk).update(created_at=datetime.now(UTC) - timedelta(hours=3))
    fleet.refresh_from_db()
    _report(phone[0], [make_event()])

    # When its one-hour dashboard is computed / Then the axis spans the whole hour
    payload = fleet_dashboard(fleet=fleet, view=DashboardView())
    assert payload["window"]["shown_from"] == payload["buckets"][0]


def test_budgets__demo_cells__each_line_names_its_task_types(fleet: Any) -> None:
    # Given the demo's 12 cells / When the dashboard is computed
    payload = fleet_dashboard(fleet=fleet, view=DashboardView())

    # Then every budget line says which task types' cells have that limit
    budgets = payload["budgets"]
    assert budgets
    for budget in budgets:
        assert budget["task_types"], budget
        assert set(budget["task_types"]) <= {"voice", "text", "image"}
    assert sum(b["cells"] for b in budgets) == 12
