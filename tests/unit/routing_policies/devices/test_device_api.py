"""Devices over HTTP: enrolment with the fleet key, tokens stored hashed, the polling path."""

from collections.abc import Callable
from typing import Any

import pytest
from django.apps import apps
from django.conf import settings
from django.db import connection
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.response import Response
from rest_framework.test import APIClient

from routing_policies.assignment import bucket
from routing_policies.models import Device, PolicyVersion
from routing_policies.services import device_revoke, rollout_advance, rollout_start
from tests.factories import PASSWORD
from tests.hostile_json import HOSTILE_PARAMS, Hostile, assert_names, with_field

pytestmark = pytest.mark.django_db

ENROLL = "/api/v1/devices/enroll"
POLICY = "/api/v1/devices/me/policy"


def _enrol(client: APIClient, fleet_key: str, device_id: str = "phone-1", **extra: Any) -> Response:
    body = {"fleet_key": fleet_key, "device_id": device_id, "platform": "android", **extra}
    response: Response = client.post(ENROLL, body, format="json")
    return response


def _token(client: APIClient, fleet_key: str, device_id: str = "phone-1") -> str:
    response = _enrol(client, fleet_key, device_id)
    assert response.status_code == 201, response.content
    token: str = response.json()["device_token"]
    return token


def _as_device(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def _error_code(response: Response) -> str:
    code: str = response.json()["error"]["code"]
    return code


# --- enrolment -------------------------------------------------------------------------------


def test_device_enroll__fleet_key__201_token_shown_once_and_device_listed(
    api_client: APIClient, fleet: Any, fleet_key: str
) -> None:
    # Given a fleet's enrolment key
    # When a phone enrols with it
    response = _enrol(api_client, fleet_key, "phone-1", model="Pixel 9", sdk="edge-sdk/1.2")

    # Then it gets a token, and the registry knows the phone
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["device_token"].startswith("dt_")
    assert len(body["device_token"]) > 40
    assert (body["device_id"], body["fleet"]) == ("phone-1", "fleet-a")
    device = Device.objects.get(fleet=fleet, device_id="phone-1")
    assert (device.platform, device.model, device.sdk) == ("android", "Pixel 9", "edge-sdk/1.2")


def test_device_enroll__token__only_its_hash_stored_anywhere(
    api_client: APIClient, fleet: Any, fleet_key: str
) -> None:
    # Given a freshly enrolled phone
    token = _token(api_client, fleet_key)

    # When every row of every table is read back
    tables = set(connection.introspection.table_names())
    stored = [
        str(row)
        for model in apps.get_models()
        if model._meta.db_table in tables
        for row in model._default_manager.values_list()  # every column
    ]

    # Then neither the token nor the fleet key appears in plain text, only the token's hash
    assert not any(token in row for row in stored)
    assert not any(fleet_key in row for row in stored)
    assert Device.objects.get(device_id="phone-1").token_hash not in token


def test_device_enroll__bad_fleet_key__401_nothing_enrolled(
    api_client: APIClient, fleet: Any, fleet_key: str
) -> None:
    # Given a fleet with a key
    # When a phone enrols with a wrong key, or before any key was issued for another fleet
    response = _enrol(api_client, fleet_key + "x")

    # Then 401 and no device is created
    assert response.status_code == 401, response.content
    assert _error_code(response) == "bad_fleet_key"
    assert not Device.objects.exists()


def test_device_enroll__fleet_without_key__empty_key_refused(
    api_client: APIClient, fleet: Any
) -> None:
    # Given a fleet that never issued an enrolment key
    # When a phone enrols with an empty key
    response = _enrol(api_client, "")

    # Then it is refused and no device is created
    assert response.status_code in (400, 401), response.content
    assert not Device.objects.exists()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"device_id": ""}, "device_id"),
        ({"device_id": "has space"}, "device_id"),
        ({"device_id": "-leading-dash"}, "device_id"),
        ({"device_id": "x" * 129}, "device_id"),
        ({"device_id": "evil\nnewline"}, "device_id"),
        ({"device_id": 12345}, "device_id"),
        ({"device_id": ["phone-1"]}, "device_id"),
        ({"device_id": None}, "device_id"),
        ({"platform": 7}, "platform"),
        ({"platform": "p" * 65}, "platform"),
        ({"model": {"name": "pixel"}}, "model"),
        ({"sdk": True}, "sdk"),
        ({"fleet_key": 123}, "fleet_key"),
    ],
)
def test_device_enroll__bad_field__400_names_it(
    api_client: APIClient, fleet: Any, fleet_key: str, change: dict[str, Any], field: str
) -> None:
    # Given a valid enrolment request
    body = {"fleet_key": fleet_key, "device_id": "phone-1", "platform": "android", **change}

    # When one field is malformed or of the wrong type
    response = api_client.post(ENROLL, body, format="json")

    # Then 400 names that field, and nothing is enrolled
    assert response.status_code == 400, response.content
    assert field in {d["field"] for d in response.json()["error"]["details"]}
    assert not Device.objects.exists()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"device_id": "abc\n"}, "device_id"),
        ({"device_id": "abc "}, "device_id"),
        ({"device_id": " abc"}, "device_id"),
        ({"device_id": "\tabc"}, "device_id"),
        ({"device_id": "abc\r\n"}, "device_id"),
        ({"device_id": "ab\u0085c"}, "device_id"),
        ({"platform": "android\n"}, "platform"),
        ({"platform": " android"}, "platform"),
        ({"platform": "   "}, "platform"),
        ({"model": "Pixel 8 "}, "model"),
        ({"model": "Pixel\u00078"}, "model"),
        ({"sdk": "edge-sdk/1.0\t"}, "sdk"),
        ({"fleet_key": "fk_abc\n"}, "fleet_key"),
    ],
)
def test_device_enroll__edge_whitespace_or_control_char__400_names_it_never_trimmed(
    api_client: APIClient, fleet: Any, fleet_key: str, change: dict[str, Any], field: str
) -> None:
    # Given a valid enrolment request
    body = {"fleet_key": fleet_key, "device_id": "abc", "platform": "android", **change}

    # When an id or name carries leading/trailing whitespace or a control character
    response = api_client.post(ENROLL, body, format="json")

    # Then 400 names that field (it is not trimmed and enrolled as "abc"), nothing is enrolled
    assert response.status_code == 400, response.content
    assert [d["field"] for d in response.json()["error"]["details"]] == [field]
    assert not Device.objects.exists()


def test_device_enroll__inner_space_in_a_name__201_kept_as_sent(
    api_client: APIClient, fleet: Any, fleet_key: str
) -> None:
    # Given / When a device enrols with a model name that has a space inside
    response = _enrol(api_client, fleet_key, model="Pixel 8 Pro")

    # Then it is enrolled with that name as sent
    assert response.status_code == 201, response.content
    assert Device.objects.get().model == "Pixel 8 Pro"


@pytest.mark.parametrize("field", ["device_id", "platform", "extra"])
@pytest.mark.parametrize("hostile", HOSTILE_PARAMS)
def test_device_enroll__hostile_json_value__400_names_field_nothing_enrolled(
    api_client: APIClient, fleet: Any, fleet_key: str, hostile: Hostile, field: str
) -> None:
    # Given a valid enrolment request
    body = {"fleet_key": fleet_key, "device_id": "phone-1", "platform": "android"}

    # When one field is nested 1,000 deep, holds a NUL or a lone surrogate, or is NaN/Infinity
    response = api_client.generic(
        "POST", ENROLL, with_field(body, field, hostile.raw), content_type="application/json"
    )

    # Then 400 names that field (never a 500 nor a parse error without details), none enrolled
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "validation_failed"
    assert_names(error, field, hostile)
    assert not Device.objects.exists()


@pytest.mark.parametrize(
    ("path", "allow"),
    [
        (ENROLL, "POST, OPTIONS"),
        (POLICY, "GET, HEAD, OPTIONS"),
        ("/api/v1/telemetry", "POST, OPTIONS"),
    ],
)
@pytest.mark.parametrize("method", ["TRACE", "PUT", "PATCH", "DELETE", "CONNECT", "BREW"])
def test_device_endpoints__undeclared_method__405_with_allow_before_auth(
    api_client: APIClient, fleet: Any, path: str, allow: str, method: str
) -> None:
    # Given no token (a device endpoint would otherwise ask for one first)
    # When a method the endpoint does not serve is used
    response = api_client.generic(method, path, "{}", content_type="application/json")

    # Then 405 in the error shape, with the methods it does serve
    assert response.status_code == 405, response.content
    assert response.json()["error"]["code"] == "method_not_allowed"
    assert response["Allow"] == allow


@pytest.mark.parametrize("missing", ["fleet_key", "device_id"])
def test_device_enroll__missing_field__400(
    api_client: APIClient, fleet: Any, fleet_key: str, missing: str
) -> None:
    # Given an enrolment request without a required field
    body = {"fleet_key": fleet_key, "device_id": "phone-1"}
    del body[missing]

    # When it is sent
    response = api_client.post(ENROLL, body, format="json")

    # Then 400 names the field
    assert response.status_code == 400, response.content
    assert missing in {d["field"] for d in response.json()["error"]["details"]}


@pytest.mark.parametrize("raw", ['{"fleet_key": "fk_', "[]", "null", '"phone-1"'])
def test_device_enroll__malformed_body__400(
    api_client: APIClient, fleet: Any, fleet_key: str, raw: str
) -> None:
    # Given a body that is not a JSON object
    # When it is sent
    response = api_client.generic("POST", ENROLL, raw, content_type="application/json")

    # Then 400, nothing enrolled
    assert response.status_code == 400, response.content
    assert not Device.objects.exists()


def test_device_enroll__body_over_limit__413(
    api_client: APIClient, fleet: Any, fleet_key: str
) -> None:
    # Given an enrolment padded over 1 MiB
    # When it is sent
    response = _enrol(api_client, fleet_key, sdk="x" * settings.MAX_REQUEST_BYTES)

    # Then 413 and nothing enrolled
    assert response.status_code == 413, response.content
    assert not Device.objects.exists()


def test_device_enroll__same_device_again__token_rotated_old_one_401(
    api_client: APIClient, fleet: Any, fleet_key: str
) -> None:
    # Given an enrolled phone
    old = _token(api_client, fleet_key)

    # When the app is reinstalled and enrols again
    new = _token(api_client, fleet_key)

    # Then the new token works, the old one is refused, and it is still one device
    assert new != old
    assert _as_device(new).get(POLICY).status_code == 200
    assert _as_device(old).get(POLICY).status_code == 401
    assert Device.objects.filter(device_id="phone-1").count() == 1


def test_device_enroll__same_id_in_two_fleets__two_devices(
    api_client: APIClient, fleet: Any, fleet_key: str, publisher: Any
) -> None:
    # Given two fleets, each with its own key
    from routing_policies.services import fleet_enrollment_key_rotate
    from tests.factories import make_fleet

    other = make_fleet(slug="fleet-b", actor=publisher)
    other_key = fleet_enrollment_key_rotate(actor=publisher, fleet=other)

    # When the same device id enrols in both
    token_a = _token(api_client, fleet_key)
    token_b = _token(api_client, other_key)

    # Then both tokens work, each for its own fleet
    assert _as_device(token_a).get(POLICY).json()["fleet"] == "fleet-a"
    assert _as_device(token_b).get(POLICY).json()["fleet"] == "fleet-b"


# --- polling ---------------------------------------------------------------------------------


def test_device_policy__device_token__200_document_and_etag(
    api_client: APIClient, fleet: Any, fleet_key: str
) -> None:
    # Given an enrolled phone on a fleet running v1
    token = _token(api_client, fleet_key)

    # When it polls
    response = _as_device(token).get(POLICY)

    # Then it gets v1's document with v1's ETag
    assert response.status_code == 200, response.content
    v1 = PolicyVersion.objects.get(fleet=fleet, number=1)
    assert response.headers["ETag"] == v1.etag
    body = response.json()
    assert (body["fleet"], body["version"], body["etag"]) == ("fleet-a", 1, v1.etag)
    assert len(body["cells"]) == 12


def test_device_policy__if_none_match_current__304_empty(
    api_client: APIClient, fleet: Any, fleet_key: str
) -> None:
    # Given a phone that already holds v1
    device = _as_device(_token(api_client, fleet_key))
    etag = device.get(POLICY).headers["ETag"]

    # When it polls with that ETag (also as a weak tag, or among others)
    responses = [
        device.get(POLICY, HTTP_IF_NONE_MATCH=etag),
        device.get(POLICY, HTTP_IF_NONE_MATCH=f"W/{etag}"),
        device.get(POLICY, HTTP_IF_NONE_MATCH=f'"v0-old", {etag}'),
    ]

    # Then 304 with no body each time
    for response in responses:
        assert response.status_code == 304
        assert response.content == b""
        assert response.headers["ETag"] == etag


def test_device_policy__if_none_match_stale__200_new_document(
    api_client: APIClient,
    fleet: Any,
    fleet_key: str,
    publisher: Any,
    publish_version: Callable[..., Any],
) -> None:
    # Given a phone holding v1, then the fleet rolled to v2 at 100%
    device = _as_device(_token(api_client, fleet_key))
    old_etag = device.get(POLICY).headers["ETag"]
    publish_version(fleet, threshold=0.75)
    rollout_start(actor=publisher, fleet=fleet, version=2)
    rollout_advance(actor=publisher, fleet=fleet, to_stage=100)

    # When it polls with v1's ETag
    response = device.get(POLICY, HTTP_IF_NONE_MATCH=old_etag)

    # Then it gets v2
    assert response.status_code == 200
    assert response.json()["version"] == 2
    assert response.headers["ETag"] != old_etag


def test_device_policy__during_rollout__each_device_gets_its_bucket_version(
    api_client: APIClient,
    fleet: Any,
    fleet_key: str,
    publisher: Any,
    publish_version: Callable[..., Any],
) -> None:
    # Given 60 phones and v2 rolling out at 25%
    tokens = {f"phone-{i:02d}": _token(api_client, fleet_key, f"phone-{i:02d}") for i in range(60)}
    publish_version(fleet, threshold=0.75)
    rollout = rollout_start(actor=publisher, fleet=fleet, version=2)
    rollout_advance(actor=publisher, fleet=fleet, to_stage=25)

    # When every phone polls
    got = {d: _as_device(t).get(POLICY).json()["version"] for d, t in tokens.items()}

    # Then exactly the phones whose bucket is below 2500 get v2, the others v1
    expected = {d: 2 if bucket(rollout.salt, d) < 2500 else 1 for d in tokens}
    assert got == expected


@pytest.mark.parametrize(
    "header",
    [
        "Bearer dt_not-a-real-token",
        "Bearer ",
        "Bearer",
        "Token dt_whatever",
        "dt_whatever",
        "Bearer " + "dt_" + "x" * 500,
    ],
)
def test_device_policy__bad_token__401(
    api_client: APIClient, fleet: Any, fleet_key: str, header: str
) -> None:
    # Given an enrolled phone (so tokens exist)
    _token(api_client, fleet_key)

    # When a request carries a wrong, empty or foreign token
    response = api_client.get(POLICY, HTTP_AUTHORIZATION=header)

    # Then 401 asks for a bearer token
    assert response.status_code == 401, response.content
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


def test_device_policy__no_token__401(api_client: APIClient, fleet: Any) -> None:
    # Given no credentials
    # When the policy is polled
    response = api_client.get(POLICY)

    # Then 401
    assert response.status_code == 401


def test_device_policy__revoked_token__401(
    api_client: APIClient, fleet: Any, fleet_key: str, publisher: Any
) -> None:
    # Given a phone whose token an operator revoked
    token = _token(api_client, fleet_key)
    device_revoke(actor=publisher, device=Device.objects.get(device_id="phone-1"))

    # When it polls
    response = _as_device(token).get(POLICY)

    # Then 401
    assert response.status_code == 401


def test_device_policy__operator_session__not_a_device_refused(fleet: Any, publisher: Any) -> None:
    # Given a publisher logged in through the browser
    browser = APIClient()
    browser.login(username="publisher", password=PASSWORD)

    # When the browser calls the device endpoint
    response = browser.get(POLICY)

    # Then it is refused: operators are not devices
    assert response.status_code in (401, 403)


@pytest.mark.parametrize("scheme", ["Token", "Bearer"])
def test_device_policy__operator_api_token__not_a_device_refused(
    api_client: APIClient, fleet: Any, publisher: Any, scheme: str
) -> None:
    # Given a publisher's API token
    token = Token.objects.create(user=publisher)

    # When it is used on the device endpoint, as a Token or as a Bearer
    response = api_client.get(POLICY, HTTP_AUTHORIZATION=f"{scheme} {token.key}")

    # Then it is refused
    assert response.status_code in (401, 403)


def test_device_token__operator_endpoints__refused(
    api_client: APIClient, fleet: Any, fleet_key: str
) -> None:
    # Given an enrolled phone
    token = _token(api_client, fleet_key)

    # When its token is used on operator endpoints
    device = _as_device(token)
    responses = [
        device.get("/api/v1/fleets/fleet-a/rollout/"),
        device.post("/api/v1/fleets/fleet-a/rollout/start", {"version": 1}, format="json"),
    ]

    # Then it is refused: devices are not operators
    for response in responses:
        assert response.status_code in (401, 403)
    # and no rollout was stored
    assert not fleet.rollouts.exists()


def test_device_list__mixed_transports__each_row_says_its_channel_api_and_page(
    api_client: APIClient, fleet: Any, fleet_key: str, viewer: Any, client_as: Any
) -> None:
    # Given a phone on the WebSocket and a car on MQTT, both online (the car by its birth)
    _token(api_client, fleet_key, "phone-1")
    _token(api_client, fleet_key, "car-1")
    Device.objects.filter(device_id="car-1").update(transport="mqtt", connected=True)

    # When a viewer lists the fleet's devices and opens the devices page
    rows = client_as(viewer).get("/api/v1/fleets/fleet-a/devices/").json()["results"]
    browser = Client()
    browser.force_login(viewer)
    answer = browser.get("/fleets/fleet-a/devices/")
    assert answer.status_code == 200
    page = answer.content.decode()

    # Then each row says the channel it connected over, and the page marks the MQTT one
    assert {r["device_id"]: (r["transport"], r["online"]) for r in rows} == {
        "car-1": ("mqtt", True),
        "phone-1": ("ws", False),
    }
    assert page.count('data-field="transport">over MQTT<') == 1
