"""Property-based fuzz of the device bodies: for any input (any JSON value, any bytes, nesting
thousands deep, huge numbers, NUL and lone surrogates, NaN) the telemetry ingest (the DRF view
and the ASGI fast path), the late feedback and the enrolment answer a 2xx or a 4xx, never a
5xx, and a refused request stores nothing."""

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from rest_framework.test import APIClient

from routing_policies.models import Device
from telemetry.models import EventKey, Feedback, LandedBatch
from tests.factories import make_event
from tests.hostile_json import fuzz_bodies

from ..conftest import AsgiClient

pytestmark = pytest.mark.django_db

FUZZ = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
_EVENT = make_event()
TELEMETRY_BODIES = fuzz_bodies({"events": [_EVENT]}) | fuzz_bodies(_EVENT).map(
    lambda event: b'{"events": [' + event + b"]}"
)


def _landed() -> tuple[int, int]:
    return LandedBatch.objects.count(), EventKey.objects.count()


@pytest.mark.parametrize("path", ["drf", "asgi"])
def test_telemetry_ingest__fuzzed_body__never_5xx_refusal_stores_nothing(
    phone: tuple[Any, str], path: str
) -> None:
    # Given a device's client, through the DRF view or the ASGI fast path
    client: Any = APIClient() if path == "drf" else AsgiClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {phone[1]}")

    @FUZZ
    @given(body=TELEMETRY_BODIES)
    def check(body: bytes) -> None:
        before = _landed()
        # When it posts any body at all
        response = client.generic("POST", "/api/v1/telemetry", body, "application/json")
        # Then a 202 or a 4xx in the error shape, and a refusal lands nothing
        assert response.status_code < 500, (body[:200], response.content[:300])
        if response.status_code != 202:
            assert set(json.loads(response.content)) == {"error"}
            assert _landed() == before

    check()


_ITEM = {"event_id": _EVENT["event_id"], "quality": 0.5}
FEEDBACK_BODIES = fuzz_bodies({"feedback": [_ITEM]}) | fuzz_bodies(_ITEM).map(
    lambda item: b'{"feedback": [' + item + b"]}"
)


def test_telemetry_feedback__fuzzed_body__never_5xx_refusal_stores_nothing(
    phone: tuple[Any, str],
) -> None:
    # Given a device's client
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {phone[1]}")

    @FUZZ
    @given(body=FEEDBACK_BODIES)
    def check(body: bytes) -> None:
        before = Feedback.objects.count()
        # When it posts any body at all as feedback
        response = client.generic("POST", "/api/v1/telemetry/feedback", body, "application/json")
        # Then a 202 or a 4xx in the error shape, and a refusal stores nothing
        assert response.status_code < 500, (body[:200], response.content[:300])
        if response.status_code != 202:
            assert set(json.loads(response.content)) == {"error"}
            assert Feedback.objects.count() == before

    check()


def test_device_enroll__fuzzed_body__never_5xx_refusal_enrols_nothing(
    fleet: Any, fleet_key: str
) -> None:
    # Given a fleet's enrolment key
    client = APIClient()
    shape = {"fleet_key": fleet_key, "device_id": "phone-9", "platform": "android"}

    @FUZZ
    @given(body=fuzz_bodies(shape))
    def check(body: bytes) -> None:
        before = Device.objects.count()
        # When anyone posts any body at all
        response = client.generic("POST", "/api/v1/devices/enroll", body, "application/json")
        # Then a 201 or a 4xx in the error shape, and a refusal enrols nothing
        assert response.status_code < 500, (body[:200], response.content[:300])
        if response.status_code != 201:
            assert set(response.json()) == {"error"}
            assert Device.objects.count() == before
        else:
            stored = Device.objects.get(device_id=response.json()["device_id"])
            assert stored.device_id == json.loads(body)["device_id"]  # as sent, never trimmed

    check()
