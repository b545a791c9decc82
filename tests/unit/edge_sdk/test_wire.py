"""The binary encoding (edge_sdk/wire): the checked-in generated code is what `make proto` writes;
a document, a frame and a batch convert to protobuf and back to the same JSON value; a device
on protobuf decides exactly as a device on JSON; compression never inflates past its cap; the
SDK negotiates (docs/PROTOCOL.md, "Binary frames and compression")."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_sdk.decision import DeviceState, TaskSignals, decide
from edge_sdk.policy import parse_policy
from edge_sdk.wire import PROTOBUF_MEDIA_TYPE, codec, compression
from edge_sdk.wire.negotiation import TelemetryWire, document_of
from routing_policies.cell_schema import DEFAULT_CELL_VALUES, SEED_DIMENSIONS
from routing_policies.demo import demo_table
from routing_policies.documents import build_document
from tests.factories import make_event, make_events

REPO = Path(__file__).resolve().parents[3]
WIRE = REPO / "edge_sdk" / "wire"


def _document(table: dict[Any, Any], dimensions: dict[str, list[str]], number: int = 7) -> Any:
    return build_document(
        fleet_slug="voice-assistant-android",
        number=number,
        published_at=datetime(2026, 11, 29, 15, tzinfo=UTC),
        dimensions=dimensions,
        table=table,
    )


def _large_table(task_types: int) -> tuple[dict[Any, Any], dict[str, list[str]]]:
    dims = {**SEED_DIMENSIONS, "task_type": [f"task{i}" for i in range(task_types)]}
    table = {
        (t, b, p): {**DEFAULT_CELL_VALUES, "threshold": round(0.3 + (i % 50) / 100, 2)}
        for i, (t, b, p) in enumerate(
            (t, b, p)
            for t in dims["task_type"]
            for b in dims["latency_budget"]
            for p in dims["privacy_tier"]
        )
    }
    return table, dims


# --- the generated code --------------------------------------------------------------------------


def test_wire__generated_code__matches_the_checked_in_proto(tmp_path: Path) -> None:
    # Given / When protoc (grpcio-tools) generates the modules again from the .proto files
    subprocess.run(
        ["bash", str(REPO / "scripts" / "gen_proto.sh"), str(tmp_path)],
        check=True,
        env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
    )

    # Then each generated file is byte for byte the checked-in one (run `make proto` if not)
    generated = sorted(p.name for p in (tmp_path / "edge_sdk" / "wire").glob("*_pb2.py"))
    assert generated == ["edge_routing_pb2.py"]
    for name in generated:
        assert (tmp_path / "edge_sdk" / "wire" / name).read_bytes() == (WIRE / name).read_bytes()


# --- documents, batches, frames ---------------------------------------------------------------


@pytest.mark.parametrize("task_types", [3, 50], ids=["demo-12-cells", "200-cells"])
def test_wire__document__protobuf_decodes_to_the_same_json_and_is_smaller(task_types: int) -> None:
    # Given the demo's 12-cell document, or a 200-cell one, as JSON
    table, dims = (demo_table(), SEED_DIMENSIONS) if task_types == 3 else _large_table(50)
    document = json.loads(json.dumps(_document(table, dims)))

    # When it goes to protobuf and back
    encoded = codec.document_to_protobuf(document)

    # Then it is the same document, in fewer bytes
    assert codec.document_from_protobuf(encoded) == document
    assert len(encoded) < len(json.dumps(document, separators=(",", ":")))
    assert len(document["cells"]) == task_types * 4


def test_wire__document_with_unknown_fields__carried_through_unchanged() -> None:
    # Given a document from a newer server: a top-level field, a cell field, odd nested shapes
    document = json.loads(json.dumps(_document(demo_table(), SEED_DIMENSIONS)))
    document["pricing"] = {"currency": "EUR", "per_1k_tokens": 0.002}
    document["cells"][0]["future"] = [1, {"a": None}]
    document["cells"][1]["weights"]["novelty"] = 0.0
    document["cells"][2]["threshold"] = "0.5"  # a wrong type: the device's check refuses it
    del document["published_at"]

    # When it goes to protobuf and back
    back = codec.document_from_protobuf(codec.document_to_protobuf(document))

    # Then nothing is lost or added
    assert back == document


def test_wire__batch__round_trip_and_unrepresentable_events_refused() -> None:
    # Given events with every optional field, and some left out
    events = [make_event(online=True, cloud_infer_ms=80.5, cloud_pressure=-0.1), make_event()]
    del events[1]["score"]

    # When the batch goes to protobuf and back
    back = codec.batch_from_protobuf(codec.batch_to_protobuf({"events": events}))

    # Then every field reads the same (ts in its microsecond form)
    for sent, got in zip(events, back["events"], strict=True):
        assert datetime.fromisoformat(got.pop("ts")) == datetime.fromisoformat(sent.pop("ts"))
        assert got == sent
    # and an event the schema cannot hold is not silently cut: the sender uses JSON
    with pytest.raises(codec.NotRepresentable):
        codec.batch_to_protobuf({"events": [make_event(battery=0.5)]})


def test_wire__batch__columns_and_rows_read_as_the_same_json_batch() -> None:
    # Given events where different fields are left out (absent, or null in JSON)
    events = [make_event(), make_event(score=None), make_event(tokens=None, online=True)]
    del events[0]["threshold"]

    # When the batch is written column by column and row by row
    columns = codec.batch_to_protobuf({"events": events})
    rows = codec.batch_to_protobuf({"events": events}, columns=False)

    # Then both read as the same JSON batch, whose absent fields stay absent
    assert codec.batch_from_protobuf(columns) == codec.batch_from_protobuf(rows)
    read = codec.batch_from_protobuf(columns)["events"]
    assert "threshold" not in read[0]
    assert "score" not in read[1]
    assert "tokens" not in read[2]
    assert read[2]["online"] is True
    assert read[1]["threshold"] == 0.6
    # and the column-wise batch is the smaller
    assert len(columns) < len(rows)


FRAMES = [
    {"type": "hello", "device_id": "d-1", "policy_version": None, "sdk": "s/1", "platform": "p"},
    {"type": "hello", "device_id": "d-1", "policy_version": 3},
    {"type": "ack", "version": 3},
    {"type": "up_to_date", "version": None},
    {"type": "cloud_pressure", "theta_offset": 0.1, "ttl_s": 300},
    {"type": "error", "code": "bad_message", "detail": "x", "field": "sdk"},
    {"type": "policy_delta", "base": 3, "patch": {"cells": []}},  # a delta it cannot spell
    {"type": "ack"},  # malformed, carried as it is for the server to refuse
    {"type": "hello", "device_id": 5, "policy_version": None},
]


@pytest.mark.parametrize("frame", FRAMES)
def test_wire__frame__round_trip_to_the_same_json(frame: dict[str, Any]) -> None:
    # Given / When a frame goes to protobuf and back
    back = codec.frame_from_protobuf(codec.frame_to_protobuf(frame))

    # Then it is the same frame (as an object, or as the JSON text of a `json` frame)
    assert (json.loads(back) if isinstance(back, str) else back) == frame


@pytest.mark.parametrize(
    "raw", [b"\xff\xff", b"\x12\x05\x0a\x03", b"\x0a" + b"\x0a\xff" * 3, b"\x7a\x02\xc3\x28"]
)
def test_wire__frame_not_protobuf__wire_error(raw: bytes) -> None:
    with pytest.raises(codec.WireError):
        codec.frame_from_protobuf(raw)


# --- a device on JSON and a device on protobuf decide alike ------------------------------------

_CELL = st.fixed_dictionaries(
    {
        "mode": st.sampled_from(["device_only", "cloud_only", "auto", "draft_refine"]),
        "threshold": st.floats(0, 1),
        "weights.length": st.floats(0, 1),
        "network.rtt_high_ms": st.floats(1, 2000),
        "network.bandwidth_low_kbps": st.floats(1, 100_000),
        "network.theta_raise": st.floats(0, 0.5),
        "load.busy": st.floats(0.05, 1),
        "load.theta_lower": st.floats(0, 0.5),
        "upload.allowed": st.booleans(),
        "latency_budget_ms": st.integers(1, 60_000),
        "length_norm_tokens": st.integers(1, 10_000),
    }
)
_TASK = st.builds(
    TaskSignals,
    tokens=st.integers(0, 20_000),
    intent_conf=st.floats(0, 1),
    lm_conf=st.floats(0, 1),
    upload_bytes=st.integers(0, 10**7),
)
_DEVICE = st.builds(
    DeviceState,
    rtt_ms=st.floats(0, 5000),
    bandwidth_kbps=st.floats(0, 10**6),
    device_load=st.floats(0, 1),
    online=st.booleans(),
    cloud_infer_ms=st.floats(0, 10_000),
    cloud_pressure=st.floats(-0.5, 0.5),
)


@settings(max_examples=150, deadline=None)
@given(
    cells=st.lists(_CELL, min_size=12, max_size=12),
    tasks=st.lists(_TASK, min_size=1, max_size=8),
    state=_DEVICE,
)
def test_wire__same_version_json_or_protobuf__same_decision_on_every_task(
    cells: list[dict[str, Any]], tasks: list[TaskSignals], state: DeviceState
) -> None:
    # Given a version whose 12 cells are drawn at random (weights summing to 1)
    table = {}
    for key, drawn in zip(demo_table(), cells, strict=True):
        rest = 1.0 - drawn["weights.length"]
        drawn = {**drawn, "weights.intent": rest / 2, "weights.lm": rest - rest / 2}
        table[key] = {**DEFAULT_CELL_VALUES, **drawn}
    document = _document(table, SEED_DIMENSIONS)

    # When one device receives it as JSON and another as protobuf
    on_json = parse_policy(json.loads(json.dumps(document)))
    on_protobuf = parse_policy(
        document_of(PROTOBUF_MEDIA_TYPE, codec.document_to_protobuf(document))
    )

    # Then they hold the same cells and decide every task alike, in every cell
    assert on_json.table.cells == on_protobuf.table.cells
    for key, cell in on_json.table.cells.items():
        for task in tasks:
            assert decide(cell, task, state) == decide(on_protobuf.table.cells[key], task, state)


# --- compression -------------------------------------------------------------------------------


@pytest.mark.parametrize("coding", compression.CODINGS)
def test_wire__inflate__stops_at_the_cap(coding: str) -> None:
    # Given 100 MiB compressed to a few hundred KiB
    bomb = compression.compress(b"\x00" * (100 * 1024 * 1024), coding)

    # When / Then inflating with a 1 MiB cap refuses it; a body under the cap comes back whole
    with pytest.raises(compression.TooLarge):
        compression.inflate(bomb, coding, limit=1024 * 1024)
    small = json.dumps({"events": make_events(3)}).encode()
    assert compression.inflate(compression.compress(small, coding), coding, limit=10**6) == small


@pytest.mark.parametrize(
    ("header", "chosen"),
    [
        ("gzip, deflate", "gzip"),
        ("gzip;q=0, zstd;q=0", ""),
        ("identity", ""),
        ("*", compression.CODINGS[0]),
        ("", ""),
        ("gzip;q=nonsense", ""),
    ],
)
def test_wire__preferred_coding__follows_accept_encoding(header: str, chosen: str) -> None:
    assert compression.preferred_coding(header) == chosen


def test_wire__sdk_telemetry__json_until_the_server_says_it_reads_protobuf() -> None:
    # Given a device's batch and a sender that has heard nothing yet
    body = json.dumps({"events": make_events(5)}).encode()
    wire = TelemetryWire("auto")
    assert wire.http_body(body) == (body, {"Content-Type": "application/json"})

    # When an answer says the server reads protobuf and gzip
    wire.learn(
        {"Accept-Post": f"application/json, {PROTOBUF_MEDIA_TYPE}", "Accept-Encoding": "gzip"}
    )

    # Then the next batch is gzip-compressed protobuf of the same events
    content, headers = wire.http_body(body)
    assert headers == {"Content-Type": PROTOBUF_MEDIA_TYPE, "Content-Encoding": "gzip"}
    inflated = compression.inflate(content, "gzip", limit=10**6)
    assert [e["event_id"] for e in codec.batch_from_protobuf(inflated)["events"]] == [
        e["event_id"] for e in json.loads(body)["events"]
    ]
    # and a device forced to JSON never switches
    forced = TelemetryWire("json")
    forced.learn({"Accept-Post": PROTOBUF_MEDIA_TYPE, "Accept-Encoding": "gzip"})
    assert forced.http_body(body) == (body, {"Content-Type": "application/json"})
