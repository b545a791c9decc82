"""`POST /api/v1/telemetry`: a good batch is landed and answered 202; every bad input gets its
status, names each bad event and field, and stores nothing."""

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from routing_policies.services import device_enroll, device_revoke
from telemetry.ingest.services import landed_batches_process
from telemetry.models import Event, EventKey, LandedBatch, MinuteRollup
from tests.factories import iso, make_event, make_events
from tests.hostile_json import HOSTILE_PARAMS, Hostile, with_field

from ..conftest import AsgiClient

pytestmark = pytest.mark.django_db

URL = "/api/v1/telemetry"


def _post(client: APIClient, events: list[dict[str, Any]]) -> Any:
    return client.post(URL, {"events": events}, format="json")


def _post_raw(client: APIClient, body: bytes | str) -> Any:
    return client.generic("POST", URL, body, content_type="application/json")


def _nothing_stored() -> bool:
    return not (LandedBatch.objects.exists() or EventKey.objects.exists() or Event.objects.exists())


# --- good batches ------------------------------------------------------------------------------


def test_telemetry_ingest__valid_batch__202_and_landed_durably(phone_client: APIClient) -> None:
    # Given a device with 3 events
    events = make_events(3)

    # When it posts them
    response = _post(phone_client, events)

    # Then they are accepted and landed (one batch, three ids in the ledger) before the answer
    assert response.status_code == 202, response.content
    assert response.json() == {"accepted": 3, "duplicates": 0}
    batch = LandedBatch.objects.get()
    assert batch.event_count == 3
    assert EventKey.objects.count() == 3


def test_telemetry_ingest__processed__raw_events_and_rollups_once(phone_client: APIClient) -> None:
    # Given a landed batch of 4 events
    _post(phone_client, make_events(4))

    # When a worker processes it, and processing runs again
    first = landed_batches_process()
    second = landed_batches_process()

    # Then the events are stored and rolled up once, and the landing table is empty
    assert (first.events, second.events) == (4, 0)
    assert Event.objects.count() == 4
    assert sum(MinuteRollup.objects.values_list("events", flat=True)) == 4
    assert not LandedBatch.objects.exists()


def test_telemetry_ingest__empty_batch__400_names_events_nothing_landed(
    phone_client: APIClient,
) -> None:
    # Given / When a device posts an empty batch (a client whose batching sends empty buffers)
    response = _post(phone_client, [])

    # Then it is refused naming `events`, so the client's bug shows, and nothing is stored
    assert response.status_code == 400
    details = response.json()["error"]["details"]
    assert [d["field"] for d in details] == ["events"]
    assert "empty" in details[0]["message"]
    assert _nothing_stored()


def test_telemetry_ingest__optional_fields_absent__202(phone_client: APIClient) -> None:
    # Given an event decided by policy: no score, threshold or raw signals
    event = make_event(decided_by="policy")
    for name in ("score", "threshold", "tokens", "intent_conf", "lm_conf", "upload_bytes"):
        del event[name]
    for name in ("rtt_ms", "bandwidth_kbps", "device_load", "deidentified"):
        del event[name]

    # When it is posted, with an unknown extra field a newer SDK might add
    response = _post(phone_client, [{**event, "battery": 0.5}])

    # Then it is accepted
    assert response.status_code == 202, response.content
    # and, once processed, stored with the fields it left out unknown (None), not made up
    assert LandedBatch.objects.get().event_count == 1
    landed_batches_process()
    stored = Event.objects.get()
    assert str(stored.event_id) == event["event_id"]
    assert stored.decided_by == "policy"
    absent = ("score", "threshold", "tokens", "intent_conf", "lm_conf", "upload_bytes")
    absent += ("rtt_ms", "bandwidth_kbps", "device_load")
    assert {name: getattr(stored, name) for name in absent} == dict.fromkeys(absent)


def test_telemetry_ingest__decision_inputs__stored_as_sent_or_unknown(
    phone_client: APIClient,
) -> None:
    # Given an event with the decision's remaining inputs (PROTOCOL.md extensions) and one
    # from an older device without them
    newer = make_event(online=False, cloud_infer_ms=412.5, cloud_pressure=-0.2)
    older = make_event()
    for name in ("online", "cloud_infer_ms", "cloud_pressure"):
        older.pop(name, None)

    # When both are posted and processed
    response = _post(phone_client, [newer, older])
    landed_batches_process()

    # Then the newer one's inputs are stored as sent, the older one's as unknown
    assert response.status_code == 202, response.content
    stored = {
        str(e.event_id): (e.online, e.cloud_infer_ms, e.cloud_pressure) for e in Event.objects.all()
    }
    assert stored == {
        newer["event_id"]: (False, 412.5, -0.2),
        older["event_id"]: (None, None, None),
    }


# --- duplicates ---------------------------------------------------------------------------------


def test_telemetry_ingest__duplicate_inside_batch__stored_once(phone_client: APIClient) -> None:
    # Given a batch that repeats one event
    event = make_event()
    other = make_event()

    # When it is posted and processed
    response = _post(phone_client, [event, other, event])
    landed_batches_process()

    # Then the repeat is counted as a duplicate and stored once
    assert response.json() == {"accepted": 2, "duplicates": 1}
    assert Event.objects.count() == 2


def test_telemetry_ingest__resent_batch__all_duplicates_stored_once(
    phone_client: APIClient,
) -> None:
    # Given a batch that was accepted (and one resent before and after processing)
    events = make_events(5)
    _post(phone_client, events)

    # When the device resends it before processing, then again after
    before = _post(phone_client, events)
    landed_batches_process()
    after = _post(phone_client, [*events, make_event()])
    landed_batches_process()

    # Then every resent event is a duplicate, and each id is stored once
    assert before.json() == {"accepted": 0, "duplicates": 5}
    assert after.json() == {"accepted": 1, "duplicates": 5}
    assert Event.objects.count() == 6
    assert LandedBatch.objects.count() == 0


# --- bad events: 400, each event and field named, nothing stored -------------------------------


def _future() -> str:
    return iso(datetime.now(UTC) + timedelta(minutes=6))


def _too_old() -> str:
    return iso(datetime.now(UTC) - timedelta(days=7, minutes=1))


BAD_EVENTS = [
    pytest.param({"latency_ms": "fast"}, "latency_ms", id="wrong-type-number"),
    pytest.param({"tokens": 1.5}, "tokens", id="wrong-type-whole-number"),
    pytest.param({"cache_hit": "yes"}, "cache_hit", id="wrong-type-bool"),
    pytest.param({"ok": 1}, "ok", id="number-for-bool"),
    pytest.param({"policy_version": "1"}, "policy_version", id="string-for-int"),
    pytest.param({"route": "edge"}, "route", id="unknown-route"),
    pytest.param({"decided_by": "vibes"}, "decided_by", id="unknown-decided-by"),
    pytest.param({"fallback": "sideways"}, "fallback", id="unknown-fallback"),
    pytest.param({"task_type": "video"}, "task_type", id="unknown-task-type"),
    pytest.param({"latency_budget": "soon"}, "latency_budget", id="unknown-budget"),
    pytest.param({"privacy_tier": "secret"}, "privacy_tier", id="unknown-tier"),
    pytest.param({"policy_version": 99}, "policy_version", id="unknown-version"),
    pytest.param({"intent_conf": 1.2}, "intent_conf", id="confidence-over-1"),
    pytest.param({"lm_conf": -0.1}, "lm_conf", id="confidence-under-0"),
    pytest.param({"score": 1.5}, "score", id="score-over-1"),
    pytest.param({"device_load": 1.5}, "device_load", id="load-over-1"),
    pytest.param({"latency_ms": -1}, "latency_ms", id="negative-latency"),
    pytest.param({"rtt_ms": -5}, "rtt_ms", id="negative-rtt"),
    pytest.param({"ts": "yesterday"}, "ts", id="garbage-ts"),
    pytest.param({"ts": "2026-11-29T15:00:00"}, "ts", id="ts-without-zone"),
    pytest.param({"event_id": "not-a-uuid"}, "event_id", id="bad-event-id"),
    pytest.param({"device_id": "phone-2"}, "device_id", id="claims-another-device"),
    pytest.param({"route": None}, "route", id="null-required"),
    pytest.param({"online": "yes"}, "online", id="string-for-online"),
    pytest.param({"online": 1}, "online", id="number-for-online"),
    pytest.param({"cloud_pressure": "0.1"}, "cloud_pressure", id="string-for-pressure"),
    pytest.param({"cloud_infer_ms": True}, "cloud_infer_ms", id="bool-for-cloud-infer"),
]


@pytest.mark.parametrize(("override", "field"), BAD_EVENTS)
def test_telemetry_ingest__bad_event__400_names_event_and_field_nothing_stored(
    phone_client: APIClient, override: dict[str, Any], field: str
) -> None:
    # Given a batch whose third event is bad
    events = make_events(4)
    events[2].update(override)

    # When it is posted
    response = _post(phone_client, events)

    # Then the whole batch is refused, naming event 2 and the field, and nothing is stored
    assert response.status_code == 400, response.content
    details = response.json()["error"]["details"]
    assert {"event": 2, "field": field} in [
        {"event": d.get("event"), "field": d["field"]} for d in details
    ], details
    assert _nothing_stored()


@pytest.mark.parametrize(
    ("ts", "message"),
    [(_future, "future"), (_too_old, "retention")],
    ids=["ts-more-than-5-min-ahead", "ts-older-than-retention"],
)
def test_telemetry_ingest__ts_out_of_window__400_nothing_stored(
    phone_client: APIClient, ts: Any, message: str
) -> None:
    # Given an event dated outside [now - retention, now + 5 min]
    events = [make_event(), make_event(ts=ts())]

    # When it is posted
    response = _post(phone_client, events)

    # Then it is refused, saying why
    assert response.status_code == 400
    (detail,) = response.json()["error"]["details"]
    assert (detail["event"], detail["field"]) == (1, "ts")
    assert message in detail["message"]
    assert _nothing_stored()


def test_telemetry_ingest__missing_field__400(phone_client: APIClient) -> None:
    # Given an event without a route
    event = make_event()
    del event["route"]

    # When it is posted
    response = _post(phone_client, [event])

    # Then the missing field is named
    assert response.status_code == 400
    assert response.json()["error"]["details"] == [
        {"event": 0, "field": "route", "message": "This field is required."}
    ]


def test_telemetry_ingest__several_bad_events__each_named(phone_client: APIClient) -> None:
    # Given a batch with problems in events 0, 3 (two fields) and 4
    events = make_events(5)
    events[0]["route"] = "edge"
    events[3]["lm_conf"] = 2
    events[3]["latency_ms"] = -3
    events[4]["device_id"] = "someone-else"

    # When it is posted
    response = _post(phone_client, events)

    # Then every problem is named
    assert response.status_code == 400
    named = {(d["event"], d["field"]) for d in response.json()["error"]["details"]}
    assert named == {(0, "route"), (3, "lm_conf"), (3, "latency_ms"), (4, "device_id")}
    assert _nothing_stored()


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_telemetry_ingest__nan_or_infinite_number__400(phone_client: APIClient, token: str) -> None:
    # Given a body whose latency is NaN or infinite (as some JSON writers emit)
    # (only the field's text is replaced: the timestamp may hold "12.5" too, at hh:mm:12.5)
    body = json.dumps({"events": [make_event(latency_ms=12.5)]}).replace(
        '"latency_ms": 12.5', f'"latency_ms": {token}'
    )

    # When it is posted
    response = _post_raw(phone_client, body)

    # Then the field is named and nothing stored
    assert response.status_code == 400, response.content
    (detail,) = response.json()["error"]["details"]
    assert (detail["event"], detail["field"]) == (0, "latency_ms")
    assert _nothing_stored()


# Each numeric field just past its physical range (docs/PROTOCOL.md, extensions), and at it.
OUT_OF_RANGE = [
    ("latency_ms", 86_400_000.5, 86_400_000),
    ("latency_ms", 1e308, 86_400_000),
    ("rtt_ms", 600_001, 600_000),
    ("rtt_ms", 1.7e308, 600_000),
    ("bandwidth_kbps", 100_000_001, 100_000_000),
    ("bandwidth_kbps", 1.79e308, 100_000_000),
    ("tokens", 10_000_001, 10_000_000),
    ("upload_bytes", 2**40 + 1, 2**40),
    ("upload_bytes", 2**62, 2**40),
    ("score", 1.0000001, 1.0),
    ("threshold", -0.1, 0.0),
    ("intent_conf", 1.5, 1.0),
    ("lm_conf", -1, 0.0),
    ("device_load", 2, 1.0),
    ("policy_version", 2**31, 1),
    ("cloud_infer_ms", -0.5, 0.0),
    ("cloud_infer_ms", 86_400_001, 86_400_000),
    ("cloud_pressure", 1.01, 1.0),
    ("cloud_pressure", -1.01, -1.0),
]


@pytest.mark.parametrize(("field", "bad", "good"), OUT_OF_RANGE)
def test_telemetry_ingest__number_outside_physical_range__400_names_field_nothing_stored(
    phone_client: APIClient, field: str, bad: float, good: float
) -> None:
    # Given a batch whose second event has a number no device can produce
    events = [make_event(), make_event(**{field: bad})]

    # When it is posted
    response = _post(phone_client, events)

    # Then it is refused naming that event and field, and nothing is stored
    assert response.status_code == 400, response.content
    details = response.json()["error"]["details"]
    assert [(d.get("event"), d["field"]) for d in details] == [(1, field)]
    assert _nothing_stored()

    # And the same event at the edge of the range is accepted
    accepted = _post(phone_client, [make_event(**{field: good})])
    assert accepted.status_code == 202, accepted.content


@pytest.mark.parametrize("hostile", HOSTILE_PARAMS)
@pytest.mark.parametrize("field", ["battery", "task_type"])
def test_telemetry_ingest__hostile_json_value__400_names_event_and_field_nothing_stored(
    phone_client: APIClient, hostile: Hostile, field: str
) -> None:
    # Given a batch whose second event has a field (unknown to the protocol, or a known one)
    # nested 1,000 deep, with a NUL or a lone surrogate, or NaN / Infinity
    event = with_field(make_event(), field, hostile.raw)
    body = '{"events": [' + json.dumps(make_event()) + ", " + event + "]}"

    # When it is posted
    response = _post_raw(phone_client, body)

    # Then 400 names the event and the field (or a path inside it), and nothing is stored
    if (field, hostile.name) == ("battery", "overflowing"):
        # (except a valid JSON number too large for a float in a field the protocol does not
        # know: ignored with its field, as every unknown field is; stored as sent)
        assert response.status_code == 202, response.content
        return
    assert response.status_code == 400, response.content
    details = response.json()["error"]["details"]
    assert details, response.content
    assert all(d.get("event") == 1 for d in details), details
    assert {d["field"].split("[")[0].split(".")[0] for d in details} == {field}, details
    assert _nothing_stored()


@pytest.mark.parametrize(
    "body",
    [
        '{"events": ' + "[" * 1000 + "]" * 1000 + "}",
        "[" * 100_000,
        '{"events": [], "x": ' + '{"a": ' * 5000 + "1" + "}" * 5000 + "}",
    ],
    ids=["events-1000-deep", "100k-open-brackets", "sibling-5000-deep"],
)
def test_telemetry_ingest__nested_too_deep__400_before_parsing(
    phone_client: APIClient, body: str
) -> None:
    # Given / When a body nested far deeper than any batch (a recursive parser would overflow)
    response = _post_raw(phone_client, body)

    # Then 400 says so, naming where, and nothing is stored
    assert response.status_code == 400, response.content
    (detail,) = response.json()["error"]["details"]
    assert "levels deep" in detail["message"]
    assert _nothing_stored()


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ('{"events": [', "malformed_json"),
        ("\xff\xfe", "malformed_json"),
        ("[]", "validation_failed"),
        ('{"events": {}}', "validation_failed"),
        ('{"events": [1, "x"]}', "validation_failed"),
    ],
    ids=["truncated", "not-utf8", "array-body", "events-not-a-list", "events-not-objects"],
)
def test_telemetry_ingest__malformed_body__400(
    phone_client: APIClient, body: str, code: str
) -> None:
    # Given / When a body that is not a batch is posted
    response = _post_raw(phone_client, body.encode("latin-1"))

    # Then it is refused as such
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == code
    assert _nothing_stored()


# --- size, auth, rate ---------------------------------------------------------------------------


def test_telemetry_ingest__more_than_1000_events__413(phone_client: APIClient) -> None:
    # Given / When a batch of 1,001 events is posted
    response = _post(phone_client, make_events(1001))

    # Then it is too large, and nothing is stored
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
    assert _nothing_stored()


def test_telemetry_ingest__body_over_1_mib__413(phone_client: APIClient) -> None:
    # Given a body just over 1 MiB
    body = json.dumps({"events": [make_event()], "padding": "x" * (1024 * 1024)})

    # When it is posted
    response = _post_raw(phone_client, body)

    # Then it is refused before parsing
    assert response.status_code == 413
    assert _nothing_stored()


@pytest.mark.parametrize(
    "header",
    ["Bearer dt_not-a-real-token", "Bearer ", "Token abc", "", "Bearer " + "dt_" + "x" * 300],
    ids=["unknown", "empty", "wrong-scheme", "missing", "overlong"],
)
def test_telemetry_ingest__bad_token__401(phone: Any, header: str) -> None:
    # Given a client with a bad or no token
    client = APIClient()
    if header:
        client.credentials(HTTP_AUTHORIZATION=header)

    # When it posts a good batch
    response = _post(client, make_events(1))

    # Then it is not authenticated, and nothing is stored
    assert response.status_code == 401
    assert _nothing_stored()


def test_telemetry_ingest__revoked_device__401(
    phone: Any, phone_client: APIClient, publisher: Any
) -> None:
    # Given a revoked device
    device_revoke(actor=publisher, device=phone[0])

    # When it posts
    response = _post(phone_client, make_events(1))

    # Then its token no longer works
    assert response.status_code == 401
    assert _nothing_stored()


def test_telemetry_ingest__over_rate_limit__429_with_retry_after(
    phone_client: APIClient, fleet_key: str, settings: Any
) -> None:
    # Given a limit of 2 batches a minute per device
    settings.TELEMETRY_RATE_LIMIT_BATCHES = 2
    settings.TELEMETRY_RATE_LIMIT_WINDOW_S = 60

    # When the device posts 3 batches (and another device posts one)
    statuses = [_post(phone_client, make_events(1)).status_code for _ in range(2)]
    third = _post(phone_client, make_events(1))
    _, other_token = device_enroll(fleet_key=fleet_key, device_id="phone-2")
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Bearer {other_token}")
    other_status = _post(other, make_events(1, device_id="phone-2")).status_code

    # Then the third is refused with a Retry-After, stored nothing, and the other device is fine
    assert statuses == [202, 202]
    assert third.status_code == 429
    assert 1 <= int(third["Retry-After"]) <= 60
    assert third.json()["error"]["code"] == "rate_limited"
    assert LandedBatch.objects.count() == 3
    assert other_status == 202


# --- the fast path (telemetry/ingest/fastpath.py) answers as the DRF view does -----------------


@pytest.mark.parametrize(
    "header",
    ["Bearer dt_not-a-real-token", "Bearer ", "Token abc", "", "Bearer " + "dt_" + "x" * 300],
    ids=["unknown", "empty", "wrong-scheme", "missing", "overlong"],
)
def test_telemetry_ingest_asgi__bad_token__401_from_drf(phone: Any, header: str) -> None:
    # Given a client of the ASGI application with a bad or no token
    client = AsgiClient()
    if header:
        client.credentials(HTTP_AUTHORIZATION=header)

    # When it posts a good batch
    response = client.post(URL, {"events": make_events(1)}, format="json")

    # Then it gets DRF's 401 (with its challenge), and nothing is stored
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="devices"'
    assert _nothing_stored()


def test_telemetry_ingest_asgi__revoked_after_use__401_at_once(
    phone: Any, publisher: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # Given a device whose token was just used (and so is remembered by the process)
    client = AsgiClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {phone[1]}")
    assert client.post(URL, {"events": make_events(1)}).status_code == 202

    # When it is revoked and posts again
    with django_capture_on_commit_callbacks(execute=True):
        device_revoke(actor=publisher, device=phone[0])
    response = client.post(URL, {"events": make_events(1)}, format="json")

    # Then the token no longer works
    assert response.status_code == 401
    assert LandedBatch.objects.count() == 1


def test_telemetry_ingest_asgi__same_answer_and_headers_as_drf(phone: Any) -> None:
    # Given the same batch posted through DRF's test client and through the fast path
    drf, fast = APIClient(), AsgiClient()
    for client in (drf, fast):
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {phone[1]}")
    events = make_events(2)
    bad = [*make_events(1), make_event(route="edge")]

    # When each posts it (the second sees duplicates), and a bad batch
    answers = [
        c.post(URL, {"events": e}, format="json") for e in (events, bad) for c in (drf, fast)
    ]

    # Then statuses, bodies and the headers the middleware adds are the same
    first, second, drf_bad, fast_bad = answers
    assert (first.status_code, second.status_code) == (202, 202), first.content
    assert second.json() == {"accepted": 0, "duplicates": 2}
    assert drf_bad.status_code == fast_bad.status_code == 400
    assert drf_bad.json() == fast_bad.json()
    names = (
        "Content-Type",
        "Vary",
        "Allow",
        "X-Frame-Options",
        "X-Content-Type-Options",
        "Referrer-Policy",
        "Cross-Origin-Opener-Policy",
    )
    for name in names:
        assert first[name] == second[name], name
        assert drf_bad[name] == fast_bad[name], name
