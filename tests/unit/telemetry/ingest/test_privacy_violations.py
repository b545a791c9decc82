"""Privacy violations as PROTOCOL.md's extensions define them, counted where operators read
them: the metrics API and the seeded "Privacy violation" alert.

The fleet runs the demo's table: text/interactive/sensitive may upload, de-identified;
voice/interactive/sensitive may not upload at all; the normal tier has no rule.
"""

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from routing_policies.models import Device
from telemetry.alerts.models import AlertRule
from telemetry.alerts.services import alert_rules_seed, alerts_evaluate
from telemetry.ingest.services import landed_batches_process, telemetry_batch_ingest
from tests.factories import make_event

pytestmark = pytest.mark.django_db

METRICS = "/api/v1/metrics/fleets/fleet-a/"
SENSITIVE_TEXT = {"task_type": "text", "privacy_tier": "sensitive"}
LOCAL_VOICE = {"task_type": "voice", "privacy_tier": "sensitive", "decided_by": "policy"}

# (what happened, the event as a device reports it, violations counted)
CASES = [
    # The cause of the steady demo's alert: a cache hit on a cloud-routed sensitive cell, as
    # the SDK reported it before `uploaded` (not de-identified: nothing was sent).
    ("cache hit, old device", {**SENSITIVE_TEXT, "route": "cloud", "cache_hit": True}, 0),
    (
        "cache hit, new device",
        {**SENSITIVE_TEXT, "route": "cloud", "cache_hit": True, "uploaded": False},
        0,
    ),
    ("sent de-identified", {**SENSITIVE_TEXT, "route": "cloud", "deidentified": True}, 0),
    ("sent raw where de-identification is required", {**SENSITIVE_TEXT, "route": "cloud"}, 1),
    ("refined raw", {**SENSITIVE_TEXT, "route": "draft_refine", "uploaded": True}, 1),
    (
        "device failed, raw fallback to the cloud (old device)",
        {**SENSITIVE_TEXT, "route": "device", "fallback": "device_to_cloud"},
        1,
    ),
    (
        "cloud call failed offline: nothing sent",
        {**SENSITIVE_TEXT, "route": "cloud", "fallback": "cloud_to_device", "uploaded": False},
        0,
    ),
    ("answered on the device", {**SENSITIVE_TEXT, "route": "device"}, 0),
    ("normal tier sent raw", {"route": "cloud"}, 0),
    ("local-only cell, on the device", {**LOCAL_VOICE, "route": "device"}, 0),
    (
        "local-only cell, sent even de-identified",
        {**LOCAL_VOICE, "route": "device", "uploaded": True, "deidentified": True},
        1,
    ),
]


def _report(device: Device, events: list[dict[str, Any]]) -> None:
    telemetry_batch_ingest(device=device, body=json.dumps({"events": events}).encode())
    landed_batches_process()


@pytest.mark.parametrize(
    ("event", "expected"), [case[1:] for case in CASES], ids=[case[0] for case in CASES]
)
def test_privacy_violations__each_kind_of_event__counted_by_its_cells_rule(
    phone: tuple[Device, str], viewer: Any, client_as: Any, event: dict[str, Any], expected: int
) -> None:
    # Given a device reporting one kind of event, three times
    _report(phone[0], [make_event(**event) for _ in range(3)])

    # When an operator reads the fleet's figures
    response = client_as(viewer).get(METRICS, {"window": "1h"})

    # Then violations are counted only where data left the device against its cell's rule
    assert response.status_code == 200, response.content
    groups = response.json()["groups"]
    assert sum(group["privacy_violations"] for group in groups) == 3 * expected


def test_privacy_violation_alert__raw_uploads__names_the_cell_version_and_count(
    fleet: Any, phone: tuple[Device, str]
) -> None:
    # Given the seeded rules, cache hits on a cloud-routed sensitive cell (never violations)
    # and two raw uploads from it
    alert_rules_seed(actor=None, fleet=fleet)
    cached = {**SENSITIVE_TEXT, "route": "cloud", "cache_hit": True}
    _report(phone[0], [make_event(**cached) for _ in range(20)])
    alerts_evaluate(fleet_id=fleet.pk, now=datetime.now(UTC))
    quiet = AlertRule.objects.get(fleet=fleet, name="Privacy violation")
    _report(phone[0], [make_event(**SENSITIVE_TEXT, route="cloud") for _ in range(2)])

    # When the rules are judged
    alerts_evaluate(fleet_id=fleet.pk, now=datetime.now(UTC) + timedelta(seconds=1))

    # Then the cache hits left it ok, and the uploads fire it, naming cell, version and count
    rule = AlertRule.objects.get(fleet=fleet, name="Privacy violation")
    assert quiet.state == "ok", quiet.last_message
    assert rule.state == "firing"
    assert rule.last_message == (
        "privacy violations 2 (alert if above 0); in text/interactive/sensitive v1: 2"
    )
