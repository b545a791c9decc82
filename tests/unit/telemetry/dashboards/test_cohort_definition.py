"""One cohort definition (issue 22): the dashboard's cohort lines, its `?cohort=` filter and the
metrics API's cohort grouping and filter count the same events (docs/telemetry.md, "Cohorts")."""

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from routing_policies.models import Device
from routing_policies.services import device_enroll, rollout_rollback, rollout_start
from telemetry.dashboards.selectors import DashboardView, fleet_dashboard
from telemetry.ingest.services import landed_batches_process, telemetry_batch_ingest
from tests.factories import iso, make_event

pytestmark = pytest.mark.django_db

METRICS = "/api/v1/metrics/fleets/fleet-a/"


def _report(device: Device, events: list[dict[str, Any]]) -> None:
    telemetry_batch_ingest(device=device, body=json.dumps({"events": events}).encode())
    landed_batches_process()


def _refines(version: int, kept: int, changed: int) -> list[dict[str, Any]]:
    now = iso(datetime.now(UTC))
    return [
        make_event(
            "phone-1", ts=now, policy_version=version, route="draft_refine", refine_changed=c
        )
        for c in [False] * kept + [True] * changed
    ]


def test_cohort__straggler_of_rolled_back_candidate__in_no_cohort_on_every_figure(
    fleet: Any, fleet_key: str, publisher: Any, publish_version: Any, viewer: Any, client_as: Any
) -> None:
    # Given v2 rolled out and rolled back, a device still on v2 reporting after the rollback
    # (attributed stable at ingest), then v3 rolling out over v1
    device, _ = device_enroll(fleet_key=fleet_key, device_id="phone-1", platform="android")
    publish_version(fleet, threshold=0.7)
    rollout_start(actor=publisher, fleet=fleet, version=2)
    rollout_rollback(actor=publisher, fleet=fleet, reason="test")
    publish_version(fleet, threshold=0.8)
    rollout_start(actor=publisher, fleet=fleet, version=3)
    _report(device, _refines(1, kept=6, changed=4))  # stable v1: 10 reports, kept 0.6
    _report(device, _refines(2, kept=1, changed=9))  # the v2 straggler: 10 reports, kept 0.1
    _report(device, _refines(3, kept=4, changed=1))  # candidate v3: 5 reports, kept 0.8

    # When the dashboard is read whole and filtered to each cohort, and the metrics API
    # grouped by cohort and filtered to each
    whole = fleet_dashboard(fleet=fleet, view=DashboardView(window="1h"))
    client = client_as(viewer)
    grouped = client.get(METRICS, {"window": "1h", "group_by": "cohort"}).json()
    by_cohort = {group["cohort"]: group for group in grouped["groups"]}

    # Then each cohort is one arm of the open rollout on every figure: stable is v1's 10
    # reports (kept 0.6), candidate v3's 5, and the straggler's v2 reports are in neither
    for cohort, reported, kept in (("stable", 10, 0.6), ("candidate", 5, 0.8)):
        filtered = fleet_dashboard(fleet=fleet, view=DashboardView(window="1h", cohort=cohort))
        api = client.get(METRICS, {"window": "1h", "cohort": cohort}).json()["groups"]
        line = whole["cohorts"][cohort]["summary"]
        assert line["refine_reported"] == reported
        assert line["draft_kept_rate"] == pytest.approx(kept)
        assert filtered["summary"]["refine_reported"] == reported
        assert filtered["summary"]["draft_kept_rate"] == pytest.approx(kept)
        assert by_cohort[cohort]["refine_reported"] == reported
        assert by_cohort[cohort]["draft_kept_rate"] == pytest.approx(kept)
        assert [group["refine_reported"] for group in api] == [reported]
    assert by_cohort[None]["refine_reported"] == 10
    # and the API says which version each cohort counts, as the dashboard's legend does
    assert grouped["cohorts"] == {"stable": 1, "candidate": 3}
    assert whole["cohorts"]["stable"]["label"] == "stable v1"
    assert whole["cohorts"]["candidate"]["label"] == "candidate v3"
    # while the fleet's own figures count every event
    assert whole["summary"]["refine_reported"] == 25


def test_cohort__version_filter_outside_the_cohort__counts_nothing(
    fleet: Any, fleet_key: str, publisher: Any, publish_version: Any, viewer: Any, client_as: Any
) -> None:
    # Given v2 rolling out over v1, with events of both
    device, _ = device_enroll(fleet_key=fleet_key, device_id="phone-1", platform="android")
    publish_version(fleet, threshold=0.7)
    rollout_start(actor=publisher, fleet=fleet, version=2)
    _report(device, _refines(1, kept=2, changed=0) + _refines(2, kept=1, changed=0))

    # When the stable cohort is asked for the candidate's version
    view = DashboardView(window="1h", cohort="stable", version=2)
    payload = fleet_dashboard(fleet=fleet, view=view)
    api = client_as(viewer).get(METRICS, {"window": "1h", "cohort": "stable", "version": 2})

    # Then both answer no events, not v2's
    assert payload["summary"]["events"] == 0
    assert api.status_code == 200
    assert api.json()["groups"] == []
