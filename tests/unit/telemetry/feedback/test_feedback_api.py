"""`POST /api/v1/telemetry/feedback`: the app's quality of an event, sent after it. Bad input is
refused like telemetry (a 4xx naming the item and field, nothing stored); a good item joins its
event in the rollups exactly once, whether it comes before the event, after it, after the
rollups were compacted, or again."""

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from routing_policies.models import Device
from routing_policies.services import device_enroll, device_revoke, fleet_enrollment_key_rotate
from telemetry.feedback.messages import MAX_ITEMS
from telemetry.feedback.services import feedback_batch_ingest, feedback_join, feedback_sweep
from telemetry.ingest.services import landed_batches_process, telemetry_batch_ingest
from telemetry.models import Feedback, FeedbackState, FleetHourRollup, HourRollup, MinuteRollup
from telemetry.rollups import LEVELS, Figures, read_rows
from telemetry.rollups.maintenance import rollups_compact, storage_maintain
from tests.factories import make_event, make_fleet
from tests.hostile_json import HOSTILE_PARAMS, Hostile, with_field

pytestmark = pytest.mark.django_db

URL = "/api/v1/telemetry/feedback"


def _post(client: Any, items: list[Any]) -> Any:
    return client.post(URL, {"feedback": items}, format="json")


def _post_raw(client: Any, body: bytes | str) -> Any:
    return client.generic("POST", URL, body, content_type="application/json")


def _item(event_id: str | None = None, quality: float = 0.8) -> dict[str, Any]:
    return {"event_id": event_id or str(uuid.uuid4()), "quality": quality}


def _send_events(device: Device, events: list[dict[str, Any]], *, process: bool = True) -> None:
    telemetry_batch_ingest(device=device, body=json.dumps({"events": events}).encode())
    if process:
        landed_batches_process()


def _send_feedback(device: Device, items: list[dict[str, Any]]) -> Any:
    """Store the items and run the join the worker runs after the commit."""
    result = feedback_batch_ingest(device=device, body=json.dumps({"feedback": items}).encode())
    feedback_join(ids=result.ids)
    return result


def _quality(fleet_id: int) -> dict[str, tuple[int, float]]:
    """(quality_count, quality_sum) of the fleet at each rollup level."""
    since = datetime.now(UTC) - timedelta(days=1)
    out = {}
    for level in LEVELS:
        figures = Figures()
        for row in read_rows(level, fleet_id=fleet_id, since=since):
            figures.add(row)
        out[level.name] = (int(figures.total("quality_count")), figures.total("quality_sum"))
    return out


def _at_every_level(count: int, total: float) -> dict[str, tuple[int, float]]:
    return {level.name: (count, pytest.approx(total)) for level in LEVELS}  # type: ignore[misc]


# --- good input --------------------------------------------------------------------------------


def test_telemetry_feedback__valid_batch__202_and_held(phone_client: Any) -> None:
    # Given feedback for three events the worker has not seen
    items = [_item(quality=q) for q in (0.0, 0.5, 1)]

    # When the device posts it
    response = _post(phone_client, items)

    # Then it is accepted and stored, held for its events
    assert response.status_code == 202, response.content
    assert response.json() == {"accepted": 3, "duplicates": 0}
    assert Feedback.objects.filter(state=FeedbackState.HELD).count() == 3


def test_telemetry_feedback__repeated_in_batch_and_resent__duplicates_first_value_wins(
    phone_client: Any,
) -> None:
    # Given a batch naming one event twice
    event_id = str(uuid.uuid4())
    first = _post(phone_client, [_item(event_id, 0.2), _item(event_id, 0.9)])

    # When the device sends it again with another value
    again = _post(phone_client, [_item(event_id, 0.7)])

    # Then one item is stored, with the first value, and the rest are duplicates
    assert first.json() == {"accepted": 1, "duplicates": 1}
    assert again.status_code == 202
    assert again.json() == {"accepted": 0, "duplicates": 1}
    assert list(Feedback.objects.values_list("quality", flat=True)) == [0.2]


# --- the join ----------------------------------------------------------------------------------


def test_feedback__before_its_event__joined_when_the_event_is_folded(
    fleet: Any, phone: tuple[Device, str]
) -> None:
    # Given feedback for an event not sent yet (the join finds nothing: it stays held)
    event = make_event()
    _send_feedback(phone[0], [_item(event["event_id"], 0.6)])
    assert _quality(fleet.pk) == _at_every_level(0, 0.0)
    assert Feedback.objects.get().state == FeedbackState.HELD

    # When the event arrives and is processed
    _send_events(phone[0], [event])

    # Then its quality is counted once at every level, and the feedback is joined
    assert _quality(fleet.pk) == _at_every_level(1, 0.6)
    assert Feedback.objects.get().state == FeedbackState.JOINED


def test_feedback__after_its_event__added_to_the_event_rows(
    fleet: Any, phone: tuple[Device, str]
) -> None:
    # Given two processed events of different minutes and routes
    now = datetime.now(UTC)
    early = make_event(ts=(now - timedelta(minutes=40)).isoformat(), route="cloud")
    late = make_event(ts=(now - timedelta(minutes=2)).isoformat())
    _send_events(phone[0], [early, late])

    # When feedback for the earlier one comes
    _send_feedback(phone[0], [_item(early["event_id"], 0.3)])

    # Then it is counted at that event's keys (its minute and route), once at every level
    assert _quality(fleet.pk) == _at_every_level(1, 0.3)
    rows = MinuteRollup.objects.filter(quality_count__gt=0)
    assert {(r.route, r.minute.minute, r.events) for r in rows} == {
        ("cloud", (now - timedelta(minutes=40)).minute, 0)
    }
    assert FleetHourRollup.objects.filter(quality_count=1, route="cloud").count() == 1


def test_feedback__after_compaction__counted_and_compacted_again(
    fleet: Any, phone: tuple[Device, str]
) -> None:
    # Given three events processed and their rollups compacted
    events = [make_event() for _ in range(3)]
    _send_events(phone[0], events)
    rollups_compact()

    # When feedback comes for two of them, and the rollups are compacted again
    _send_feedback(phone[0], [_item(events[0]["event_id"], 1.0), _item(events[1]["event_id"], 0.5)])
    joined = _quality(fleet.pk)
    rollups_compact()

    # Then both count, before and after the second compaction, one compacted row per key
    assert joined == _at_every_level(2, 1.5)
    assert _quality(fleet.pk) == _at_every_level(2, 1.5)
    assert MinuteRollup.objects.count() == 1
    assert HourRollup.objects.get().quality_count == 2


def test_feedback__resent_joined_again_and_swept__counted_exactly_once(
    fleet: Any, phone: tuple[Device, str]
) -> None:
    # Given an event and its feedback, joined
    event = make_event()
    _send_events(phone[0], [event])
    result = _send_feedback(phone[0], [_item(event["event_id"], 0.4)])

    # When the device resends the feedback, the join task runs again (a redelivered task),
    # and the sweep runs
    again = _send_feedback(phone[0], [_item(event["event_id"], 0.4)])
    assert feedback_join(ids=result.ids) == 0
    assert feedback_sweep() == 0

    # Then the quality is counted once
    assert again.duplicates == 1
    assert _quality(fleet.pk) == _at_every_level(1, 0.4)


def test_feedback__event_landed_not_processed__held_then_joined_once(
    fleet: Any, phone: tuple[Device, str]
) -> None:
    # Given an event accepted but not yet processed, and its feedback (the join cannot find
    # the event: it is only in the landing table)
    event = make_event()
    _send_events(phone[0], [event], process=False)
    _send_feedback(phone[0], [_item(event["event_id"], 0.9)])
    assert Feedback.objects.get().state == FeedbackState.HELD

    # When the worker processes the event, then the sweep runs
    landed_batches_process()
    swept = feedback_sweep()

    # Then the fold joined it, and the sweep had nothing left to join
    assert swept == 0
    assert _quality(fleet.pk) == _at_every_level(1, 0.9)


def test_feedback_sweep__held_while_its_event_was_folded__joined_once(
    fleet: Any, phone: tuple[Device, str]
) -> None:
    # Given a processed event and feedback stored while its fold ran (the fold saw none, and the
    # join task was lost): a held row whose event is stored
    event = make_event()
    _send_events(phone[0], [event])
    feedback_batch_ingest(
        device=phone[0], body=json.dumps({"feedback": [_item(event["event_id"], 0.7)]}).encode()
    )

    # When the sweep runs twice
    first, second = feedback_sweep(), feedback_sweep()

    # Then the first joins it, the second finds nothing
    assert (first, second) == (1, 0)
    assert _quality(fleet.pk) == _at_every_level(1, 0.7)


@pytest.mark.parametrize("order", ["feedback-first", "event-first"])
def test_feedback__event_carried_its_own_quality__not_joined_again(
    fleet: Any, phone: tuple[Device, str], order: str
) -> None:
    # Given an event that carries its own quality, and feedback for it, in either order
    event = make_event(quality=0.25)
    if order == "feedback-first":
        _send_feedback(phone[0], [_item(event["event_id"], 0.75)])
        _send_events(phone[0], [event])
    else:
        _send_events(phone[0], [event])
        _send_feedback(phone[0], [_item(event["event_id"], 0.75)])

    # When the figures are read
    quality = _quality(fleet.pk)

    # Then only the event's own quality counts: the feedback is a duplicate
    assert quality == _at_every_level(1, 0.25)
    assert Feedback.objects.get().state == FeedbackState.REDUNDANT


@pytest.mark.parametrize("order", ["feedback-first", "event-first"])
def test_feedback__another_devices_event__unmatched_and_figures_unchanged(
    fleet: Any, fleet_key: str, phone: tuple[Device, str], order: str
) -> None:
    # Given an event of phone-1, feedback for it from phone-2 (same fleet), and phone-1's own
    other, _ = device_enroll(fleet_key=fleet_key, device_id="phone-2", platform="android")
    event = make_event()
    if order == "feedback-first":
        _send_feedback(other, [_item(event["event_id"], 0.0)])
        _send_events(phone[0], [event])
    else:
        _send_events(phone[0], [event])
        _send_feedback(other, [_item(event["event_id"], 0.0)])
    _send_feedback(phone[0], [_item(event["event_id"], 1.0)])

    # When the figures are read
    quality = _quality(fleet.pk)

    # Then only the owner's feedback counts; the other device's is kept unmatched
    assert quality == _at_every_level(1, 1.0)
    states = dict(Feedback.objects.values_list("device_id", "state"))
    assert states == {"phone-2": FeedbackState.UNMATCHED, "phone-1": FeedbackState.JOINED}


@pytest.mark.parametrize("order", ["feedback-first", "event-first"])
def test_feedback__another_fleets_event__never_changes_that_fleets_figures(
    fleet: Any, phone: tuple[Device, str], publisher: Any, order: str
) -> None:
    # Given an event of fleet-b's car-1, and feedback naming it from fleet-a's phone-1 and from
    # fleet-a's own car-1 (the device id alone is not enough), sent before or after the event
    fleet_b = make_fleet(slug="fleet-b", actor=publisher)
    car_b, _ = device_enroll(
        fleet_key=fleet_enrollment_key_rotate(actor=publisher, fleet=fleet_b), device_id="car-1"
    )
    car_a, _ = device_enroll(
        fleet_key=fleet_enrollment_key_rotate(actor=publisher, fleet=fleet), device_id="car-1"
    )
    event = make_event("car-1")
    if order == "event-first":
        _send_events(car_b, [event])
    _send_feedback(phone[0], [_item(event["event_id"], 0.1)])
    _send_feedback(car_a, [_item(event["event_id"], 0.1)])
    if order == "feedback-first":
        _send_events(car_b, [event])

    # When the sweep has run too
    feedback_sweep()

    # Then neither fleet's figures changed, and the feedback is settled as unmatched
    assert _quality(fleet_b.pk) == _at_every_level(0, 0.0)
    assert _quality(fleet.pk) == _at_every_level(0, 0.0)
    assert set(Feedback.objects.values_list("state", flat=True)) == {FeedbackState.UNMATCHED}


def test_storage_maintain__feedback_past_retention__deleted(phone: tuple[Device, str]) -> None:
    # Given feedback received 8 days ago (raw events are kept 7) and today
    old = datetime.now(UTC) - timedelta(days=8)
    for when in (old, None):
        body = json.dumps({"feedback": [_item()]}).encode()
        feedback_batch_ingest(device=phone[0], body=body, now=when)

    # When storage maintenance runs
    result = storage_maintain()

    # Then the old feedback is gone with the raw events of its day, the new one stays
    assert result.feedback_deleted == 1
    assert Feedback.objects.count() == 1


# --- bad input ---------------------------------------------------------------------------------


def _nothing_stored() -> bool:
    return not Feedback.objects.exists()


# (what is wrong, the body, the fields named)
BAD_BODIES = [
    ("not an object", [1, 2], {"feedback"}),
    ("no feedback", {"events": []}, {"feedback"}),
    ("feedback not a list", {"feedback": {"event_id": "x"}}, {"feedback"}),
    ("empty", {"feedback": []}, {"feedback"}),
    ("item not an object", {"feedback": [_item(), "good"]}, {"feedback[1]"}),
    ("no event_id", {"feedback": [_item(), {"quality": 0.5}]}, {"feedback[1].event_id"}),
    ("no quality", {"feedback": [{"event_id": str(uuid.uuid4())}]}, {"feedback[0].quality"}),
    ("bad uuid", {"feedback": [_item("not-a-uuid")]}, {"feedback[0].event_id"}),
    ("uuid a number", {"feedback": [{"event_id": 7, "quality": 0.5}]}, {"feedback[0].event_id"}),
    ("quality over 1", {"feedback": [_item(quality=1.5)]}, {"feedback[0].quality"}),
    ("quality below 0", {"feedback": [_item(quality=-0.1)]}, {"feedback[0].quality"}),
    ("quality a string", {"feedback": [_item(quality="0.5")]}, {"feedback[0].quality"}),  # type: ignore[arg-type]
    ("quality a boolean", {"feedback": [_item(quality=True)]}, {"feedback[0].quality"}),
    ("quality null", {"feedback": [_item(quality=None)]}, {"feedback[0].quality"}),  # type: ignore[arg-type]
    (
        "every bad item named",
        {"feedback": [_item(quality=2), _item(), _item("x", quality=-1)]},
        {"feedback[0].quality", "feedback[2].event_id", "feedback[2].quality"},
    ),
]


@pytest.mark.parametrize(
    ("body", "fields"), [case[1:] for case in BAD_BODIES], ids=[case[0] for case in BAD_BODIES]
)
def test_telemetry_feedback__bad_body__400_names_fields_nothing_stored(
    phone_client: Any, body: Any, fields: set[str]
) -> None:
    # Given / When the device posts a bad body
    response = _post_raw(phone_client, json.dumps(body))

    # Then 400 names each bad item and field, and nothing of the batch is stored
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "validation_failed"
    assert {d["field"] for d in error["details"]} == fields, error
    assert _nothing_stored()


def test_telemetry_feedback__malformed_json__400_nothing_stored(phone_client: Any) -> None:
    # Given / When the body is not JSON
    response = _post_raw(phone_client, b'{"feedback": [')

    # Then 400 says so
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "malformed_json"
    assert _nothing_stored()


@pytest.mark.parametrize("hostile", HOSTILE_PARAMS)
@pytest.mark.parametrize("field", ["note", "quality"])
def test_telemetry_feedback__hostile_json_value__400_names_item_and_field(
    phone_client: Any, hostile: Hostile, field: str
) -> None:
    # Given a batch whose second item has a field (unknown, or `quality`) nested 1,000 deep,
    # with a NUL or a lone surrogate, or NaN / Infinity
    item = with_field(_item(), field, hostile.raw)
    body = '{"feedback": [' + json.dumps(_item()) + ", " + item + "]}"

    # When it is posted
    response = _post_raw(phone_client, body)

    # Then 400 names the item and the field (or a path inside it), and nothing is stored
    if (field, hostile.name) == ("note", "overflowing"):
        # (a valid JSON number too large for a float in an unknown field is ignored with it)
        assert response.status_code == 202, response.content
        return
    assert response.status_code == 400, response.content
    details = response.json()["error"]["details"]
    assert details
    assert all(d["field"].startswith(f"feedback[1].{field}") for d in details), details
    assert _nothing_stored()


def test_telemetry_feedback__too_many_items__413_nothing_stored(phone_client: Any) -> None:
    # Given / When a batch of 1,001 items
    response = _post(phone_client, [_item() for _ in range(MAX_ITEMS + 1)])

    # Then 413
    assert response.status_code == 413, response.content
    assert response.json()["error"]["code"] == "payload_too_large"
    assert _nothing_stored()


def test_telemetry_feedback__too_many_items_and_a_bad_one__413(phone_client: Any) -> None:
    # Given / When a batch of 1,001 items, one of them bad (the complete check counts too)
    items = [_item() for _ in range(MAX_ITEMS + 1)]
    items[3]["quality"] = 7
    response = _post(phone_client, items)

    # Then 413
    assert response.status_code == 413, response.content
    assert _nothing_stored()


def test_telemetry_feedback__body_over_limit__413_nothing_stored(phone_client: Any) -> None:
    # Given a body over the 1 MiB limit (padding in an unknown field)
    body = json.dumps({"feedback": [_item()], "padding": "x" * (1024 * 1024)})

    # When it is posted
    response = _post_raw(phone_client, body)

    # Then 413
    assert response.status_code == 413, response.content
    assert _nothing_stored()


@pytest.mark.parametrize("authorization", [None, "Bearer not-a-token", "Basic abc"])
def test_telemetry_feedback__no_or_bad_token__401_nothing_stored(
    phone: tuple[Device, str], authorization: str | None
) -> None:
    # Given a client without a device token, or with a bad one
    client = APIClient()
    if authorization:
        client.credentials(HTTP_AUTHORIZATION=authorization)

    # When it posts feedback
    response = _post(client, [_item()])

    # Then 401
    assert response.status_code == 401, response.content
    assert _nothing_stored()


def test_telemetry_feedback__revoked_device__401(phone: tuple[Device, str], publisher: Any) -> None:
    # Given a device whose token was revoked
    device, token = phone
    device_revoke(actor=publisher, device=device)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")

    # When it posts feedback
    response = _post(client, [_item()])

    # Then 401
    assert response.status_code == 401, response.content
    assert _nothing_stored()


def test_telemetry_feedback__operator_session__401_or_403(viewer: Any, client_as: Any) -> None:
    # Given / When an operator (not a device) posts feedback
    response = _post(client_as(viewer), [_item()])

    # Then it is refused: feedback comes only from devices
    assert response.status_code in (401, 403), response.content
    assert _nothing_stored()


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "TRACE"])
def test_telemetry_feedback__other_method__405_with_allow(phone_client: Any, method: str) -> None:
    # Given / When the device uses a method the endpoint does not serve
    response = phone_client.generic(method, URL, b"", content_type="application/json")

    # Then 405, naming POST in Allow
    assert response.status_code == 405, response.content
    assert "POST" in response["Allow"]


def test_telemetry_feedback__over_rate_limit__429_with_retry_after(
    phone_client: Any, settings: Any
) -> None:
    # Given a limit of 2 batches a minute per device
    settings.TELEMETRY_RATE_LIMIT_BATCHES = 2
    settings.TELEMETRY_RATE_LIMIT_WINDOW_S = 60

    # When the device posts 3 feedback batches
    answers = [_post(phone_client, [_item()]) for _ in range(3)]

    # Then the third waits, stored nothing, and says when to retry
    assert [a.status_code for a in answers] == [202, 202, 429]
    assert 1 <= int(answers[2]["Retry-After"]) <= 60
    assert answers[2].json()["error"]["code"] == "rate_limited"
    assert Feedback.objects.count() == 2
