"""The alerts API and page: what they take, and what they refuse (malformed, oversized,
unauthorised, duplicate, stale) with the one error shape and nothing changed."""

from collections.abc import Callable
from typing import Any

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from routing_policies.models import AuditEntry, Rollout
from telemetry.alerts.models import AlertRule, AlertWebhook, RolloutGuardSet
from tests.factories import make_events
from tests.hostile_json import HOSTILE_PARAMS, Hostile, assert_names, with_field

pytestmark = pytest.mark.django_db

BASE = "/api/v1/fleets/fleet-a"
RULES = f"{BASE}/alerts/rules/"
WEBHOOKS = f"{BASE}/alerts/webhooks/"
RULE = {
    "name": "Cloud share jump",
    "metric": "cloud_share",
    "condition": "rises_by",
    "threshold": 0.2,
    "window_minutes": 5,
    "min_samples": 100,
}
Client = Callable[[Any], APIClient]


def assert_error(response: Any, status: int, code: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.content
    error: dict[str, Any] = response.json()["error"]
    assert set(error) == {"code", "message", "details"}
    if code is not None:
        assert error["code"] == code
    return error


def _state() -> tuple[int, int, int, int]:
    return (
        AlertRule.objects.count(),
        AlertWebhook.objects.count(),
        RolloutGuardSet.objects.count(),
        AuditEntry.objects.count(),
    )


@pytest.fixture
def rule(fleet: Any, editor: Any, client_as: Client) -> dict[str, Any]:
    response = client_as(editor).post(RULES, RULE, format="json")
    assert response.status_code == 201, response.content
    body: dict[str, Any] = response.json()
    return body


def test_alert_rules_api__create_read_change_delete(
    rule: dict[str, Any], viewer: Any, editor: Any, client_as: Client
) -> None:
    # Given a rule added by an editor: it starts with "too few samples", never "ok"
    assert rule["state"] == "no_data"
    assert rule["scope"] == "fleet"

    # When a viewer lists the rules
    listed = client_as(viewer).get(RULES).json()["results"]

    # Then it is there, with its state
    assert [(r["name"], r["state"]) for r in listed] == [("Cloud share jump", "no_data")]

    # When the editor changes the threshold with the revision read
    url = f"{RULES}{rule['id']}/"
    changed = client_as(editor).patch(url, {"revision": 1, "threshold": 0.3}, format="json")

    # Then saved, with a new revision and the change audited
    assert changed.status_code == 200, changed.content
    assert (changed.json()["threshold"], changed.json()["revision"]) == (0.3, 2)
    assert AuditEntry.objects.filter(action="alert_rule.changed").count() == 1

    # When the same (now stale) change is sent again
    stale = client_as(editor).patch(url, {"revision": 1, "threshold": 0.4}, format="json")

    # Then 409 and the rule keeps 0.3
    assert_error(stale, 409, "stale_revision")
    assert client_as(viewer).get(url).json()["threshold"] == 0.3

    # When deleted, twice
    assert client_as(editor).delete(url).status_code == 204
    assert client_as(editor).delete(url).status_code == 204
    assert client_as(viewer).get(url).status_code == 404


def test_alert_rules_api__duplicate_name__409_nothing_added(
    rule: dict[str, Any], editor: Any, client_as: Client
) -> None:
    before = _state()
    response = client_as(editor).post(RULES, {**RULE, "threshold": 0.5}, format="json")
    error = assert_error(response, 409, "duplicate_rule")
    assert error["details"][0]["field"] == "name"
    assert _state() == before


@pytest.mark.parametrize(
    ("change", "fields"),
    [
        ({"metric": "colour"}, {"metric"}),
        ({"condition": "sideways"}, {"condition"}),
        ({"threshold": "0.2"}, {"threshold"}),
        ({"threshold": 20}, {"threshold"}),  # a share is a fraction
        ({"threshold": True}, {"threshold"}),
        ({"window_minutes": "10"}, {"window_minutes"}),
        ({"window_minutes": 0}, {"window_minutes"}),
        ({"window_minutes": 361}, {"window_minutes"}),
        ({"min_samples": -1}, {"min_samples"}),
        ({"hysteresis": -0.1}, {"hysteresis"}),
        ({"hysteresis": "0.1"}, {"hysteresis"}),
        ({"hysteresis": 5}, {"hysteresis"}),  # a share metric: a fraction
        ({"scope": "cell", "scope_value": "voice"}, {"scope_value"}),
        ({"scope": "cohort", "scope_value": "canary"}, {"scope_value"}),
        ({"scope": "version", "scope_value": "latest"}, {"scope_value"}),
        ({"name": ""}, {"name"}),
        ({"name": "x" * 121}, {"name"}),
        ({"enabled": "yes"}, {"enabled"}),
        ({"metric": "events", "condition": "rises_by"}, {"condition"}),
        ({"colour": "red"}, {"colour"}),
        ({"metric": "colour", "window_minutes": 0, "threshold": None}, None),
    ],
)
def test_alert_rules_api__bad_fields__400_names_each(
    fleet: Any, editor: Any, client_as: Client, change: dict[str, Any], fields: set[str] | None
) -> None:
    before = _state()
    response = client_as(editor).post(RULES, {**RULE, **change}, format="json")
    error = assert_error(response, 400, "validation_failed")
    named = {detail["field"] for detail in error["details"]}
    assert named == (fields if fields is not None else {"metric", "window_minutes", "threshold"})
    assert _state() == before


@pytest.mark.parametrize(
    "path",
    [RULES, WEBHOOKS, f"{BASE}/rollout/guards", f"{RULES}1/"],
)
def test_alerts_api__malformed_or_not_object_or_oversized__refused_nothing_changed(
    fleet: Any, publisher: Any, client_as: Client, path: str
) -> None:
    before = _state()
    client = client_as(publisher)
    method = "PATCH" if path.endswith("1/") else ("PUT" if path.endswith("guards") else "POST")
    cut = client.generic(method, path, '{"name": "x", "thr', content_type="application/json")
    assert_error(cut, 400, "parse_error")
    for raw in ("[]", "null", '"x"', "7"):
        assert_error(client.generic(method, path, raw, content_type="application/json"), 400)
    big = '{"name": "' + "x" * settings.MAX_REQUEST_BYTES + '"}'
    assert_error(client.generic(method, path, big, content_type="application/json"), 413)
    assert _state() == before


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", RULES),
        ("post", RULES),
        ("get", f"{BASE}/alerts/history/"),
        ("get", WEBHOOKS),
        ("post", WEBHOOKS),
        ("get", f"{BASE}/alerts/deliveries/"),
        ("get", f"{BASE}/rollout/guards"),
        ("put", f"{BASE}/rollout/guards"),
        ("get", "/api/v1/alerts/firing"),
    ],
)
def test_alerts_api__anonymous__401(
    fleet: Any, api_client: APIClient, method: str, path: str
) -> None:
    response = getattr(api_client, method)(path, {}, format="json")
    assert_error(response, 401)


@pytest.mark.parametrize(
    ("who", "method", "path", "body"),
    [
        ("viewer", "post", RULES, RULE),
        ("editor", "post", WEBHOOKS, {"url": "http://127.0.0.1:9/hook"}),
        ("editor", "put", f"{BASE}/rollout/guards", {"guards": "default"}),
        ("nobody", "get", RULES, None),
    ],
)
def test_alerts_api__role_too_low__403_nothing_changed(
    fleet: Any,
    make_user: Any,
    client_as: Client,
    viewer: Any,
    editor: Any,
    who: str,
    method: str,
    path: str,
    body: Any,
) -> None:
    user = {"viewer": viewer, "editor": editor, "nobody": make_user(None, username="n")}[who]
    before = _state()
    assert_error(getattr(client_as(user), method)(path, body, format="json"), 403)
    assert _state() == before


def test_alerts_api__unknown_fleet__404(viewer: Any, client_as: Client) -> None:
    assert_error(client_as(viewer).get("/api/v1/fleets/nope/alerts/rules/"), 404)


def test_alert_webhooks_api__add_duplicate_bad__refused(
    rule: dict[str, Any], publisher: Any, client_as: Client
) -> None:
    client = client_as(publisher)
    made = client.post(
        WEBHOOKS, {"url": "https://hooks.example.com/T01/alerts", "format": "slack"}, format="json"
    )
    assert made.status_code == 201, made.content
    before = _state()
    duplicate = client.post(
        WEBHOOKS, {"url": "https://hooks.example.com/T01/alerts", "format": "slack"}, format="json"
    )
    assert_error(duplicate, 409, "duplicate_webhook")
    for body, field in [
        ({"url": "ftp://hooks.example.com/x"}, "url"),
        ({"url": "not a url"}, "url"),
        ({"url": 7}, "url"),
        ({"url": "https://hooks.example.com/x", "format": "xml"}, "format"),
        ({"url": "https://hooks.example.com/x", "rule_id": 999}, "rule_id"),
        ({"url": "https://hooks.example.com/x", "rule_id": "1"}, "rule_id"),
        ({"url": "https://hooks.example.com/x", "colour": 1}, "colour"),
        ({}, "url"),
    ]:
        error = assert_error(client.post(WEBHOOKS, body, format="json"), 400)
        assert field in {d["field"] for d in error["details"]}, body
    assert _state() == before
    webhook_id = made.json()["id"]
    assert client.delete(f"{WEBHOOKS}{webhook_id}/").status_code == 204
    assert client.delete(f"{WEBHOOKS}{webhook_id}/").status_code == 204


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/hook",
        "http://localhost/hook",
        "http://grafana.localhost/hook",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.5/hook",
        "https://192.168.1.1/hook",
        "http://[::1]:8000/hook",
        "http://[::ffff:127.0.0.1]/hook",
        "http://0.0.0.0:6379/",
        # Other spellings of the same addresses, as libc's inet_aton (and so httpx) reads them
        "http://2130706433:9/",
        "http://0x7f000001:9/",
        "http://0X7F000001:9/",
        "http://127.1:9/",
        "http://0177.0.0.1:9/",
        "http://0x7f.0.0.1:9/",
        "http://017700000001:9/",
        "http://0:6379/",
        "http://10.1/hook",
        "http://127.0.0.1./hook",
        "http://0x7f000001./hook",
        "http://169.254.169.254./latest/meta-data/",
        "http://[::ffff:7f00:1]/hook",
        "http://[0:0:0:0:0:ffff:127.0.0.1]/hook",
        "http://[::]/hook",
        "http://[2002:7f00:1::]/hook",
        "http://[64:ff9b::a9fe:a9fe]/hook",
        "http://[fe80::1%25eth0]/hook",
        "http://１２７.０.０.１/hook",
        "http://LOCALHOST./hook",
    ],
)
def test_alert_webhooks_api__address_inside_the_network__refused_unless_allowed(
    url: str, rule: dict[str, Any], publisher: Any, client_as: Client, settings: Any
) -> None:
    # Given a publisher, and webhooks inside the network not allowed (the default)
    client = client_as(publisher)
    before = _state()

    # When they add a webhook whose host is this machine, a private or link-local address
    error = assert_error(client.post(WEBHOOKS, {"url": url}, format="json"), 400)

    # Then it is refused, saying why and how to allow it, and nothing is stored
    assert [detail["field"] for detail in error["details"]] == ["url"]
    assert "ALERT_WEBHOOK_ALLOW_PRIVATE_NETWORKS" in error["details"][0]["message"]
    assert _state() == before

    # And with the setting on (a receiver on the operator's own network), it is accepted
    settings.ALERT_WEBHOOK_ALLOW_PRIVATE_NETWORKS = True
    assert client.post(WEBHOOKS, {"url": url}, format="json").status_code == 201


@pytest.mark.parametrize(
    "url", ["https://8.8.8.8/hook", "https://hooks.example.com/x", "http://1.2.3/hook"]
)
def test_alert_webhooks_api__public_address_in_any_spelling__accepted(
    url: str, rule: dict[str, Any], publisher: Any, client_as: Client
) -> None:
    # Given a publisher / When they add a webhook on a public address or a name
    response = client_as(publisher).post(WEBHOOKS, {"url": url}, format="json")

    # Then it is added (names are checked where they resolve, at each delivery)
    assert response.status_code == 201, response.content
    # and stored as sent
    assert list(AlertWebhook.objects.values_list("url", flat=True)) == [url]


@pytest.mark.parametrize("hostile", HOSTILE_PARAMS)
@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", RULES, RULE),
        ("PATCH", f"{RULES}{{rule}}/", {"revision": 1}),
        ("POST", WEBHOOKS, {"url": "https://hooks.example.com/x"}),
        ("PUT", f"{BASE}/rollout/guards", {"auto_advance": True}),
    ],
    ids=["rule-create", "rule-change", "webhook-create", "guards-set"],
)
def test_alerts_api__hostile_json_value__400_names_field_nothing_changed(
    rule: dict[str, Any],
    publisher: Any,
    client_as: Client,
    method: str,
    path: str,
    body: dict[str, Any],
    hostile: Hostile,
) -> None:
    # Given a fleet with a rule
    before = _state()

    # When a body carries a field nested 1,000 deep, a NUL, a lone surrogate or NaN
    response = client_as(publisher).generic(
        method,
        path.format(rule=rule["id"]),
        with_field(body, "name", hostile.raw),
        content_type="application/json",
    )

    # Then 400 names the field (not a 500, not a parse error without details), nothing changed
    assert_names(assert_error(response, 400, "validation_failed"), "name", hostile)
    assert _state() == before
    assert AlertRule.objects.get().name == RULE["name"]


@pytest.mark.parametrize("raw", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_alert_rules_api__non_finite_threshold__400_names_threshold(
    fleet: Any, editor: Any, client_as: Client, raw: str
) -> None:
    # Given an editor / When a rule's threshold is NaN or infinite (as some JSON writers emit)
    before = _state()
    response = client_as(editor).generic(
        "POST", RULES, with_field(RULE, "threshold", raw), content_type="application/json"
    )

    # Then 400 names `threshold`, and no rule is added
    error = assert_error(response, 400, "validation_failed")
    assert [d["field"] for d in error["details"]] == ["threshold"]
    assert _state() == before


@pytest.mark.parametrize(
    "name", [" Cloud share", "Cloud share ", "Cloud share\n", "\tCloud", "Cloud\u0007share"]
)
def test_alert_rules_api__name_with_edge_whitespace_or_control__400_not_trimmed(
    rule: dict[str, Any], editor: Any, client_as: Client, name: str
) -> None:
    # Given a fleet with a rule
    before = _state()
    client = client_as(editor)

    # When a rule is added, or the rule renamed, with spaces around its name or a control char
    created = client.post(RULES, {**RULE, "name": name}, format="json")
    renamed = client.patch(f"{RULES}{rule['id']}/", {"revision": 1, "name": name}, format="json")

    # Then both are refused naming `name` (never trimmed into another name), nothing changed
    for response in (created, renamed):
        error = assert_error(response, 400, "validation_failed")
        assert [d["field"] for d in error["details"]] == ["name"]
        assert "trimmed" in error["details"][0]["message"]
    assert _state() == before
    assert AlertRule.objects.get().name == RULE["name"]


@pytest.mark.parametrize(
    "scope_value", ["a/b/c", "text/interactive/secret", "code/interactive/normal"]
)
def test_alert_rules_api__cell_scope_not_in_the_policy__400_names_scope_value(
    fleet: Any, editor: Any, client_as: Client, scope_value: str
) -> None:
    # Given fleet-a, whose versions have the demo's 12 cells
    before = _state()

    # When a rule is scoped to a cell no version has
    response = client_as(editor).post(
        RULES, {**RULE, "scope": "cell", "scope_value": scope_value}, format="json"
    )

    # Then 400 names scope_value (the rule could never have data), and no rule is added
    error = assert_error(response, 400, "validation_failed")
    assert [d["field"] for d in error["details"]] == ["scope_value"]
    assert scope_value in error["details"][0]["message"]
    assert _state() == before


def test_alert_rules_api__cell_scope_in_the_policy__201(
    fleet: Any, editor: Any, client_as: Client
) -> None:
    # Given / When a rule is scoped to a cell of the fleet's table
    response = client_as(editor).post(
        RULES,
        {**RULE, "scope": "cell", "scope_value": "text/interactive/normal"},
        format="json",
    )

    # Then it is added
    assert response.status_code == 201, response.content
    assert response.json()["scope_value"] == "text/interactive/normal"


def test_alerts_api__bad_limit__400(fleet: Any, viewer: Any, client_as: Client) -> None:
    for path in ("alerts/history/", "alerts/deliveries/"):
        error = assert_error(client_as(viewer).get(f"{BASE}/{path}", {"limit": "all"}), 400)
        assert error["details"][0]["field"] == "limit"


def test_rollout_guards_api__set_on_the_open_rollout__shown(
    fleet: Any, publish_version: Any, publisher: Any, viewer: Any, client_as: Client
) -> None:
    # Given no rollout: PUT is a conflict
    body = {"guards": "default", "bake_minutes": {"5": 1, "25": 2, "100": 3}, "auto_advance": True}
    assert_error(client_as(publisher).put(f"{BASE}/rollout/guards", body, format="json"), 409)

    # When a rollout is started through the API with guards
    publish_version(fleet)
    started = client_as(publisher).post(
        f"{BASE}/rollout/start", {"version": 2, **body}, format="json"
    )
    assert started.status_code == 200, started.content

    # Then the guards are readable, judged by nobody yet
    shown = client_as(viewer).get(f"{BASE}/rollout/guards").json()["guards"]
    assert shown["bake_minutes"] == {"5": 1, "25": 2, "100": 3}
    assert shown["auto_advance"] is True
    assert [g["metric"] for g in shown["guards"]] == [
        "fallback_rate",
        "p95_budget",
        "privacy_violations",
        "cloud_share",
    ]
    assert {g["state"] for g in shown["guards"]} == {"watching"}

    # When they are replaced with one guard
    one = {"guards": [{"metric": "error_rate", "comparison": "above", "threshold": 0.05}]}
    replaced = client_as(publisher).put(f"{BASE}/rollout/guards", one, format="json")
    assert replaced.status_code == 200, replaced.content
    assert [g["metric"] for g in replaced.json()["guards"]["guards"]] == ["error_rate"]


def test_rollout_start_api__null_guards_and_bake__the_defaults(
    fleet: Any, publish_version: Any, publisher: Any, viewer: Any, client_as: Client
) -> None:
    # Given a published v2
    publish_version(fleet)

    # When a rollout starts with guards and bake_minutes null (the schema allows null for both)
    body = {"version": 2, "guards": None, "bake_minutes": None}
    started = client_as(publisher).post(f"{BASE}/rollout/start", body, format="json")

    # Then it starts guarded by the default guards, baking 10 minutes at each stage
    assert started.status_code == 200, started.content
    shown = client_as(viewer).get(f"{BASE}/rollout/guards").json()["guards"]
    assert shown["bake_minutes"] == {"5": 10, "25": 10, "100": 10}
    assert len(shown["guards"]) == 4


def test_rollout_start_api__share_threshold_over_one__400_as_the_schema_says(
    fleet: Any, publish_version: Any, publisher: Any, client_as: Client
) -> None:
    # Given a published v2, and the schema's guard shape for shares (a fraction from -1 to 1)
    publish_version(fleet)
    schema = client_as(publisher).get("/api/schema/?format=json").json()
    guards = schema["components"]["schemas"]["RolloutStartInputRequest"]["properties"]["guards"]
    share_guard = guards["oneOf"][1]["items"]["oneOf"][0]["properties"]
    assert "cloud_share" in share_guard["metric"]["enum"]
    assert share_guard["threshold"]["maximum"] == 1

    # When a cloud-share guard's threshold is 5 (500 points)
    bad = {"metric": "cloud_share", "comparison": "above", "threshold": 5}
    response = client_as(publisher).post(
        f"{BASE}/rollout/start", {"version": 2, "guards": [bad]}, format="json"
    )

    # Then the server refuses what the schema refuses, and nothing starts
    error = assert_error(response, 400)
    assert [d["field"] for d in error["details"]] == ["guards[0].threshold"]
    assert not Rollout.objects.exists()


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"guards": [{"metric": "events", "comparison": "above", "threshold": 1}]}, "metric"),
        (
            {"guards": [{"metric": "error_rate", "comparison": "near", "threshold": 1}]},
            "comparison",
        ),
        (
            {"guards": [{"metric": "error_rate", "comparison": "above", "threshold": "1"}]},
            "threshold",
        ),
        ({"guards": []}, "guards"),
        ({"guards": "some"}, "guards"),
        ({"bake_minutes": -1}, "bake_minutes"),
        ({"bake_minutes": {"50": 3}}, "bake_minutes"),
        ({"auto_advance": "yes"}, "auto_advance"),
        ({"window_minutes": 0}, "window_minutes"),
    ],
)
def test_rollout_start_api__bad_guards__400_no_rollout(
    fleet: Any, publish_version: Any, publisher: Any, client_as: Client, extra: Any, field: str
) -> None:
    publish_version(fleet)
    response = client_as(publisher).post(
        f"{BASE}/rollout/start", {"version": 2, **extra}, format="json"
    )
    error = assert_error(response, 400)
    assert any(field in d["field"] for d in error["details"]), error
    assert not Rollout.objects.exists()


# --- the page ------------------------------------------------------------------------------------


def test_alerts_page__viewer_sees_rules_editor_adds_one(
    fleet: Any, viewer: Any, editor: Any, client: Any
) -> None:
    page = f"/fleets/{fleet.slug}/alerts/"
    assert client.get(page).status_code == 302  # anonymous: to the login page
    client.force_login(editor)
    added = client.post(
        f"/fleets/{fleet.slug}/alerts/rules/new/",
        {
            "name": "Errors",
            "metric": "error_rate",
            "condition": "above",
            "threshold": "0.05",
            "window_minutes": "10",
            "min_samples": "100",
            "for_seconds": "0",
            "scope": "fleet",
            "enabled": "on",
        },
    )
    assert added.status_code == 302
    client.force_login(viewer)
    shown = client.get(page)
    assert shown.status_code == 200
    text = shown.content.decode()
    assert "Errors" in text
    assert "above 5.0%" in text
    assert "too few samples" in text
    assert "Add the rule" not in text  # viewers read only


def test_alerts_page__bad_threshold__400_says_so_nothing_added(
    fleet: Any, editor: Any, client: Any
) -> None:
    client.force_login(editor)
    response = client.post(
        f"/fleets/{fleet.slug}/alerts/rules/new/",
        {"name": "x", "metric": "error_rate", "condition": "above", "threshold": "lots"},
    )
    assert response.status_code == 400
    assert "Threshold: A valid number is required." in response.content.decode()
    assert not AlertRule.objects.exists()


def test_alerts_page__viewer_posts__403(fleet: Any, viewer: Any, client: Any) -> None:
    client.force_login(viewer)
    response = client.post(f"/fleets/{fleet.slug}/alerts/rules/new/", {"name": "x"})
    assert response.status_code == 403
    assert not AlertRule.objects.exists()


def test_alerts_reads__query_counts_pinned(
    rule: dict[str, Any],
    phone: tuple[Any, str],
    viewer: Any,
    client_as: Client,
    client: Any,
    django_assert_num_queries: Any,
) -> None:
    # Given seven rules, one of them fired by a privacy violation (history)
    import json

    from telemetry.alerts.services import alert_rules_seed, alerts_evaluate
    from telemetry.ingest.services import landed_batches_process, telemetry_batch_ingest

    fleet_obj = AlertRule.objects.get(pk=rule["id"]).fleet
    alert_rules_seed(actor=None, fleet=fleet_obj)
    leak = make_events(2, route="cloud", privacy_tier="sensitive", deidentified=False)
    telemetry_batch_ingest(device=phone[0], body=json.dumps({"events": leak}).encode())
    landed_batches_process()
    alerts_evaluate(fleet_id=fleet_obj.pk)
    api = client_as(viewer)

    # When a viewer reads the rules and the history through the API, then the alerts page
    # Then each read costs a fixed number of queries: fleet + rules; fleet + history (the role
    # is cached on the forced user after one call)
    api.get(RULES)
    with django_assert_num_queries(2):
        assert len(api.get(RULES).json()["results"]) == 7
    with django_assert_num_queries(2):
        assert api.get(f"{BASE}/alerts/history/").json()["results"]
    client.force_login(viewer)
    client.get(f"/fleets/{fleet_obj.slug}/alerts/")
    # session, user, role groups, fleet, rules, history, webhooks, deliveries, the fleet's
    # freeze (its banner shows on every page of the fleet, docs/governance.md), and its
    # segments' names (the rule form's Segment select, issue 26)
    with django_assert_num_queries(10):
        assert client.get(f"/fleets/{fleet_obj.slug}/alerts/").status_code == 200
    # and they show the privacy rule firing, after its pending step
    states = {row["name"]: row["state"] for row in api.get(RULES).json()["results"]}
    assert states["Privacy violation"] == "firing"
    history = api.get(f"{BASE}/alerts/history/").json()["results"]
    assert [(row["rule"], row["kind"]) for row in history] == [
        ("Privacy violation", "firing"),
        ("Privacy violation", "pending"),
    ]
    page = client.get(f"/fleets/{fleet_obj.slug}/alerts/").content.decode()
    assert "Privacy violation" in page


@pytest.mark.parametrize("metric", [["cloud_share"], {"name": "cloud_share"}, 3, True, None])
def test_alert_rules_api__metric_of_the_wrong_json_type__400_names_metric(
    rule: dict[str, Any], editor: Any, client_as: Client, metric: Any
) -> None:
    # Given a fleet with a rule
    before = _state()
    client = client_as(editor)

    # When a rule is added, or the rule changed, with a metric that is not a string
    created = client.post(RULES, {**RULE, "metric": metric}, format="json")
    changed = client.patch(
        f"{RULES}{rule['id']}/", {"revision": 1, "metric": metric}, format="json"
    )

    # Then both are refused naming `metric` (a list was a 500), and nothing changed
    for response in (created, changed):
        error = assert_error(response, 400, "validation_failed")
        assert "metric" in [d["field"] for d in error["details"]]
    assert _state() == before
    assert AlertRule.objects.get().metric == RULE["metric"]
