"""The brokers' HTTP hooks (EMQX 5 authn/authz, VerneMQ webhooks): who may connect, publish
and subscribe; the shared secret; every bad-input class answered 400 naming the field."""

from typing import Any

import pytest
from django.conf import settings as django_settings
from rest_framework.response import Response
from rest_framework.test import APIClient

from edge_sdk import mqtt_topics
from routing_policies.models import Device
from routing_policies.services import device_enroll, device_revoke
from tests.factories import make_fleet
from tests.hostile_json import HOSTILE_PARAMS, Hostile, assert_names, with_field

pytestmark = pytest.mark.django_db

AUTH = "/api/v1/mqtt/auth"
ACL = "/api/v1/mqtt/acl"
VERNE = "/api/v1/mqtt/vernemq"
SECRET = "hook-secret-for-tests"
P = mqtt_topics.DEFAULT_PREFIX


@pytest.fixture(autouse=True)
def _hook_settings(settings: Any) -> None:
    settings.MQTT_HOOK_SECRET = SECRET
    settings.MQTT_TOPIC_PREFIX = P
    settings.MQTT_USERNAME = "controlplane"
    settings.MQTT_PASSWORD = "cp-password"


@pytest.fixture
def broker() -> APIClient:
    """The broker, calling with the shared secret."""
    client = APIClient()
    client.credentials(HTTP_X_MQTT_HOOK_SECRET=SECRET)
    return client


@pytest.fixture
def phone(fleet: Any, fleet_key: str) -> tuple[str, str]:
    """(username, token) of enrolled device phone-1."""
    _, token = device_enroll(fleet_key=fleet_key, device_id="phone-1")
    return f"{fleet.slug}/phone-1", token


def _post(client: APIClient, path: str, body: dict[str, Any], **headers: str) -> Response:
    response: Response = client.post(path, body, format="json", **headers)
    return response


def _auth(client: APIClient, username: str, password: str, clientid: str | None = None) -> str:
    body = {"username": username, "password": password, "clientid": clientid or username}
    response = _post(client, AUTH, body)
    assert response.status_code == 200, response.content
    result: str = response.json()["result"]
    return result


def _acl(client: APIClient, username: str, topic: str, action: str, **extra: str) -> str:
    response = _post(client, ACL, {"username": username, "topic": topic, "action": action, **extra})
    assert response.status_code == 200, response.content
    result: str = response.json()["result"]
    return result


# --- authentication ---------------------------------------------------------------------------


def test_mqtt_auth__device_token__allow_not_superuser(broker: APIClient, phone: Any) -> None:
    # Given an enrolled device
    username, token = phone

    # When the broker asks whether it may connect with its token
    response = _post(broker, AUTH, {"username": username, "password": token, "clientid": username})

    # Then allow, never as a superuser, with the session's fingerprint for later questions
    assert response.status_code == 200
    body = response.json()
    assert body["result"] == "allow"
    assert body["is_superuser"] is False
    assert len(body["client_attrs"]["session"]) == 16


@pytest.mark.parametrize(
    ("case", "username", "password", "clientid"),
    [
        ("wrong token", "{fleet}/phone-1", "dt_not-the-token", "{fleet}/phone-1"),
        ("empty password", "{fleet}/phone-1", "", "{fleet}/phone-1"),
        ("another device's name", "{fleet}/phone-2", "{token}", "{fleet}/phone-2"),
        ("another fleet's name", "other/phone-1", "{token}", "other/phone-1"),
        ("client id not its name", "{fleet}/phone-1", "{token}", "someone-else"),
        ("unknown device", "{fleet}/nobody", "{token}", "{fleet}/nobody"),
        ("control plane, wrong password", "controlplane", "{token}", "controlplane"),
    ],
)
def test_mqtt_auth__wrong_credentials__deny(
    broker: APIClient,
    fleet: Any,
    fleet_key: str,
    phone: Any,
    case: str,
    username: str,
    password: str,
    clientid: str,
) -> None:
    # Given an enrolled device and a second one
    device_enroll(fleet_key=fleet_key, device_id="phone-2")
    _, token = phone

    def fill(text: str) -> str:
        return text.format(fleet=fleet.slug, token=token)

    # When the broker asks about a connection whose credentials do not match
    # Then deny
    assert _auth(broker, fill(username), fill(password), fill(clientid)) == "deny", case


def test_mqtt_auth__revoked_device__deny_at_once(
    broker: APIClient, phone: Any, publisher: Any
) -> None:
    # Given a device that could connect
    username, token = phone
    assert _auth(broker, username, token) == "allow"

    # When it is revoked
    device_revoke(actor=publisher, device=Device.objects.get())

    # Then its next connection is denied
    assert _auth(broker, username, token) == "deny"


def test_mqtt_auth__re_enrolled_device__old_token_deny_new_allow(
    broker: APIClient, phone: Any, fleet_key: str
) -> None:
    # Given a device, re-enrolled (a reinstalled app)
    username, old = phone
    _, new = device_enroll(fleet_key=fleet_key, device_id="phone-1")

    # When the broker asks about each token
    # Then the old one is denied at once, the new one allowed
    assert _auth(broker, username, old) == "deny"
    assert _auth(broker, username, new) == "allow"


def test_mqtt_auth__controlplane_account__allow(broker: APIClient) -> None:
    # Given / When the control plane's own account connects with MQTT_PASSWORD
    # Then allow
    assert _auth(broker, "controlplane", "cp-password", "controlplane-worker-1") == "allow"


@pytest.mark.parametrize("username", ["", "dashboard", "a/b/c", "fleet/ bad", "/phone-1"])
def test_mqtt_auth__not_a_device_name__ignore(broker: APIClient, username: str) -> None:
    # Given / When a username that names no device and is not the control plane's
    # Then ignore: another authenticator of the broker's chain may know it
    assert _auth(broker, username, "pw", username) == "ignore"


# --- authorisation ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", mqtt_topics.DEVICE_TOPICS)
def test_mqtt_acl__device_publishes_its_own_topic__allow(
    broker: APIClient, fleet: Any, phone: Any, kind: str
) -> None:
    username, _ = phone
    topic = mqtt_topics.device_topic(P, fleet.slug, "phone-1", kind)
    assert _acl(broker, username, topic, "publish") == "allow"


@pytest.mark.parametrize(
    "topic",
    [
        "{state}",
        "{fleet_prefix}/versions/+",
        "{fleet_prefix}/versions/7",
        "{fleet_prefix}/versions/+/protobuf",
        "{fleet_prefix}/versions/7/protobuf",
        "{fleet_prefix}/cloud_pressure",
    ],
)
def test_mqtt_acl__device_subscribes_to_its_fleet__allow(
    broker: APIClient, fleet: Any, phone: Any, topic: str
) -> None:
    username, _ = phone
    fleet_prefix = f"{P}/fleets/{fleet.slug}"
    filled = topic.format(state=mqtt_topics.fleet_state(P, fleet.slug), fleet_prefix=fleet_prefix)
    assert _acl(broker, username, filled, "subscribe") == "allow"


@pytest.mark.parametrize(
    ("case", "topic", "action"),
    [
        ("publish as another device", "{p}/fleets/{f}/devices/phone-2/ack", "publish"),
        ("publish on the fleet's state", "{p}/fleets/{f}/state", "publish"),
        ("publish on a version", "{p}/fleets/{f}/versions/1", "publish"),
        ("publish on an unknown kind", "{p}/fleets/{f}/devices/phone-1/other", "publish"),
        ("publish outside the prefix", "elsewhere/phone-1/ack", "publish"),
        ("subscribe to another fleet", "{p}/fleets/other/state", "subscribe"),
        ("subscribe to every fleet", "{p}/fleets/+/state", "subscribe"),
        ("subscribe to everything", "#", "subscribe"),
        ("subscribe to another device", "{p}/fleets/{f}/devices/phone-2/ack", "subscribe"),
        ("subscribe to a bad version", "{p}/fleets/{f}/versions/#", "subscribe"),
        ("subscribe to version zero", "{p}/fleets/{f}/versions/0", "subscribe"),
        ("publish on a protobuf version", "{p}/fleets/{f}/versions/1/protobuf", "publish"),
        ("subscribe to a bad protobuf one", "{p}/fleets/{f}/versions/x/protobuf", "subscribe"),
        ("subscribe below a protobuf one", "{p}/fleets/{f}/versions/1/protobuf/x", "subscribe"),
        ("subscribe to protobuf twice", "{p}/fleets/{f}/versions/1/protobuf/protobuf", "subscribe"),
        ("subscribe (shared) to devices", "$share/g/{p}/fleets/{f}/devices/+/ack", "subscribe"),
        ("subscribe to its own acks", "{p}/fleets/{f}/devices/phone-1/ack", "subscribe"),
    ],
)
def test_mqtt_acl__device_outside_its_rights__deny(
    broker: APIClient, fleet: Any, phone: Any, case: str, topic: str, action: str
) -> None:
    username, _ = phone
    filled = topic.format(p=P, f=fleet.slug)
    assert _acl(broker, username, filled, action) == "deny", case


def test_mqtt_acl__revoked_device__deny_at_once(
    broker: APIClient, fleet: Any, phone: Any, publisher: Any
) -> None:
    # Given a connected device's topic right
    username, _ = phone
    topic = mqtt_topics.device_topic(P, fleet.slug, "phone-1", "ack")
    assert _acl(broker, username, topic, "publish") == "allow"

    # When it is revoked
    device_revoke(actor=publisher, device=Device.objects.get())

    # Then its next publish is denied
    assert _acl(broker, username, topic, "publish") == "deny"


def test_mqtt_acl__session_of_a_replaced_token__deny(
    broker: APIClient, fleet: Any, phone: Any, fleet_key: str
) -> None:
    # Given a session opened with the device's token (its fingerprint from /mqtt/auth)
    username, old = phone
    body = {"username": username, "password": old, "clientid": username}
    session = _post(broker, AUTH, body).json()["client_attrs"]["session"]
    topic = mqtt_topics.device_topic(P, fleet.slug, "phone-1", "ack")
    assert _acl(broker, username, topic, "publish", session=session) == "allow"

    # When the device re-enrols (a new token)
    _, new = device_enroll(fleet_key=fleet_key, device_id="phone-1")

    # Then the old session is denied, a session with the new token allowed
    assert _acl(broker, username, topic, "publish", session=session) == "deny"
    body["password"] = new
    session = _post(broker, AUTH, body).json()["client_attrs"]["session"]
    assert _acl(broker, username, topic, "publish", session=session) == "allow"


def test_mqtt_acl__controlplane__allow_under_prefix_only(broker: APIClient, fleet: Any) -> None:
    state = mqtt_topics.fleet_state(P, fleet.slug)
    acks = mqtt_topics.shared(mqtt_topics.device_topic(P, "+", "+", "ack"))
    assert _acl(broker, "controlplane", state, "publish") == "allow"
    assert _acl(broker, "controlplane", acks, "subscribe") == "allow"
    assert _acl(broker, "controlplane", "elsewhere/x", "publish") == "deny"
    assert _acl(broker, "controlplane", f"$share/other/{P}/fleets/+/x", "subscribe") == "deny"


def test_mqtt_acl__stranger__ignore(broker: APIClient) -> None:
    assert _acl(broker, "dashboard", f"{P}/fleets/x/state", "subscribe") == "ignore"


# --- the shared secret ------------------------------------------------------------------------


@pytest.mark.parametrize("path", [AUTH, ACL, VERNE])
@pytest.mark.parametrize("secret", [None, "", "wrong", SECRET + "x"])
def test_mqtt_hooks__without_the_secret__401(phone: Any, path: str, secret: str | None) -> None:
    # Given a caller without the broker's secret
    client = APIClient()
    if secret is not None:
        client.credentials(HTTP_X_MQTT_HOOK_SECRET=secret)
    username, token = phone

    # When it asks
    body = {"username": username, "password": token, "clientid": username}
    response = _post(client, path, body, HTTP_VERNEMQ_HOOK="auth_on_register")

    # Then 401, and no answer about the device
    assert response.status_code == 401, response.content
    assert "result" not in response.json()


def test_mqtt_hooks__secret_unset__401_even_with_an_empty_header(settings: Any, phone: Any) -> None:
    # Given hooks not configured (no MQTT_HOOK_SECRET)
    settings.MQTT_HOOK_SECRET = ""
    client = APIClient()
    client.credentials(HTTP_X_MQTT_HOOK_SECRET="")
    username, token = phone

    # When anyone asks
    response = _post(client, AUTH, {"username": username, "password": token, "clientid": username})

    # Then 401
    assert response.status_code == 401


# --- bad input --------------------------------------------------------------------------------

GOOD_AUTH = {"username": "fleet-a/phone-1", "password": "dt_x", "clientid": "fleet-a/phone-1"}
GOOD_ACL = {
    "username": "fleet-a/phone-1",
    "topic": f"{P}/fleets/fleet-a/state",
    "action": "subscribe",
}


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        (AUTH, {**GOOD_AUTH, "username": 5}, "username"),
        (AUTH, {**GOOD_AUTH, "password": None}, "password"),
        (AUTH, {**GOOD_AUTH, "clientid": ["x"]}, "clientid"),
        (AUTH, {k: v for k, v in GOOD_AUTH.items() if k != "password"}, "password"),
        (AUTH, {**GOOD_AUTH, "username": "u" * 257}, "username"),
        (AUTH, {**GOOD_AUTH, "password": "p" * 513}, "password"),
        (ACL, {**GOOD_ACL, "action": "delete"}, "action"),
        (ACL, {**GOOD_ACL, "action": 1}, "action"),
        (ACL, {**GOOD_ACL, "topic": ""}, "topic"),
        (ACL, {**GOOD_ACL, "topic": "t" * 1025}, "topic"),
        (ACL, {**GOOD_ACL, "topic": {"a": 1}}, "topic"),
        (ACL, {k: v for k, v in GOOD_ACL.items() if k != "topic"}, "topic"),
        (ACL, {**GOOD_ACL, "session": 7}, "session"),
    ],
)
def test_mqtt_hooks__bad_field__400_names_it(
    broker: APIClient, path: str, body: dict[str, Any], field: str
) -> None:
    response = _post(broker, path, body)
    assert response.status_code == 400, response.content
    assert field in {d["field"] for d in response.json()["error"]["details"]}


@pytest.mark.parametrize(("path", "body"), [(AUTH, GOOD_AUTH), (ACL, GOOD_ACL)])
@pytest.mark.parametrize("field", ["username", "topic"])
@pytest.mark.parametrize("hostile", HOSTILE_PARAMS)
def test_mqtt_hooks__hostile_json_value__400_names_field(
    broker: APIClient, path: str, body: dict[str, Any], field: str, hostile: Hostile
) -> None:
    # Given a hook body with one field nested 1,000 deep, a NUL, a lone surrogate or NaN
    raw = with_field(body, field, hostile.raw)

    # When the broker (or someone with its secret) sends it
    response = broker.generic("POST", path, raw, content_type="application/json")

    # Then 400 names the field, never a 500
    assert response.status_code == 400, response.content
    assert_names(response.json()["error"], field, hostile)


@pytest.mark.parametrize("path", [AUTH, ACL, VERNE])
@pytest.mark.parametrize("raw", ['{"username": "a', "[]", "null", '"x"', "", "{}}"])
def test_mqtt_hooks__malformed_body__400(broker: APIClient, path: str, raw: str) -> None:
    response = broker.generic(
        "POST", path, raw, content_type="application/json", HTTP_VERNEMQ_HOOK="auth_on_register"
    )
    assert response.status_code == 400, response.content


@pytest.mark.parametrize("path", [AUTH, ACL])
def test_mqtt_hooks__body_over_limit__413(broker: APIClient, path: str) -> None:
    body = {**GOOD_AUTH, **GOOD_ACL, "padding": "x" * django_settings.MAX_REQUEST_BYTES}
    assert _post(broker, path, body).status_code == 413


# --- VerneMQ's webhooks -----------------------------------------------------------------------


def _verne(client: APIClient, hook: str, body: dict[str, Any]) -> Response:
    return _post(client, VERNE, body, HTTP_VERNEMQ_HOOK=hook)


@pytest.mark.parametrize("hook", ["auth_on_register", "auth_on_register_m5"])
def test_vernemq_register__token__ok_wrong__not_allowed_stranger__next(
    broker: APIClient, phone: Any, hook: str
) -> None:
    username, token = phone
    base = {"peer_addr": "127.0.0.1", "peer_port": 1, "mountpoint": "", "clean_session": False}
    ok = _verne(
        broker, hook, {**base, "username": username, "password": token, "client_id": username}
    )
    bad = _verne(
        broker, hook, {**base, "username": username, "password": "dt_x", "client_id": username}
    )
    stranger = _verne(broker, hook, {**base, "username": None, "password": None, "client_id": "x"})
    assert ok.json() == {"result": "ok"}
    assert bad.json() == {"result": {"error": "not_allowed"}}
    assert stranger.json() == {"result": "next"}


@pytest.mark.parametrize("hook", ["auth_on_publish", "auth_on_publish_m5"])
def test_vernemq_publish__own_topic_ok_another_not_allowed(
    broker: APIClient, fleet: Any, phone: Any, hook: str
) -> None:
    username, _ = phone
    base = {
        "username": username,
        "client_id": username,
        "mountpoint": "",
        "qos": 1,
        "payload": "e30=",
        "retain": False,
    }
    own = mqtt_topics.device_topic(P, fleet.slug, "phone-1", "ack")
    other = mqtt_topics.device_topic(P, fleet.slug, "phone-2", "ack")
    assert _verne(broker, hook, {**base, "topic": own}).json() == {"result": "ok"}
    assert _verne(broker, hook, {**base, "topic": other}).json() == {
        "result": {"error": "not_allowed"}
    }


@pytest.mark.parametrize(
    ("hook", "refused"), [("auth_on_subscribe", 128), ("auth_on_subscribe_m5", 135)]
)
def test_vernemq_subscribe__refused_topics_marked__others_kept(
    broker: APIClient, fleet: Any, phone: Any, hook: str, refused: int
) -> None:
    username, _ = phone
    state = mqtt_topics.fleet_state(P, fleet.slug)
    other = mqtt_topics.fleet_state(P, "other")
    body = {"username": username, "client_id": username, "mountpoint": ""}
    all_ok = _verne(broker, hook, {**body, "topics": [{"topic": state, "qos": 1}]})
    mixed = _verne(
        broker, hook, {**body, "topics": [{"topic": state, "qos": 1}, {"topic": other, "qos": 1}]}
    )
    assert all_ok.json() == {"result": "ok"}
    topics = [{"topic": state, "qos": 1}, {"topic": other, "qos": refused}]
    expected = (
        {"result": "ok", "modifiers": {"topics": topics}}
        if hook.endswith("_m5")
        else {"result": "ok", "topics": topics}
    )
    assert mixed.json() == expected


@pytest.mark.parametrize(
    ("hook", "body", "field"),
    [
        ("on_publish", {"username": "a/b"}, "vernemq-hook"),
        ("", {"username": "a/b"}, "vernemq-hook"),
        ("auth_on_publish", {"username": "a/b"}, "topic"),
        ("auth_on_subscribe", {"username": "a/b"}, "topics"),
        ("auth_on_subscribe", {"username": "a/b", "topics": [{"topic": "t"}]}, "topics[0].qos"),
        (
            "auth_on_subscribe",
            {"username": "a/b", "topics": [{"topic": "t", "qos": 3}]},
            "topics[0].qos",
        ),
        (
            "auth_on_subscribe",
            {"username": "a/b", "topics": [{"topic": "t", "qos": 1}] * 101},
            "topics",
        ),
        ("auth_on_register", {"username": 5}, "username"),
    ],
)
def test_vernemq__bad_input__400_names_field(
    broker: APIClient, hook: str, body: dict[str, Any], field: str
) -> None:
    response = _verne(broker, hook, body)
    assert response.status_code == 400, response.content
    named = [d["field"] for d in response.json()["error"]["details"]]
    assert any(n == field or n.startswith(f"{field}.") for n in named), named


def test_mqtt_hooks__other_fleet_device_cannot_use_a_token_of_this_fleet(
    broker: APIClient, fleet: Any, publisher: Any, phone: Any
) -> None:
    # Given a device of another fleet with the same device id
    other = make_fleet(actor=publisher, slug="other-fleet")
    from routing_policies.services import fleet_enrollment_key_rotate

    key = fleet_enrollment_key_rotate(actor=publisher, fleet=other)
    _, other_token = device_enroll(fleet_key=key, device_id="phone-1")

    # When it presents its token under this fleet's name (or this fleet's token under its own)
    _, token = phone
    # Then deny both ways
    assert _auth(broker, f"{fleet.slug}/phone-1", other_token) == "deny"
    assert _auth(broker, "other-fleet/phone-1", token) == "deny"
    assert _auth(broker, "other-fleet/phone-1", other_token) == "allow"
