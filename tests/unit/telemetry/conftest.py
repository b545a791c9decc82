"""Fixtures for telemetry tests: an enrolled device and an API client holding its token."""

from typing import Any

import pytest
from rest_framework.test import APIClient

from routing_policies.services import device_enroll


@pytest.fixture
def phone(fleet: Any, fleet_key: str) -> tuple[Any, str]:
    """Device `phone-1` of `fleet` (on v1): (device, token)."""
    return device_enroll(fleet_key=fleet_key, device_id="phone-1", platform="android")


@pytest.fixture
def phone_client(phone: tuple[Any, str]) -> APIClient:
    """An API client authenticated as `phone-1`."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {phone[1]}")
    return client
