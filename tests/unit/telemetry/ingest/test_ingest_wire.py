"""`POST /api/v1/telemetry` with a protobuf or compressed body (docs/PROTOCOL.md, "Binary frames
and compression"): landed exactly as the same batch in JSON; refused with the JSON path's own
answers (the same 400 naming the event and field); hostile bytes get a clear 4xx, are counted,
and store nothing. Both the DRF view and the ASGI fast path (`phone_client`)."""

import gzip
import json
import re
import zlib
from typing import Any

import pytest

from controlplane.wire import refused_metrics
from edge_sdk.wire import PROTOBUF_MEDIA_TYPE, codec, compression
from edge_sdk.wire import edge_routing_pb2 as telemetry_pb2
from telemetry.ingest.services import landed_batches_process
from telemetry.models import Event, EventKey, LandedBatch
from tests.factories import make_event, make_events
from tests.hostile_protobuf import varint

from ..conftest import AsgiClient

pytestmark = pytest.mark.django_db

URL = "/api/v1/telemetry"
_STORED = ("event_id", "ts", "policy_version", "task_type", "route", "decided_by", "score")
_STORED += ("tokens", "latency_ms", "rtt_ms", "bandwidth_kbps", "cache_hit", "ok")


def _post(client: Any, body: bytes, content_type: str, encoding: str = "") -> Any:
    if isinstance(client, AsgiClient):
        extra = {"content-encoding": encoding} if encoding else {}
        return client.generic("POST", URL, body, content_type=content_type, headers=extra)
    extra_meta = {"HTTP_CONTENT_ENCODING": encoding} if encoding else {}
    return client.generic("POST", URL, body, content_type=content_type, **extra_meta)


def _protobuf(events: list[dict[str, Any]], *, columns: bool = True) -> bytes:
    return codec.batch_to_protobuf({"events": events}, columns=columns)


def _json(events: list[dict[str, Any]]) -> bytes:
    return json.dumps({"events": events}).encode()


def _nothing_stored() -> bool:
    return not (LandedBatch.objects.exists() or EventKey.objects.exists() or Event.objects.exists())


def _stored_rows() -> list[tuple[Any, ...]]:
    landed_batches_process()
    return sorted(
        tuple(str(v) for v in row) for row in Event.objects.values_list(*_STORED).order_by()
    )


# --- lands like JSON ---------------------------------------------------------------------------


@pytest.mark.parametrize("columns", [True, False], ids=["columns", "rows"])
def test_telemetry_wire__protobuf_batch__stored_exactly_as_the_json_batch(
    phone_client: Any, columns: bool
) -> None:
    # Given one batch of events, with optional fields both present and absent
    events = [*make_events(3), make_event(decided_by="policy", score=None, tokens=None)]

    # When it is posted as protobuf, then (as the same events) as JSON after clearing
    response = _post(phone_client, _protobuf(events, columns=columns), PROTOBUF_MEDIA_TYPE)
    assert response.status_code == 202, response.content
    assert response.json() == {"accepted": 4, "duplicates": 0}
    from_protobuf = _stored_rows()
    Event.objects.all().delete()
    EventKey.objects.all().delete()
    assert _post(phone_client, _json(events), "application/json").status_code == 202
    from_json = _stored_rows()

    # Then the stored events are the same, field for field
    assert from_protobuf == from_json
    assert len(from_protobuf) == 4


def test_telemetry_wire__answers__say_protobuf_and_codings_are_read(phone_client: Any) -> None:
    # Given / When a JSON batch is posted (no negotiation yet)
    response = _post(phone_client, _json(make_events(1)), "application/json")

    # Then the answer tells the device what else the endpoint reads
    assert response.status_code == 202
    assert PROTOBUF_MEDIA_TYPE in response["Accept-Post"]
    assert "gzip" in response["Accept-Encoding"]


@pytest.mark.parametrize("coding", compression.CODINGS)
@pytest.mark.parametrize("media", ["application/json", PROTOBUF_MEDIA_TYPE])
def test_telemetry_wire__compressed_body__202_and_landed(
    phone_client: Any, coding: str, media: str
) -> None:
    # Given a batch in either encoding, compressed
    events = make_events(5)
    body = _protobuf(events) if media == PROTOBUF_MEDIA_TYPE else _json(events)

    # When it is posted with its Content-Encoding
    response = _post(phone_client, compression.compress(body, coding), media, coding)

    # Then it lands like the uncompressed body
    assert response.status_code == 202, response.content
    assert LandedBatch.objects.get().event_count == 5


def test_telemetry_wire__duplicate_protobuf_batch__duplicates_not_stored_twice(
    phone_client: Any,
) -> None:
    # Given a protobuf batch already accepted
    body = _protobuf(make_events(2))
    assert _post(phone_client, body, PROTOBUF_MEDIA_TYPE).status_code == 202

    # When it is sent again (a retry after a lost answer)
    response = _post(phone_client, body, PROTOBUF_MEDIA_TYPE)

    # Then both events are duplicates, stored once
    assert response.json() == {"accepted": 0, "duplicates": 2}
    assert EventKey.objects.count() == 2


# --- the JSON path's refusals ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"task_type": "sing"}, "task_type"),
        ({"policy_version": 2**40}, "policy_version"),
        ({"tokens": -1}, "tokens"),
        ({"score": 1.5}, "score"),
        ({"score": float("nan")}, "score"),
        ({"device_id": "someone-else"}, "device_id"),
        ({"task_type": "te\x00xt"}, "task_type"),
        ({"latency_ms": 1e12}, "latency_ms"),
    ],
)
@pytest.mark.parametrize("columns", [True, False], ids=["columns", "rows"])
def test_telemetry_wire__bad_event__same_400_as_json_naming_event_and_field(
    phone_client: Any, override: dict[str, Any], field: str, columns: bool
) -> None:
    # Given a batch whose second event breaks a rule
    events = [make_event(), make_event(**override)]

    # When it is posted as protobuf (column by column, or row by row)
    response = _post(phone_client, _protobuf(events, columns=columns), PROTOBUF_MEDIA_TYPE)

    # Then it is refused naming event 1 and the field, and nothing is stored
    assert response.status_code == 400, response.content
    details = response.json()["error"]["details"]
    assert {"event": 1, "field": field} in [
        {"event": d.get("event"), "field": d["field"]} for d in details
    ], details
    assert _nothing_stored()
    # and the answer is the JSON path's for the same batch (NaN aside: JSON cannot carry it)
    if field != "score" or override["score"] == 1.5:
        as_json = _post(phone_client, json.dumps({"events": events}).encode(), "application/json")
        assert as_json.status_code == 400
        assert as_json.json() == response.json()


def _raw_event(**fields: Any) -> bytes:
    """A batch of one event built field by field (values the SDK's encoder would not write)."""
    good = _protobuf([make_event()], columns=False)
    batch = telemetry_pb2.TelemetryBatch()
    batch.ParseFromString(good)
    for name, value in fields.items():
        setattr(batch.events[0], name, value)
    return batch.SerializeToString()


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"route": 9}, "route"),  # an enum number the schema does not have
        ({"decided_by": 0}, "decided_by"),  # unspecified: missing
        ({"event_id": b"\x01\x02"}, "event_id"),  # not 16 bytes
        ({"ts_us": 2**62}, "ts"),  # beyond any date
        ({"ts_us": -(2**62)}, "ts"),
        ({"policy_version": -5}, "policy_version"),
    ],
)
def test_telemetry_wire__out_of_range_protobuf_values__400_naming_the_field(
    phone_client: Any, fields: dict[str, Any], field: str
) -> None:
    # Given / When a protobuf event holds a value no JSON event could mean
    response = _post(phone_client, _raw_event(**fields), PROTOBUF_MEDIA_TYPE)

    # Then the 400 names event 0 and the field; nothing stored
    assert response.status_code == 400, response.content
    details = response.json()["error"]["details"]
    assert (0, field) in [(d.get("event"), d["field"]) for d in details], details
    assert _nothing_stored()


def test_telemetry_wire__missing_required_fields__400_like_json(phone_client: Any) -> None:
    # Given a protobuf event without latency_ms and ok (explicit presence: absent means missing)
    batch = telemetry_pb2.TelemetryBatch()
    batch.ParseFromString(_protobuf([make_event()], columns=False))
    batch.events[0].ClearField("latency_ms")
    batch.events[0].ClearField("ok")

    # When it is posted
    response = _post(phone_client, batch.SerializeToString(), PROTOBUF_MEDIA_TYPE)

    # Then both are named as required, as JSON would
    assert response.status_code == 400
    named = {d["field"]: d["message"] for d in response.json()["error"]["details"]}
    assert named["latency_ms"] == named["ok"] == "This field is required."


def _columns(events: list[dict[str, Any]], **fields: Any) -> telemetry_pb2.TelemetryBatch:
    """A column-wise batch of `events`, then columns set as given (values the SDK's encoder
    would not write)."""
    batch = telemetry_pb2.TelemetryBatch()
    batch.ParseFromString(_protobuf(events))
    for name, values in fields.items():
        if name == "event_id":
            batch.columns.event_id = values
        else:
            batch.columns.ClearField(name)
            getattr(batch.columns, name).extend(values)
    return batch


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"route": [1, 9]}, "route"),  # an enum number the schema does not have
        ({"decided_by": [1, 0]}, "decided_by"),  # unspecified: missing
        ({"ts_us": [0, 2**62]}, "ts"),  # beyond any date
        ({"policy_version": [1, -5]}, "policy_version"),
        ({"score": [0.5, float("inf")]}, "score"),
        ({"task_type": ["text", "te\x00xt"]}, "task_type"),
    ],
)
def test_telemetry_wire__out_of_range_protobuf_columns__400_naming_event_and_field(
    phone_client: Any, fields: dict[str, Any], field: str
) -> None:
    # Given / When a column-wise batch whose second event holds a value no JSON event could
    # mean, or one the JSON rules refuse
    body = _columns(make_events(2), **fields).SerializeToString()
    response = _post(phone_client, body, PROTOBUF_MEDIA_TYPE)

    # Then the 400 names event 1 and the field; nothing stored
    assert response.status_code == 400, response.content
    details = response.json()["error"]["details"]
    assert (1, field) in [(d.get("event"), d["field"]) for d in details], details
    assert _nothing_stored()


def test_telemetry_wire__columns_without_required_fields__400_like_json(
    phone_client: Any,
) -> None:
    # Given a column-wise batch whose first event leaves out latency_ms and ok (a null in JSON)
    events = [make_event(latency_ms=None, ok=None), make_event()]

    # When it is posted
    response = _post(phone_client, _protobuf(events), PROTOBUF_MEDIA_TYPE)

    # Then both are named as required for event 0, as JSON would
    assert response.status_code == 400
    named = {(d["event"], d["field"]): d["message"] for d in response.json()["error"]["details"]}
    assert named[0, "latency_ms"] == named[0, "ok"] == "This field is required."
    assert _nothing_stored()


def _with_presence(field: int, events: bytes) -> telemetry_pb2.TelemetryBatch:
    batch = _columns(make_events(3))
    batch.columns.presence.add(field=field, events=events)
    return batch


def _both_forms() -> telemetry_pb2.TelemetryBatch:
    batch = _columns(make_events(1))
    batch.events.add(device_id="phone-1")
    return batch


@pytest.mark.parametrize(
    "batch",
    [
        pytest.param(_columns(make_events(2), latency_ms=[1.0]), id="short-column"),
        pytest.param(_columns(make_events(2), ok=[True, True, False]), id="long-column"),
        pytest.param(_columns(make_events(2), event_id=b"\x01" * 20), id="event-id-bytes"),
        pytest.param(_with_presence(15, b"\x03\x00"), id="presence-length"),
        pytest.param(_with_presence(15, b"\x03"), id="presence-disagrees-with-column"),
        pytest.param(_both_forms(), id="rows-and-columns"),
    ],
)
def test_telemetry_wire__malformed_columns__400_counted_nothing_stored(
    phone_client: Any, batch: telemetry_pb2.TelemetryBatch
) -> None:
    # Given / When a column-wise batch whose columns do not make events
    before = refused_metrics()
    response = _post(phone_client, batch.SerializeToString(), PROTOBUF_MEDIA_TYPE)

    # Then 400 malformed_protobuf, counted, nothing stored
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "malformed_protobuf"
    assert refused_metrics() != before
    assert _nothing_stored()


def test_telemetry_wire__columns_of_too_many_events__413_before_reading_them(
    phone_client: Any,
) -> None:
    # Given / When a column-wise batch that says it holds 4 billion events (and holds none)
    batch = telemetry_pb2.TelemetryBatch()
    batch.columns.count = 2**32 - 1
    response = _post(phone_client, batch.SerializeToString(), PROTOBUF_MEDIA_TYPE)

    # Then 413 as for too many JSON events, nothing stored
    assert response.status_code == 413, response.content
    assert response.json()["error"]["code"] == "payload_too_large"
    assert _nothing_stored()


def test_telemetry_wire__empty_columns__400_like_an_empty_json_batch(phone_client: Any) -> None:
    # Given / When a column-wise batch of no events
    batch = telemetry_pb2.TelemetryBatch()
    batch.columns.count = 0
    response = _post(phone_client, batch.SerializeToString(), PROTOBUF_MEDIA_TYPE)

    # Then the JSON path's answer to {"events": []}
    assert response.status_code == 400, response.content
    assert response.json() == _post(phone_client, _json([]), "application/json").json()
    assert _nothing_stored()


# --- hostile bytes ------------------------------------------------------------------------------


def _deeply_nested_unknown_group(depth: int) -> bytes:
    start, end = bytes([0xBB, 0x06]), bytes([0xBC, 0x06])  # field 103, start / end group
    return start * depth + end * depth


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        pytest.param(b"\x0a\xff\xff\xff\x0f\x0a", 400, "malformed_protobuf", id="truncated"),
        pytest.param(b"\xff" * 64, 400, "malformed_protobuf", id="garbage"),
        pytest.param(b"", 400, "validation_failed", id="empty"),
        pytest.param(_deeply_nested_unknown_group(5000), 400, "malformed_protobuf", id="deep"),
        pytest.param(b"\x0a\x05\x12\x03\xff\xfe\xfd", 400, "malformed_protobuf", id="invalid-utf8"),
    ],
)
def test_telemetry_wire__hostile_protobuf__clear_4xx_counted_nothing_stored(
    phone_client: Any, body: bytes, status: int, code: str
) -> None:
    # Given / When bytes that are not a usable batch are posted as protobuf
    before = refused_metrics()
    response = _post(phone_client, body, PROTOBUF_MEDIA_TYPE)

    # Then a clear 4xx with its code, nothing stored, and (for bytes that are not protobuf) the
    # refusal counted for Prometheus
    assert response.status_code == status, response.content
    assert response.json()["error"]["code"] == code
    assert _nothing_stored()
    if code == "malformed_protobuf":
        assert refused_metrics() != before
        assert 'reason="malformed_protobuf"' in refused_metrics()


def test_telemetry_wire__unknown_protobuf_fields__ignored_like_json(phone_client: Any) -> None:
    # Given a batch with fields a newer SDK might add (unknown numbers, every wire type)
    unknown = b"\xf8\x07\x01" + b"\x82\x08\x03abc" + b"\x89\x08" + b"\x00" * 8
    body = _protobuf(make_events(1), columns=False)
    event = telemetry_pb2.TelemetryBatch()
    event.ParseFromString(body)
    inner = event.events[0].SerializeToString() + unknown
    batch = b"\x0a" + varint(len(inner)) + inner + unknown

    # When it is posted
    response = _post(phone_client, batch, PROTOBUF_MEDIA_TYPE)

    # Then it is accepted as the known fields say
    assert response.status_code == 202, response.content
    assert LandedBatch.objects.get().event_count == 1


def test_telemetry_wire__oversized_protobuf__413_nothing_stored(phone_client: Any) -> None:
    # Given a protobuf body over the 1 MiB limit
    body = _protobuf([make_event(device_id="phone-1")] * 8000)
    assert len(body) > 1024 * 1024

    # When it is posted
    response = _post(phone_client, body, PROTOBUF_MEDIA_TYPE)

    # Then 413, nothing stored
    assert response.status_code == 413
    assert _nothing_stored()


def test_telemetry_wire__too_many_events_in_protobuf__413_like_json(phone_client: Any) -> None:
    # Given 1,001 events, small enough in protobuf to pass the byte limit
    body = _protobuf(make_events(1001))
    assert len(body) < 1024 * 1024

    # When posted
    response = _post(phone_client, body, PROTOBUF_MEDIA_TYPE)

    # Then 413 as for 1,001 JSON events, nothing stored
    assert response.status_code == 413
    assert _nothing_stored()


@pytest.mark.parametrize("coding", compression.CODINGS)
def test_telemetry_wire__decompression_bomb__413_nothing_stored(
    phone_client: Any, coding: str
) -> None:
    # Given a few KiB that inflate to 64 MiB
    bomb = compression.compress(b" " * (64 * 1024 * 1024), coding)
    assert len(bomb) < 200 * 1024

    # When posted as a compressed JSON batch
    before = refused_metrics()
    response = _post(phone_client, bomb, "application/json", coding)

    # Then 413 before inflating past the limit, counted, nothing stored
    assert response.status_code == 413, response.content
    assert response.json()["error"]["code"] == "payload_too_large"
    assert refused_metrics() != before
    assert _nothing_stored()


@pytest.mark.parametrize(
    ("body", "coding", "status"),
    [
        (b"not gzip at all", "gzip", 400),
        (gzip.compress(b'{"events": []}')[:-6], "gzip", 400),  # truncated
        (zlib.compress(b"{}"), "br", 415),
        (b"{}", "gzip, zstd", 415),
    ],
)
def test_telemetry_wire__bad_content_encoding__4xx_nothing_stored(
    phone_client: Any, body: bytes, coding: str, status: int
) -> None:
    # Given / When a body that is not in the coding it names, or in one the server does not read
    response = _post(phone_client, body, "application/json", coding)

    # Then a clear 4xx, nothing stored
    assert response.status_code == status, response.content
    assert _nothing_stored()


def test_telemetry_wire__protobuf_without_token__401(phone_client: Any) -> None:
    # Given a client without a token
    phone_client.credentials(HTTP_AUTHORIZATION="Bearer nope")

    # When it posts a protobuf batch
    response = _post(phone_client, _protobuf(make_events(1)), PROTOBUF_MEDIA_TYPE)

    # Then 401, nothing stored
    assert response.status_code == 401
    assert _nothing_stored()


# --- checked column by column (telemetry.ingest.columns) ---------------------------------------


def test_telemetry_wire__valid_columns__landed_as_sent_and_processed_like_json(
    phone_client: Any,
) -> None:
    # Given a column-wise batch every event of which the JSON rules accept, quality signals too
    events = [
        *make_events(2),
        make_event(route="draft_refine", refine_changed=True, refine_edit_ratio=0.25),
        make_event(shadow_refine=True, uploaded=True, refine_changed=False, refine_edit_ratio=0),
        make_event(score=None, tokens=None, quality=0.9),
    ]
    body = _protobuf(events)

    # When it is posted
    response = _post(phone_client, body, PROTOBUF_MEDIA_TYPE)

    # Then it is landed as the bytes it came in (no JSON text written at ingest) ...
    assert response.status_code == 202, response.content
    assert response.json() == {"accepted": 5, "duplicates": 0}
    assert bytes(LandedBatch.objects.get().payload) == body
    # ... and the worker stores exactly what the same batch in JSON gives
    from_protobuf = _stored_rows()
    Event.objects.all().delete()
    EventKey.objects.all().delete()
    assert _post(phone_client, _json(events), "application/json").status_code == 202
    assert bytes(LandedBatch.objects.get().payload).startswith(b"{")
    assert _stored_rows() == from_protobuf
    assert len(from_protobuf) == 5


def test_telemetry_wire__columns_partly_stored_before__only_new_events_landed(
    phone_client: Any,
) -> None:
    # Given two events already stored
    events = make_events(3)
    assert _post(phone_client, _protobuf(events[:2]), PROTOBUF_MEDIA_TYPE).status_code == 202

    # When a batch of those two and a new one is posted as columns
    response = _post(phone_client, _protobuf(events), PROTOBUF_MEDIA_TYPE)

    # Then only the new one is landed (as JSON, the JSON path's re-encoding), the two counted
    assert response.json() == {"accepted": 1, "duplicates": 2}
    landed = LandedBatch.objects.order_by("id").last()
    assert landed is not None
    assert landed.event_count == 1
    assert json.loads(bytes(landed.payload))["events"][0]["event_id"] == events[2]["event_id"]
    assert len(_stored_rows()) == 3


def test_telemetry_wire__an_id_twice_in_the_columns__counted_once_like_json(
    phone_client: Any,
) -> None:
    # Given a column-wise batch holding the same event twice
    event = make_event()

    # When it is posted
    response = _post(phone_client, _protobuf([event, event, make_event()]), PROTOBUF_MEDIA_TYPE)

    # Then the repeat is a duplicate, as in JSON
    assert response.json() == {"accepted": 2, "duplicates": 1}
    assert EventKey.objects.count() == 2


_EDGES = [
    {},
    {"score": 1.0},
    {"score": 1.0000001},
    {"score": -0.0},
    {"score": -1e-9},
    {"task_type": "t" * 32},
    {"task_type": "t" * 33},
    {"task_type": ""},
    {"device_id": ""},
    {"tokens": 10_000_000},
    {"tokens": 10_000_001},
    {"upload_bytes": 2**40 + 1},
    {"latency_ms": 86_400_000.0},
    {"latency_ms": 86_400_000.5},
    {"rtt_ms": 600_001},
    {"bandwidth_kbps": -1},
    {"cloud_pressure": -1.0},
    {"cloud_pressure": -1.5},
    {"policy_version": 3},
    {"policy_version": 0},
    {"latency_budget": "someday"},
    {"privacy_tier": "secret"},
    {"route": "cloud", "refine_changed": True},
    {"route": "draft_refine", "refine_changed": False, "refine_edit_ratio": 0.5},
    {"refine_edit_ratio": 0.0},
    {"route": "cloud", "shadow_refine": True},
    {"cache_hit": True, "shadow_refine": True},
    {"shadow_refine": False},
    {"ts": "2020-01-01T00:00:00Z"},
    {"ts": "2099-01-01T00:00:00Z"},
    {"uploaded": None, "quality": None, "score": None},
]


_MOMENT = re.compile(r"\(since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\)")


def _moment_blind(answer: Any) -> str:
    return _MOMENT.sub("(since <moment>)", json.dumps(answer))


@pytest.mark.parametrize("override", _EDGES, ids=[",".join(o) or "valid" for o in _EDGES])
def test_telemetry_wire__columns_at_and_past_each_rule__answered_exactly_as_json(
    phone_client: Any, override: dict[str, Any]
) -> None:
    # Given a batch whose third event sits at or just past one of the struct's rules (a range
    # bound, a length, a dimension value, a quality-signal combination, the clock window)
    events = [*make_events(2), make_event(**override), make_event()]

    # When it is posted as JSON, then (after clearing) as columns
    as_json = _post(phone_client, _json(events), "application/json")
    Event.objects.all().delete()
    EventKey.objects.all().delete()
    LandedBatch.objects.all().delete()
    as_protobuf = _post(phone_client, _protobuf(events), PROTOBUF_MEDIA_TYPE)

    # Then both get the same answer, word for word (the retention window's start is the moment
    # of each request, so two requests a second apart name two moments: that word is compared
    # only for its form)
    assert (as_protobuf.status_code, _moment_blind(as_protobuf.json())) == (
        as_json.status_code,
        _moment_blind(as_json.json()),
    )
    assert LandedBatch.objects.exists() == (as_json.status_code == 202)
