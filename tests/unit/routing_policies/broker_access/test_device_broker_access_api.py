"""`POST /api/v1/devices/me/broker-access` where the control plane does not manage the broker's
access, and input it has no use for (the broker itself: tests/integration/test_mqtt_access.py)."""

from typing import Any

import pytest
from rest_framework.test import APIClient

from routing_policies.services import device_enroll

pytestmark = pytest.mark.django_db

ACCESS = "/api/v1/devices/me/broker-access"


@pytest.fixture
def token(fleet: Any, fleet_key: str) -> str:
    _, issued = device_enroll(fleet_key=fleet_key, device_id="phone-1")
    return issued


@pytest.mark.parametrize("access", ["", "http"])
def test_broker_access__not_dynsec__409_naming_why(settings: Any, token: str, access: str) -> None:
    # Given a control plane that does not drive the broker's accounts
    settings.MQTT_ACCESS = access

    # When a device asks for its broker access
    answer = APIClient().post(ACCESS, HTTP_AUTHORIZATION=f"Bearer {token}")

    # Then it is told the control plane has nothing to restore here
    assert answer.status_code == 409
    assert answer.json()["error"]["code"] == "broker_access_not_managed"
    assert "MQTT_ACCESS" in answer.json()["error"]["message"]


@pytest.mark.parametrize(
    "body",
    [b"{not json", b'{"a": "\\u0000"}', b"[" * 10_000, b"x" * 200_000],
    ids=["malformed", "nul", "deep", "large"],
)
def test_broker_access__a_body__never_read_never_a_5xx(
    settings: Any, token: str, body: bytes
) -> None:
    # Given a device that sends a body the endpoint has no use for
    settings.MQTT_ACCESS = ""

    # When it asks
    answer = APIClient().post(
        ACCESS, body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )

    # Then the answer is about the access alone (or the body's size), never a server error
    assert answer.status_code in (409, 413)


@pytest.mark.parametrize("method", ["get", "put", "delete"])
def test_broker_access__other_methods__405(token: str, method: str) -> None:
    answer = getattr(APIClient(), method)(ACCESS, HTTP_AUTHORIZATION=f"Bearer {token}")
    assert answer.status_code == 405
