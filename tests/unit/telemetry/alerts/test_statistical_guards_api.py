"""The API of statistical guards: a start with them shows their interval fields in the guards
API and in the rollout status; each bad new field is a 400 naming it, nothing stored."""

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from telemetry.alerts.models import RolloutGuard, RolloutGuardSet

BASE = "/api/v1/fleets/fleet-a"
Client = Callable[[Any], APIClient]
SEQUENTIAL = {"kind": "sequential", "metric": "alpha", "tolerance": 0.05}


def test_rollout_start_api__statistical_preset_and_exposure__shown_with_the_rollout_status(
    fleet: Any, publish_version: Any, publisher: Any, viewer: Any, client_as: Client
) -> None:
    # Given a published v2
    publish_version(fleet)

    # When a rollout starts with the statistical guards and an exposure per stage
    body = {
        "version": 2,
        "guards": "statistical",
        "min_devices": 5,
        "min_events": 500,
        "stage_limit_minutes": 60,
        "max_extensions": 2,
        "on_expiry": "hold",
    }
    started = client_as(publisher).post(f"{BASE}/rollout/start", body, format="json")

    # Then the rollout status carries the guards, not yet judged, with their settings
    assert started.status_code == 200, started.content
    status = client_as(viewer).get(f"{BASE}/rollout/").json()
    guards = status["guards"]
    assert (guards["min_devices"], guards["min_events"]) == (5, 500)
    assert (guards["stage_limit_minutes"], guards["max_extensions"]) == (60, 2)
    assert guards["on_expiry"] == "hold"
    kinds = [(g["kind"], g["metric"]) for g in guards["guards"]]
    assert kinds == [
        ("sequential", "cloud_share"),
        ("sequential", "fallback_rate"),
        ("sequential", "error_rate"),
        ("sequential", "p95_budget"),
        ("fixed", "privacy_violations"),
    ]
    cloud = guards["guards"][0]
    assert (cloud["confidence"], cloud["per_cell"], cloud["series"]) == (0.95, True, [])
    assert cloud["threshold_text"] == "+5.0 pts tolerated at 95%"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"min_devices": -1}, "min_devices"),
        ({"min_events": "500"}, "min_events"),
        ({"min_events": True}, "min_events"),
        ({"stage_limit_minutes": 10**8}, "stage_limit_minutes"),
        ({"max_extensions": 6}, "max_extensions"),
        ({"on_expiry": "never"}, "on_expiry"),
        ({"on_expiry": "roll\x00back"}, "on_expiry"),
        ({"guards": [{**SEQUENTIAL, "tolerance": -0.1}]}, "guards[0].tolerance"),
        ({"guards": [{**SEQUENTIAL, "confidence": 1}]}, "guards[0].confidence"),
        ({"guards": [{**SEQUENTIAL, "per_cell": {"a": [[[]]]}}]}, "guards[0].per_cell"),
        ({"guards": [{**SEQUENTIAL, "metric": "events"}]}, "guards[0].metric"),
        (
            {"guards": [{**SEQUENTIAL, "metric": "p95_budget", "tolerance": 11}]},
            "guards[0].tolerance",
        ),
        ({"guards": [{**SEQUENTIAL, "threshold": 0.1}]}, "guards[0].threshold"),
        ({"guards": [{**SEQUENTIAL, "kind": "bayes"}]}, "guards[0].kind"),
        ({"guards": "statistical\x00"}, "guards"),
        # Names that are not strings (schemathesis found `"metric": {}` answered 500).
        ({"guards": [{**SEQUENTIAL, "metric": {}}]}, "guards[0].metric"),
        ({"guards": [{**SEQUENTIAL, "metric": ["alpha"]}]}, "guards[0].metric"),
        ({"guards": [{**SEQUENTIAL, "kind": []}]}, "guards[0].kind"),
        (
            {"guards": [{"metric": {}, "comparison": [], "threshold": 0.1}]},
            "guards[0].metric",
        ),
        (
            {"guards": [{"metric": "error_rate", "comparison": {}, "threshold": 0.1}]},
            "guards[0].comparison",
        ),
    ],
)
def test_rollout_guards_api__bad_statistical_field__400_naming_it_nothing_stored(
    fleet: Any,
    publish_version: Any,
    publisher: Any,
    client_as: Client,
    body: dict[str, Any],
    field: str,
) -> None:
    # Given an open rollout guarded by one fixed guard
    publish_version(fleet)
    started = client_as(publisher).post(
        f"{BASE}/rollout/start", {"version": 2, "guards": "default"}, format="json"
    )
    assert started.status_code == 200, started.content
    before = list(RolloutGuard.objects.values_list("kind", "metric", "threshold"))

    # When its guards are replaced with a bad field
    response = client_as(publisher).put(f"{BASE}/rollout/guards", body, format="json")

    # Then a 400 names the field and the guards are as they were
    assert response.status_code == 400, response.content
    assert field in {d["field"] for d in response.json()["error"]["details"]}
    assert list(RolloutGuard.objects.values_list("kind", "metric", "threshold")) == before


def test_rollout_guards_api__viewer_sets_statistical_guards__403_nothing_stored(
    fleet: Any, publish_version: Any, publisher: Any, viewer: Any, client_as: Client
) -> None:
    publish_version(fleet)
    client_as(publisher).post(f"{BASE}/rollout/start", {"version": 2}, format="json")
    response = client_as(viewer).put(
        f"{BASE}/rollout/guards", {"guards": "statistical"}, format="json"
    )
    assert response.status_code == 403
    assert not RolloutGuardSet.objects.exists()


def test_rollout_guards_api__same_statistical_guards_twice__replaced_not_doubled(
    fleet: Any, publish_version: Any, publisher: Any, client_as: Client
) -> None:
    publish_version(fleet)
    client_as(publisher).post(f"{BASE}/rollout/start", {"version": 2}, format="json")
    body = {"guards": [SEQUENTIAL], "min_events": 100}
    for _ in range(2):
        response = client_as(publisher).put(f"{BASE}/rollout/guards", body, format="json")
        assert response.status_code == 200, response.content
    assert list(RolloutGuard.objects.values_list("kind", "metric")) == [("sequential", "alpha")]
