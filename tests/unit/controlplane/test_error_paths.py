"""Every API error names its field with one path syntax, `name[i].field` (PROTOCOL.md), even
where the item's error comes from a list of nested serializers."""

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db


def test_stage_plan_api__bad_step_field__named_steps_0_to_stage(
    fleet: Any, publisher: Any, client_as: Callable[[Any], APIClient]
) -> None:
    # Given a fleet
    body = {
        "version": 1,
        "time_zone": "UTC",
        "start_at": "2099-01-01T00:00:00Z",
        "steps": [{"to_stage": 7, "run_at": "2099-01-02T00:00:00Z"}],
    }

    # When a stage plan's first step names no stage there is
    answer = client_as(publisher).post(
        "/api/v1/fleets/fleet-a/schedules/stage-plan", body, format="json"
    )

    # Then the 400 names `steps[0].to_stage`, not `steps.0.to_stage`
    assert answer.status_code == 400, answer.content
    fields = [detail["field"] for detail in answer.json()["error"]["details"]]
    assert fields == ["steps[0].to_stage"], fields
