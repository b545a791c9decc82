"""The autopilot's fixtures: a fleet whose image cell has enough draft reports."""

from typing import Any

import pytest

from routing_policies.models import Device
from tests.autopilot_events import image_events, ingest


@pytest.fixture
def reported(phone: tuple[Device, Any]) -> Device:
    ingest(phone[0], image_events(3000, seed=4))
    return phone[0]
