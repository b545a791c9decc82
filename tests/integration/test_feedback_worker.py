"""Late quality feedback through the real pipeline: the ASGI server, a Celery worker with its
beat, PostgreSQL and a Redis of the test's own. Feedback sent before its events, after them,
and resent, is joined to each event in every rollup level exactly once."""

import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from django.db import connection

from telemetry.models import (
    Feedback,
    FeedbackState,
    FleetHourRollup,
    HourRollup,
    LandedBatch,
    MinuteRollup,
)
from tests.factories import make_events
from tests.integration.test_telemetry_durability import (
    OwnRedis,
    Sender,
    Worker,
    _wait_until,
    own_redis,
    phone_token,
    start_worker,
)
from tests.live_server import running_asgi_server

__all__ = ["own_redis", "phone_token", "start_worker"]

pytestmark = pytest.mark.integration


def _post_feedback(base_url: str, token: str, items: list[dict[str, Any]]) -> dict[str, int]:
    response = httpx.post(
        f"{base_url}/api/v1/telemetry/feedback",
        json={"feedback": items},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert response.status_code == 202, response.text
    body: dict[str, int] = response.json()
    return body


def test_feedback_worker__before_after_and_resent__joined_once_at_every_level(
    own_redis: OwnRedis, phone_token: str, start_worker: Callable[..., Worker]
) -> None:
    # Given a worker, and 300 events of which the first 150 get feedback before they are sent
    start_worker()
    events = make_events(300)
    early = {event["event_id"]: 0.2 for event in events[:150]}
    late = {event["event_id"]: 0.6 for event in events[150:]}
    with running_asgi_server(dict(connection.settings_dict)) as base_url:
        items = [{"event_id": key, "quality": value} for key, value in early.items()]
        first = _post_feedback(base_url, phone_token, items)
        # and feedback for an event that never comes, and for none of this device's events
        _post_feedback(base_url, phone_token, [{"event_id": str(uuid.uuid4()), "quality": 1.0}])

        # When the events are sent and processed, then feedback comes for the other 150, and
        # all of it is resent
        Sender(base_url, phone_token).post(events)
        _wait_until(lambda: not LandedBatch.objects.exists(), 30, "events not processed")
        items = [{"event_id": key, "quality": value} for key, value in late.items()]
        second = _post_feedback(base_url, phone_token, items)
        items = [{"event_id": key, "quality": 0.9} for key in (*early, *late)]
        resent = _post_feedback(base_url, phone_token, items)

    # Then each event's quality counts once at every level, the resend changed nothing, and
    # only the feedback whose event never came is still held
    assert (first, second) == ({"accepted": 150, "duplicates": 0},) * 2
    assert resent == {"accepted": 0, "duplicates": 300}
    _wait_until(
        lambda: (
            Feedback.objects.filter(state=FeedbackState.JOINED).count() == 300
            and not FleetHourRollup.objects.filter(compacted=False).exists()
        ),
        40,
        "feedback not joined and compacted in time",
    )
    assert Feedback.objects.filter(state=FeedbackState.HELD).count() == 1
    for model in (MinuteRollup, HourRollup, FleetHourRollup):
        counts = list(model.objects.values_list("quality_count", "quality_sum"))
        assert sum(count for count, _ in counts) == 300, model.__name__
        assert sum(total for _, total in counts) == pytest.approx(150 * 0.2 + 150 * 0.6)
