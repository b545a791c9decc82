"""Fixtures shared by the unit tests of several parts (telemetry, the lab)."""

from typing import Any

import pytest

from routing_policies.services import device_enroll


@pytest.fixture
def phone(fleet: Any, fleet_key: str) -> tuple[Any, str]:
    """Device `phone-1` of `fleet` (on v1): (device, token)."""
    return device_enroll(fleet_key=fleet_key, device_id="phone-1", platform="android")
