"""Alert rules and guards refuse bad input in the API's own words (issue 22): a version scope
names `scope_value` and says what a version is, and a share's threshold is checked against the
range its message and the schema state."""

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from routing_policies.models import AuditEntry, Rollout
from telemetry.alerts.models import AlertRule

pytestmark = pytest.mark.django_db

BASE = "/api/v1/fleets/fleet-a"
RULES = f"{BASE}/alerts/rules/"
RULE = {
    "name": "Errors",
    "metric": "error_rate",
    "condition": "above",
    "threshold": 0.05,
    "window_minutes": 5,
    "min_samples": 100,
}
Client = Callable[[Any], APIClient]


def _refusal(response: Any) -> tuple[list[str], str]:
    assert response.status_code == 400, response.content
    details = response.json()["error"]["details"]
    return [d["field"] for d in details], " ".join(d["message"] for d in details)


@pytest.mark.parametrize("scope_value", ["", "  ", "v", "latest", "0", "-2", "1_0", "٣", "3.0"])
def test_alert_rules_api__version_scope_not_a_number__400_names_scope_value_in_words(
    fleet: Any, editor: Any, client_as: Client, scope_value: str
) -> None:
    # Given an editor, and nothing stored yet
    audits = AuditEntry.objects.count()

    # When a rule is scoped to a version whose number is empty or not a whole number ≥ 1
    response = client_as(editor).post(
        RULES, {**RULE, "scope": "version", "scope_value": scope_value}, format="json"
    )

    # Then 400 names scope_value and says what a version is, never Python's own text
    fields, message = _refusal(response)
    assert fields == ["scope_value"]
    assert "a version number such as 3" in message
    assert "invalid literal" not in message
    assert "int()" not in message
    # And nothing is stored
    assert not AlertRule.objects.exists()
    assert AuditEntry.objects.count() == audits


@pytest.mark.parametrize("scope_value", ["3", "v3", " 3 "])
def test_alert_rules_api__version_scope_a_number__saved_as_that_version(
    fleet: Any, editor: Any, client_as: Client, scope_value: str
) -> None:
    # Given an editor / When a rule is scoped to version 3, as a number or as v3
    response = client_as(editor).post(
        RULES, {**RULE, "scope": "version", "scope_value": scope_value}, format="json"
    )

    # Then it is added
    assert response.status_code == 201, response.content
    assert response.json()["scope"] == "version"


@pytest.mark.parametrize(
    ("condition", "threshold", "words"),
    [
        ("above", -0.05, "a share: a fraction from 0 to 1"),
        ("below", 1.5, "a share: a fraction from 0 to 1"),
        ("rises_by", -0.2, "a change of a share, in points as a fraction from 0 to 1"),
        ("falls_by", 1.01, "a change of a share, in points as a fraction from 0 to 1"),
    ],
)
def test_alert_rules_api__share_threshold_outside_0_to_1__400_says_0_to_1(
    fleet: Any, editor: Any, client_as: Client, condition: str, threshold: float, words: str
) -> None:
    # Given an editor / When a share rule's threshold is outside 0..1 (a negative rise, too:
    # the condition gives the direction)
    response = client_as(editor).post(
        RULES, {**RULE, "condition": condition, "threshold": threshold}, format="json"
    )

    # Then 400 names threshold with the range the check applies, and nothing is stored
    fields, message = _refusal(response)
    assert fields == ["threshold"]
    assert words in message
    assert repr(threshold) in message
    assert not AlertRule.objects.exists()


@pytest.mark.parametrize(("condition", "threshold"), [("above", 0), ("rises_by", 1)])
def test_alert_rules_api__share_threshold_at_the_ends_of_0_to_1__accepted(
    fleet: Any, editor: Any, client_as: Client, condition: str, threshold: float
) -> None:
    # Given an editor / When a share rule's threshold is 0 or 1
    response = client_as(editor).post(
        RULES, {**RULE, "condition": condition, "threshold": threshold}, format="json"
    )

    # Then it is added with that threshold
    assert response.status_code == 201, response.content
    assert response.json()["threshold"] == threshold


def test_alert_rules_api__change_to_a_negative_share__400_rule_unchanged(
    fleet: Any, editor: Any, client_as: Client
) -> None:
    # Given a rule at revision 1
    created = client_as(editor).post(RULES, RULE, format="json").json()

    # When its threshold is changed to -0.1
    response = client_as(editor).patch(
        f"{RULES}{created['id']}/", {"revision": 1, "threshold": -0.1}, format="json"
    )

    # Then 400 names threshold, and the rule keeps 0.05 at revision 1
    fields, message = _refusal(response)
    assert fields == ["threshold"]
    assert "from 0 to 1" in message
    rule = AlertRule.objects.get()
    assert (rule.threshold, rule.revision) == (0.05, 1)


def test_alert_rule_schema__threshold_help_says_0_to_1(publisher: Any, client_as: Client) -> None:
    # Given the generated OpenAPI schema
    schema = client_as(publisher).get("/api/schema/?format=json").json()["components"]["schemas"]

    # Then a rule's threshold is documented as the check applies it
    names = [name for name in schema if name.startswith(("AlertRule", "PatchedAlertRule"))]
    bodies = [name for name in names if "threshold" in schema[name].get("properties", {})]
    assert "AlertRuleCreateRequest" in bodies
    for name in bodies:
        if name == "AlertRule":
            continue  # the answer, not a body
        help_text = schema[name]["properties"]["threshold"]["description"]
        assert "from 0 to 1" in help_text
        assert "-1" not in help_text


def test_alerts_page__version_scope_blank__400_names_scope_value_nothing_added(
    fleet: Any, editor: Any, client: Any
) -> None:
    # Given an editor on the alerts page
    client.force_login(editor)

    # When a rule is added for the version scope with the value left blank
    response = client.post(
        f"/fleets/{fleet.slug}/alerts/rules/new/",
        {
            "name": "Errors on a version",
            "metric": "error_rate",
            "condition": "above",
            "threshold": "0.05",
            "window_minutes": "10",
            "min_samples": "100",
            "for_seconds": "0",
            "scope": "version",
            "scope_value": "",
            "enabled": "on",
        },
    )

    # Then the page says what to fill in, in words, and no rule is added
    assert response.status_code == 400
    text = response.content.decode()
    assert "a version number such as 3" in text
    assert "invalid literal" not in text
    assert not AlertRule.objects.exists()


def _guard_schemas(client: APIClient) -> list[dict[str, Any]]:
    schema = client.get("/api/schema/?format=json").json()
    guards = schema["components"]["schemas"]["RolloutStartInputRequest"]["properties"]["guards"]
    shapes: list[dict[str, Any]] = guards["oneOf"][1]["items"]["oneOf"]
    return shapes


@pytest.mark.parametrize(
    ("comparison", "threshold", "accepted"),
    [
        ("above", -0.01, False),  # a share is never below 0
        ("above", 0.05, True),
        ("above_stable_by", -0.01, True),  # a difference may be: candidate must beat stable
        ("above_stable_by", -1.5, False),
    ],
)
def test_rollout_start_api__share_guard_threshold__server_and_schema_agree(
    fleet: Any,
    publish_version: Any,
    publisher: Any,
    client_as: Client,
    comparison: str,
    threshold: float,
    accepted: bool,
) -> None:
    # Given a published v2, and the schema's fixed guard shape for a share and this comparison
    publish_version(fleet)
    shapes = [
        shape["properties"]
        for shape in _guard_schemas(client_as(publisher))
        if "comparison" in shape["properties"]
        and "error_rate" in shape["properties"]["metric"]["enum"]
        and comparison in shape["properties"]["comparison"]["enum"]
    ]
    assert len(shapes) == 1
    bounds = shapes[0]["threshold"]
    in_schema = bounds["minimum"] <= threshold <= bounds["maximum"]

    # When a rollout starts with an error-rate guard of that threshold
    guard = {"metric": "error_rate", "comparison": comparison, "threshold": threshold}
    response = client_as(publisher).post(
        f"{BASE}/rollout/start", {"version": 2, "guards": [guard]}, format="json"
    )

    # Then the server takes exactly what the schema allows; a refusal names the threshold
    assert in_schema is accepted
    if accepted:
        assert response.status_code == 200, response.content
    else:
        fields, message = _refusal(response)
        assert fields == ["guards[0].threshold"]
        assert ("-1 to 1" if comparison == "above_stable_by" else "0 to 1") in message
        assert not Rollout.objects.exists()
