"""The rollout API under /api/v1/fleets/<slug>/: roles, bad input, duplicates, device list."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.conf import settings
from rest_framework.response import Response
from rest_framework.test import APIClient

from routing_policies.models import AuditEntry, Device, FleetRouting, Rollout, RolloutEvent
from routing_policies.services import (
    device_seen,
    fleet_switch_version,
    rollout_advance,
    rollout_pause,
    rollout_start,
)
from tests.hostile_json import HOSTILE_PARAMS, Hostile, assert_names, with_field

pytestmark = pytest.mark.django_db

FLEET = "/api/v1/fleets/fleet-a"
READS = [f"{FLEET}/rollout/", f"{FLEET}/devices/"]
# user's groups, the fleet, the open rollout (it names both versions: the routing row is not
# read), the count, the page, the fleet's segments (each row says which segments its device is in)
DEVICE_LIST_QUERIES = 6


def _start(fleet: Any, actor: Any) -> None:
    rollout_start(actor=actor, fleet=fleet, version=2)


def _paused(fleet: Any, actor: Any) -> None:
    _start(fleet, actor)
    rollout_pause(actor=actor, fleet=fleet)


def _at_100(fleet: Any, actor: Any) -> None:
    _start(fleet, actor)
    rollout_advance(actor=actor, fleet=fleet, to_stage=100)


def _nothing(fleet: Any, actor: Any) -> None:
    """The fleet as the fixture leaves it: v1 stable, v2 and v3 published, one device."""


@dataclass(frozen=True)
class Action:
    """One operator action, with the state it needs and a body that succeeds from there."""

    name: str
    path: str
    body: dict[str, Any]
    prepare: Callable[[Any, Any], None]
    success: int = 200


ACTIONS = [
    Action("start", f"{FLEET}/rollout/start", {"version": 2}, _nothing),
    Action("advance", f"{FLEET}/rollout/advance", {"to_stage": 25}, _start),
    Action("pause", f"{FLEET}/rollout/pause", {}, _start),
    Action("resume", f"{FLEET}/rollout/resume", {}, _paused),
    Action("complete", f"{FLEET}/rollout/complete", {}, _at_100),
    Action("rollback", f"{FLEET}/rollout/rollback", {"reason": "errors"}, _start),
    Action("switch", f"{FLEET}/switch", {"version": 3}, _nothing),
    Action(
        "cloud-pressure", f"{FLEET}/cloud-pressure", {"theta_offset": 0.1, "ttl_s": 60}, _nothing
    ),
    Action("enrollment-key", f"{FLEET}/enrollment-key", {}, _nothing, 201),
    Action("revoke", f"{FLEET}/devices/phone-1/revoke", {}, _nothing),
]
ACTION_PARAMS = [pytest.param(a, id=a.name) for a in ACTIONS]
# Actions whose body is read as rollout input (start … switch).
ROLLOUT_ACTIONS = [pytest.param(a, id=a.name) for a in ACTIONS[:7]]


@pytest.fixture
def fleet3(fleet: Any, publish_version: Callable[..., Any]) -> Any:
    """fleet-a with v1 (stable), v2 and v3 published, and one enrolled device `phone-1`."""
    publish_version(fleet, threshold=0.7)
    publish_version(fleet, threshold=0.8)
    Device.objects.create(fleet=fleet, device_id="phone-1", token_hash="1" * 64, platform="ios")
    return fleet


def _state() -> tuple[Any, ...]:
    """What a refused request must leave alone."""
    routing = list(FleetRouting.objects.values_list("stable_version_id", "cloud_pressure_until"))
    rollouts = list(Rollout.objects.order_by("pk").values_list("stage", "state"))
    revoked = list(Device.objects.values_list("revoked_at", flat=True))
    return routing, rollouts, revoked, RolloutEvent.objects.count(), AuditEntry.objects.count()


def assert_error(response: Response, status: int, code: str | None = None) -> dict[str, Any]:
    """An error in the API's one JSON shape; returns its `error`."""
    assert response.status_code == status, response.content
    error: dict[str, Any] = response.json()["error"]
    assert set(error) == {"code", "message", "details"}
    if code is not None:
        assert error["code"] == code
    return error


def _post(client: APIClient, action: Action, body: Any = None) -> Response:
    response: Response = client.post(
        action.path, action.body if body is None else body, format="json"
    )
    return response


# --- roles -----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", READS)
def test_rollout_api__anonymous_read__401(api_client: APIClient, fleet3: Any, path: str) -> None:
    # Given nobody logged in
    # When the rollout status or device list is read
    response = api_client.get(path)

    # Then 401
    assert_error(response, 401, "not_authenticated")


@pytest.mark.parametrize("action", ACTION_PARAMS)
def test_rollout_api__anonymous_action__401_nothing_changed(
    api_client: APIClient, fleet3: Any, publisher: Any, action: Action
) -> None:
    # Given a fleet ready for the action
    action.prepare(fleet3, publisher)
    before = _state()

    # When someone not logged in tries it
    response = _post(api_client, action)

    # Then 401 and nothing changed
    assert_error(response, 401, "not_authenticated")
    assert _state() == before


@pytest.mark.parametrize("path", READS)
def test_rollout_api__viewer_read__200(
    client_as: Callable[[Any], APIClient], viewer: Any, fleet3: Any, path: str
) -> None:
    # Given a viewer
    # When they read the rollout status or the device list
    response = client_as(viewer).get(path)

    # Then they see it
    assert response.status_code == 200, response.content
    # as stored: v1 stable with no rollout open, or the fleet's one device on v1
    body = response.json()
    if path.endswith("/rollout/"):
        assert (body["fleet"], body["stable_version"], body["rollout"]) == ("fleet-a", 1, None)
    else:
        devices = [(row["device_id"], row["assigned_version"]) for row in body["results"]]
        assert devices == [("phone-1", 1)]


@pytest.mark.parametrize("role", ["viewer", "editor"])
@pytest.mark.parametrize("action", ACTION_PARAMS)
def test_rollout_api__viewer_or_editor_action__403_nothing_changed(
    client_as: Callable[[Any], APIClient],
    request: pytest.FixtureRequest,
    fleet3: Any,
    publisher: Any,
    action: Action,
    role: str,
) -> None:
    # Given a viewer or an editor, and a fleet ready for the action
    user = request.getfixturevalue(role)
    action.prepare(fleet3, publisher)
    before = _state()

    # When they try it
    response = _post(client_as(user), action)

    # Then 403 names the role needed, nothing changed
    error = assert_error(response, 403, "permission_denied")
    assert "publisher" in error["message"]
    assert _state() == before


@pytest.mark.parametrize("action", ACTION_PARAMS)
def test_rollout_api__publisher_action__done_and_audited(
    client_as: Callable[[Any], APIClient], fleet3: Any, publisher: Any, action: Action
) -> None:
    # Given a publisher and a fleet ready for the action
    action.prepare(fleet3, publisher)
    audited = AuditEntry.objects.count()

    # When they do it
    response = _post(client_as(publisher), action)

    # Then it is done, under their name
    assert response.status_code == action.success, response.content
    entry = AuditEntry.objects.order_by("-id").first()
    assert AuditEntry.objects.count() == audited + 1
    assert entry is not None
    assert entry.actor_name == "publisher"


def test_rollout_api__start__status_shows_stage_since_and_next(
    client_as: Callable[[Any], APIClient], fleet3: Any, publisher: Any
) -> None:
    # Given a fleet on v1
    # When a publisher starts v2
    response = client_as(publisher).post(f"{FLEET}/rollout/start", {"version": 2}, format="json")

    # Then the answer says what runs, at which stage, since when, and what comes next
    body = response.json()
    assert body["stable_version"] == 1
    rollout = body["rollout"]
    assert (rollout["candidate"], rollout["stage"], rollout["state"]) == (2, 5, "active")
    assert rollout["stage_changed_at"]
    assert (rollout["next"], rollout["next_stage"]) == ("advance to 25%", 25)


def test_rollout_api__start__salt_in_answer_status_and_audit_lets_a_device_check_its_bucket(
    client_as: Callable[[Any], APIClient], fleet3: Any, publisher: Any, viewer: Any
) -> None:
    # Given a fleet on v1
    # When a publisher starts v2, and a viewer then reads the rollout and the audit log
    started = client_as(publisher).post(f"{FLEET}/rollout/start", {"version": 2}, format="json")
    status = client_as(viewer).get(f"{FLEET}/rollout/").json()
    audit = client_as(viewer).get(f"{FLEET}/audit/").json()

    # Then the start's answer, the status and the audit entry of the start show the salt
    salt = Rollout.objects.get(fleet=fleet3).salt
    assert started.json()["rollout"]["salt"] == status["rollout"]["salt"] == salt
    entries = audit["results"] if isinstance(audit, dict) else audit
    (start_entry,) = [e for e in entries if e["action"] == "rollout.started"]
    assert start_entry["after"]["salt"] == salt
    # ... from which PROTOCOL.md's formula gives each device the version the server pushes
    import hashlib

    from routing_policies.selectors import fleet_assignment

    assignment = fleet_assignment(fleet3.pk)
    for device_id in (f"phone-{n}" for n in range(200)):
        digest = hashlib.sha256(f"{salt}:{device_id}".encode()).hexdigest()
        mine = 2 if int(digest[:8], 16) % 10000 < status["rollout"]["stage"] * 100 else 1
        assert mine == assignment.version_for(device_id)


def test_rollout_api__start_with_holdback__at_100_the_status_and_the_buckets_show_it(
    client_as: Callable[[Any], APIClient], fleet3: Any, publisher: Any
) -> None:
    # Given v2 started holding 5% back, advanced to 100%
    api = client_as(publisher)
    started = api.post(f"{FLEET}/rollout/start", {"version": 2, "holdback": 5}, format="json")
    at_100 = api.post(f"{FLEET}/rollout/advance", {"to_stage": 100}, format="json").json()

    # Then the rollout reports the holdback and the candidate's share of buckets, and the
    # devices with buckets from 9500 up still get v1
    from routing_policies.assignment import bucket
    from routing_policies.selectors import fleet_assignment

    assert started.json()["rollout"]["holdback"] == 5
    rollout = at_100["rollout"]
    assert (rollout["stage"], rollout["holdback"], rollout["candidate_share"]) == (100, 5, 95)
    assignment = fleet_assignment(fleet3.pk)
    for device_id in (f"phone-{n}" for n in range(300)):
        expected = 2 if bucket(rollout["salt"], device_id) < 9500 else 1
        assert assignment.version_for(device_id) == expected


def test_rollout_api__unknown_fleet__404(
    client_as: Callable[[Any], APIClient], publisher: Any, fleet3: Any
) -> None:
    # Given a publisher
    client = client_as(publisher)

    # When they read or act on a fleet that does not exist
    responses = [
        client.get("/api/v1/fleets/nope/rollout/"),
        client.get("/api/v1/fleets/nope/devices/"),
        client.post("/api/v1/fleets/nope/rollout/start", {"version": 2}, format="json"),
        client.post("/api/v1/fleets/nope/rollout/rollback", {}, format="json"),
        client.post("/api/v1/fleets/fleet-a/devices/ghost/revoke", {}, format="json"),
    ]

    # Then 404 each time
    for response in responses:
        assert_error(response, 404, "not_found")


# --- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize("action", [*ROLLOUT_ACTIONS, ACTION_PARAMS[7]])
def test_rollout_api__malformed_json__400_nothing_changed(
    client_as: Callable[[Any], APIClient], fleet3: Any, publisher: Any, action: Action
) -> None:
    # Given a fleet ready for the action
    action.prepare(fleet3, publisher)
    before = _state()

    # When the body is cut off mid-JSON
    response = client_as(publisher).generic(
        "POST", action.path, '{"version": 2, "to_stage', content_type="application/json"
    )

    # Then 400 and nothing changed
    assert_error(response, 400, "parse_error")
    assert _state() == before


@pytest.mark.parametrize("hostile", HOSTILE_PARAMS)
@pytest.mark.parametrize("action", [*ROLLOUT_ACTIONS, ACTION_PARAMS[7]])
def test_rollout_api__hostile_json_value__400_names_field_nothing_changed(
    client_as: Callable[[Any], APIClient],
    fleet3: Any,
    publisher: Any,
    action: Action,
    hostile: Hostile,
) -> None:
    # Given a fleet ready for the action
    action.prepare(fleet3, publisher)
    before = _state()

    # When a good body carries a field nested 1,000 deep, a NUL, a lone surrogate or NaN
    response = client_as(publisher).generic(
        "POST",
        action.path,
        with_field(action.body, "reason", hostile.raw),
        content_type="application/json",
    )

    # Then 400 names the field, and nothing changed
    assert_names(assert_error(response, 400, "validation_failed"), "reason", hostile)
    assert _state() == before


@pytest.mark.parametrize("raw", ["[]", "null", '"advance"', "7"])
@pytest.mark.parametrize("action", ROLLOUT_ACTIONS)
def test_rollout_api__body_not_an_object__400_nothing_changed(
    client_as: Callable[[Any], APIClient], fleet3: Any, publisher: Any, action: Action, raw: str
) -> None:
    # Given a fleet ready for the action
    action.prepare(fleet3, publisher)
    before = _state()

    # When the body is JSON but not an object
    response = client_as(publisher).generic(
        "POST", action.path, raw, content_type="application/json"
    )

    # Then 400, and it was not read as "no options" (nothing changed)
    assert_error(response, 400)
    assert _state() == before


@pytest.mark.parametrize("action", ACTION_PARAMS)
def test_rollout_api__body_over_limit__413_nothing_changed(
    client_as: Callable[[Any], APIClient], fleet3: Any, publisher: Any, action: Action
) -> None:
    # Given a fleet ready for the action
    action.prepare(fleet3, publisher)
    before = _state()

    # When the body is over 1 MiB
    body = {**action.body, "padding": "x" * settings.MAX_REQUEST_BYTES}
    response = _post(client_as(publisher), action, body)

    # Then 413 and nothing changed
    assert_error(response, 413, "payload_too_large")
    assert _state() == before


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("rollout/start", {}, "version"),
        ("rollout/start", {"version": "two"}, "version"),
        ("rollout/start", {"version": 0}, "version"),
        ("rollout/start", {"version": 2, "holdback": 51}, "holdback"),
        ("rollout/start", {"version": 2, "holdback": -1}, "holdback"),
        ("rollout/start", {"version": 2, "holdback": 100}, "holdback"),
        ("rollout/start", {"version": 2, "holdback": "5"}, "holdback"),
        ("rollout/start", {"version": 2, "holdback": 2.5}, "holdback"),
        ("rollout/start", {"version": 2, "holdback": True}, "holdback"),
        ("rollout/advance", {"to_stage": 50}, "to_stage"),
        ("switch", {}, "version"),
    ],
)
def test_rollout_api__bad_field__400_names_it(
    client_as: Callable[[Any], APIClient],
    fleet3: Any,
    publisher: Any,
    path: str,
    body: Any,
    field: str,
) -> None:
    # Given a fleet with v2 rolling out (so advance has something to advance)
    if path == "rollout/advance":
        _start(fleet3, publisher)
    before = _state()

    # When a field is missing or wrong
    response = client_as(publisher).post(f"{FLEET}/{path}", body, format="json")

    # Then 400 names it, nothing changed
    error = assert_error(response, 400)
    assert field in {d["field"] for d in error["details"]}
    assert _state() == before


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ('{"theta_offset": NaN, "ttl_s": 60}', None),
        ('{"theta_offset": Infinity, "ttl_s": 60}', None),
        ('{"theta_offset": 1.5, "ttl_s": 60}', "theta_offset"),
        ('{"theta_offset": -1.01, "ttl_s": 60}', "theta_offset"),
        ('{"theta_offset": null, "ttl_s": 60}', "theta_offset"),
        ('{"theta_offset": true, "ttl_s": 60}', "theta_offset"),
        ('{"theta_offset": "0.1", "ttl_s": 60}', "theta_offset"),
        ('{"ttl_s": 60}', "theta_offset"),
        ('{"theta_offset": 0.1, "ttl_s": 0}', "ttl_s"),
        ('{"theta_offset": 0.1, "ttl_s": -5}', "ttl_s"),
        ('{"theta_offset": 0.1, "ttl_s": 86401}', "ttl_s"),
        ('{"theta_offset": 0.1, "ttl_s": true}', "ttl_s"),
        ('{"theta_offset": 0.1, "ttl_s": 30.5}', "ttl_s"),
        ('{"theta_offset": 0.1, "ttl_s": "60"}', "ttl_s"),
        ('{"theta_offset": 0.1, "ttl_s": false}', "ttl_s"),
        ('{"theta_offset": 0.1, "ttl_s": 1e9}', "ttl_s"),
        ('{"theta_offset": 0.1}', "ttl_s"),
    ],
)
def test_cloud_pressure_api__bad_value__400_nothing_stored(
    client_as: Callable[[Any], APIClient], fleet3: Any, publisher: Any, raw: str, field: str | None
) -> None:
    # Given a fleet without a nudge
    before = _state()

    # When the offset is not a finite number in [-1, 1] or the TTL not whole seconds ≥ 1
    response = client_as(publisher).generic(
        "POST", f"{FLEET}/cloud-pressure", raw, content_type="application/json"
    )

    # Then 400 (naming the field when the JSON itself parsed), nothing stored
    error = assert_error(response, 400)
    if field is not None:
        assert error["details"][0]["field"] == field
    assert _state() == before


# --- duplicates ------------------------------------------------------------------------------


def test_rollout_api__double_advance_to_same_stage__second_changes_nothing(
    client_as: Callable[[Any], APIClient], fleet3: Any, publisher: Any
) -> None:
    # Given v2 at 5%
    _start(fleet3, publisher)
    client = client_as(publisher)

    # When "advance to 25%" is double-clicked
    first = client.post(f"{FLEET}/rollout/advance", {"to_stage": 25}, format="json")
    trail = _state()
    second = client.post(f"{FLEET}/rollout/advance", {"to_stage": 25}, format="json")

    # Then both answer 25%, and the second click did nothing
    assert first.json()["rollout"]["stage"] == second.json()["rollout"]["stage"] == 25
    assert _state() == trail


@pytest.mark.parametrize("path", ["rollout/rollback", "rollout/pause", "switch", "rollout/start"])
def test_rollout_api__double_click__second_changes_nothing(
    client_as: Callable[[Any], APIClient], fleet3: Any, publisher: Any, path: str
) -> None:
    # Given a fleet ready for the action (a rollout for rollback and pause)
    if path in ("rollout/rollback", "rollout/pause"):
        _start(fleet3, publisher)
    body = {"version": 2 if path == "rollout/start" else 3}
    client = client_as(publisher)

    # When it is clicked twice
    first = client.post(f"{FLEET}/{path}", body, format="json")
    trail = _state()
    second = client.post(f"{FLEET}/{path}", body, format="json")

    # Then both succeed with the same answer, and the second did nothing
    assert first.status_code == second.status_code == 200, second.content
    assert first.json()["rollout"] == second.json()["rollout"]
    assert first.json()["stable_version"] == second.json()["stable_version"]
    assert _state() == trail


def test_rollout_api__start_other_version_during_rollout__409(
    client_as: Callable[[Any], APIClient], fleet3: Any, publisher: Any
) -> None:
    # Given v2 rolling out
    _start(fleet3, publisher)
    before = _state()

    # When v3 is started, or the fleet switched, or completion asked at 5%
    client = client_as(publisher)
    responses = {
        "rollout_in_progress": client.post(f"{FLEET}/rollout/start", {"version": 3}, format="json"),
        "not_at_full_stage": client.post(f"{FLEET}/rollout/complete", {}, format="json"),
    }
    switch = client.post(f"{FLEET}/switch", {"version": 3}, format="json")

    # Then 409 each time, saying why, and nothing changed
    for code, response in responses.items():
        assert_error(response, 409, code)
    assert_error(switch, 409, "rollout_in_progress")
    assert _state() == before


def test_rollout_api__advance_while_paused__409(
    client_as: Callable[[Any], APIClient], fleet3: Any, publisher: Any
) -> None:
    # Given a paused rollout
    _paused(fleet3, publisher)

    # When someone advances
    response = client_as(publisher).post(f"{FLEET}/rollout/advance", {}, format="json")

    # Then 409 says to resume first
    assert_error(response, 409, "paused")


# --- device list -----------------------------------------------------------------------------


def test_device_list_api__filters__version_online_platform(
    client_as: Callable[[Any], APIClient], fleet3: Any, publisher: Any, viewer: Any
) -> None:
    # Given phone-1 (iOS, offline) and phone-2 (Android, online), the fleet switched to v3
    phone2 = Device.objects.create(fleet=fleet3, device_id="phone-2", token_hash="2" * 64)
    Device.objects.filter(pk=phone2.pk).update(platform="android")
    device_seen(device_pk=phone2.pk, connected=True)
    fleet_switch_version(actor=publisher, fleet=fleet3, version=3)
    client = client_as(viewer)

    def ids(query: str) -> list[str]:
        return [d["device_id"] for d in client.get(f"{FLEET}/devices/?{query}").json()["results"]]

    # When the viewer filters the list
    # Then each filter keeps exactly the matching devices
    assert ids("") == ["phone-1", "phone-2"]
    assert ids("online=true") == ["phone-2"]
    assert ids("online=false") == ["phone-1"]
    assert ids("platform=ios") == ["phone-1"]
    assert ids("version=3") == ["phone-1", "phone-2"]
    assert ids("version=1") == []
    row = client.get(f"{FLEET}/devices/?online=true").json()["results"][0]
    assert (row["assigned_version"], row["online"], row["revoked"]) == (3, True, False)


def test_device_list_api__bad_number__400(
    client_as: Callable[[Any], APIClient], fleet3: Any, viewer: Any
) -> None:
    # Given a viewer
    # When a filter is not a number
    response = client_as(viewer).get(f"{FLEET}/devices/?version=two")

    # Then 400
    assert_error(response, 400)


def test_device_list_api__limit_and_offset__count_next_previous_and_every_device_once(
    client_as: Callable[[Any], APIClient], fleet3: Any, viewer: Any
) -> None:
    # Given 250 devices (phone-1 and 249 more)
    Device.objects.bulk_create(
        Device(
            fleet=fleet3,
            device_id=f"dev-{index:03d}",
            token_hash=f"{index:064d}",
            platform="android",
        )
        for index in range(249)
    )
    client = client_as(viewer)

    # When a client reads the default page, then follows `next` to the end
    first = client.get(f"{FLEET}/devices/").json()
    seen = [row["device_id"] for row in first["results"]]
    url = first["next"]
    pages = 1
    while url:
        body = client.get(url).json()
        seen.extend(row["device_id"] for row in body["results"])
        url = body["next"]
        pages += 1

    # Then the first page holds 200 with the total count and a next link, and the pages
    # together hold every device once, in order
    assert first["count"] == 250
    assert len(first["results"]) == 200
    assert first["previous"] is None
    assert first["next"].endswith(f"{FLEET}/devices/?limit=200&offset=200")
    assert pages == 2
    assert seen == sorted(d.device_id for d in Device.objects.filter(fleet=fleet3))

    # And a smaller limit with an offset and a filter pages through that filter only
    body = client.get(f"{FLEET}/devices/?platform=android&limit=10&offset=240").json()
    assert body["count"] == 249
    assert [row["device_id"] for row in body["results"]] == [
        "dev-240",
        "dev-241",
        "dev-242",
        "dev-243",
        "dev-244",
        "dev-245",
        "dev-246",
        "dev-247",
        "dev-248",
    ]
    assert body["next"] is None
    assert "offset=230" in body["previous"]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=ten", "limit"),
        ("offset=-1", "offset"),
        ("offset=x", "offset"),
    ],
)
def test_device_list_api__limit_or_offset_out_of_bounds__400_naming_it(
    client_as: Callable[[Any], APIClient], fleet3: Any, viewer: Any, query: str, field: str
) -> None:
    # Given a viewer
    # When they ask for a page size or offset the API does not serve
    response = client_as(viewer).get(f"{FLEET}/devices/?{query}")

    # Then 400 names the parameter instead of quietly serving another page size
    error = assert_error(response, 400)
    assert [detail["field"] for detail in error["details"]] == [field]


def test_device_list_api__version_filter_during_rollout__paged_in_the_database(
    client_as: Callable[[Any], APIClient], fleet3: Any, publisher: Any, viewer: Any
) -> None:
    # Given 40 devices and v2 at 25% over v1
    Device.objects.bulk_create(
        Device(fleet=fleet3, device_id=f"dev-{index:03d}", token_hash=f"{index:064d}")
        for index in range(39)
    )
    rollout_start(actor=publisher, fleet=fleet3, version=2)
    rollout_advance(actor=publisher, fleet=fleet3, to_stage=25)
    client = client_as(viewer)
    everyone = client.get(f"{FLEET}/devices/?limit=1000").json()["results"]
    on_v2 = [row["device_id"] for row in everyone if row["assigned_version"] == 2]

    # When the candidate's devices are listed five at a time
    body = client.get(f"{FLEET}/devices/?version=2&limit=5").json()
    rest = client.get(f"{FLEET}/devices/?version=2&limit=5&offset=5").json()

    # Then the count is the candidate cohort's, and the pages hold its devices in order
    assert body["count"] == len(on_v2)
    assert [row["device_id"] for row in body["results"] + rest["results"]] == on_v2[:10]
    assert all(row["assigned_version"] == 2 for row in body["results"])


@pytest.mark.parametrize("devices", [1, 61])
def test_device_list_api__n_devices_during_rollout__pinned_query_count(
    client_as: Callable[[Any], APIClient],
    fleet3: Any,
    publisher: Any,
    viewer: Any,
    django_assert_num_queries: Any,
    devices: int,
) -> None:
    # Given N devices and a rollout open (the version filter is computed from its buckets)
    Device.objects.bulk_create(
        Device(fleet=fleet3, device_id=f"dev-{index:03d}", token_hash=f"{index:064d}")
        for index in range(devices - 1)
    )
    rollout_start(actor=publisher, fleet=fleet3, version=2)
    Device.objects.update(acked_version=1)  # so v1's page is never empty, whatever the buckets
    client = client_as(viewer)

    # When a page of v1's devices is listed
    with django_assert_num_queries(DEVICE_LIST_QUERIES):
        response = client.get(f"{FLEET}/devices/?version=1")

    # Then it costs the same number of queries whatever N is
    assert response.json()["count"] == devices
    # and the page holds every one of them, each on v1
    results = response.json()["results"]
    listed = {row["device_id"] for row in results}
    assert listed == {"phone-1", *(f"dev-{index:03d}" for index in range(devices - 1))}
    assert {row["acked_version"] for row in results} == {1}


def test_device_revoke_api__twice__revoked_once(
    client_as: Callable[[Any], APIClient], fleet3: Any, publisher: Any
) -> None:
    # Given an enrolled device
    client = client_as(publisher)

    # When it is revoked twice
    first = client.post(f"{FLEET}/devices/phone-1/revoke", {}, format="json")
    second = client.post(f"{FLEET}/devices/phone-1/revoke", {}, format="json")

    # Then it is revoked from the first moment, and audited once
    assert first.json()["revoked_at"] == second.json()["revoked_at"]
    assert first.json()["revoked_at"] is not None
    assert AuditEntry.objects.filter(action="device.revoked").count() == 1
