"""Policy deltas in protobuf (`PolicyDelta`, docs/PROTOCOL.md, "Binary frames and compression"):
a delta converts to protobuf and back to the same delta, applies to the same document, and a
device holding it decides as a device on JSON; the `policy_delta` frame has its own message;
hostile bytes are refused (WireError), and the SDK counts what it cannot read or apply."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_sdk.decision import DeviceState, TaskSignals, decide
from edge_sdk.delta import apply_delta, canonical_bytes, make_delta
from edge_sdk.delta_sync import PolicyDeltas
from edge_sdk.policy import parse_policy
from edge_sdk.wire import PROTOBUF_MEDIA_TYPE, codec
from edge_sdk.wire import edge_routing_pb2 as pb
from edge_sdk.wire.negotiation import document_of, frame_text, json_answer
from routing_policies.cell_schema import SEED_DIMENSIONS
from routing_policies.demo import demo_table
from routing_policies.documents import build_document
from tests.hostile_protobuf import varint

from .test_wire import _DEVICE, _TASK  # the tasks and device states of the decision property

_PUBLISHED = datetime(2026, 12, 2, 12, tzinfo=UTC)


def _document(number: int, table: dict[Any, Any], dimensions: dict[str, list[str]]) -> Any:
    document = build_document(
        fleet_slug="voice-assistant-android",
        number=number,
        published_at=_PUBLISHED + timedelta(hours=number),
        dimensions=dimensions,
        table=table,
    )
    return json.loads(json.dumps(document))  # as a device holds it


def _pair() -> tuple[dict[str, Any], dict[str, Any]]:
    before = demo_table()
    after = {key: dict(values) for key, values in before.items()}
    after[("text", "interactive", "normal")]["threshold"] = 0.33
    return _document(3, before, SEED_DIMENSIONS), _document(4, after, SEED_DIMENSIONS)


# Each cell's change: θ, a weight set, a mode, shadow_refine_rate set or removed (a null member
# of the patch), or none.
_CHANGE = st.one_of(
    st.none(),
    st.fixed_dictionaries({"threshold": st.floats(0, 1)}),
    st.fixed_dictionaries({"mode": st.sampled_from(["device_only", "cloud_only", "auto"])}),
    st.fixed_dictionaries({"latency_budget_ms": st.integers(1, 60_000)}),
    st.just({"shadow_refine_rate": 0.02}),
    st.just({"weights": {"length": 0.5, "intent": 0.25, "lm": 0.25}}),
)


def _table(changes: list[dict[str, Any] | None], base: dict[Any, Any]) -> dict[Any, Any]:
    table = {}
    for (key, values), change in zip(base.items(), changes, strict=True):
        table[key] = {**values, **(change or {})}
    return table


@settings(max_examples=120, deadline=None)
@given(
    before=st.lists(_CHANGE, min_size=12, max_size=12),
    after=st.lists(_CHANGE, min_size=12, max_size=12),
    drop_tier=st.sampled_from([None, "sensitive", "normal"]),
    tasks=st.lists(_TASK, min_size=1, max_size=6),
    state=_DEVICE,
)
def test_wire_delta__any_change__protobuf_delta_is_the_json_delta_and_decides_alike(
    before: list[Any],
    after: list[Any],
    drop_tier: str | None,
    tasks: list[TaskSignals],
    state: DeviceState,
) -> None:
    # Given two versions drawn at random (cells changed, a field added or removed, a dimension
    # value and its cells dropped), and the delta between them
    base = _document(3, _table(before, demo_table()), SEED_DIMENSIONS)
    dims = dict(SEED_DIMENSIONS)
    target_table = _table(after, demo_table())
    if drop_tier is not None:
        dims["privacy_tier"] = [t for t in dims["privacy_tier"] if t != drop_tier]
        target_table = {k: v for k, v in target_table.items() if k[2] != drop_tier}
    target = _document(4, target_table, dims)
    delta = make_delta(base, target)
    assert delta is not None

    # When one device receives it as JSON and another as protobuf (a body and a frame)
    as_json = apply_delta(base, json.loads(json.dumps(delta)))
    read = codec.delta_from_protobuf(codec.delta_to_protobuf(delta))
    frame = codec.frame_from_protobuf(
        codec.frame_to_protobuf({"type": "policy_delta", **delta, "rollout": None})
    )
    as_protobuf = apply_delta(base, read)

    # Then the protobuf delta is the JSON delta, the frame carries it, both apply to the target
    # byte-equal after canonical encoding, and the two devices decide every task alike
    assert canonical_bytes(read) == canonical_bytes(delta)
    assert isinstance(frame, dict)
    assert canonical_bytes({k: v for k, v in frame.items() if k != "type"}) == canonical_bytes(
        {**delta, "rollout": None}
    )
    assert canonical_bytes(as_protobuf) == canonical_bytes(as_json) == canonical_bytes(target)
    on_json, on_protobuf = parse_policy(as_json), parse_policy(as_protobuf)
    assert on_json.table.cells == on_protobuf.table.cells
    for key, cell in on_json.table.cells.items():
        for task in tasks:
            assert decide(cell, task, state) == decide(on_protobuf.table.cells[key], task, state)


def test_wire_delta__one_cell_change__smaller_than_the_json_delta() -> None:
    base, target = _pair()
    delta = make_delta(base, target)
    assert delta is not None
    assert len(codec.delta_to_protobuf(delta)) < len(json.dumps(delta, separators=(",", ":")))


@pytest.mark.parametrize(
    "rollout", [None, {"id": 3, "stage": 25}, {"id": 3, "stage": 5, "holdback": 10}]
)
def test_wire_delta__frame__its_own_message_with_the_rollout(rollout: Any) -> None:
    # Given a policy_delta frame
    base, target = _pair()
    frame = {"type": "policy_delta", **(make_delta(base, target) or {}), "rollout": rollout}

    # When it goes to protobuf
    raw = codec.frame_to_protobuf(frame)

    # Then it is the Frame's policy_delta kind (not JSON text), and reads back as the frame
    message = pb.Frame()
    message.ParseFromString(raw)
    assert message.WhichOneof("kind") == "policy_delta"
    assert codec.frame_from_protobuf(raw) == frame


@pytest.mark.parametrize(
    "delta",
    [
        {"fleet": "f", "base": 1, "version": 2, "hash": "sha256:x", "patch": {}, "extra": 1},
        {"fleet": None, "base": 1, "version": 2, "hash": "sha256:x", "patch": {}},
        {"fleet": "f", "base": 1, "version": 2, "hash": "sha256:x", "patch": {"cells": [1]}},
        {"fleet": "f", "base": "1", "version": 2, "hash": "sha256:x", "patch": {}},
        {"fleet": "f", "base": 1, "version": 2, "hash": "sha256:x", "patch": {}, "order": None},
        {"fleet": "f", "base": None, "version": None, "hash": "h", "patch": {"etag": None}},
        {"fleet": "f", "base": 1, "version": 2, "hash": "h", "patch": {"cells": {"a/b/c": None}}},
        {"fleet": "f", "base": 1, "version": 2, "hash": "h", "patch": {}, "order": []},
    ],
)
def test_wire_delta__any_delta__reads_back_as_itself(delta: dict[str, Any]) -> None:
    # Given a delta the typed fields may not spell (another type, a member added later, null)
    # When / Then it converts to protobuf and back unchanged (whole as JSON text if need be)
    assert codec.delta_from_protobuf(codec.delta_to_protobuf(delta)) == delta


def _deep(levels: int) -> str:
    return '{"a":' * levels + "1" + "}" * levels


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b"\xff\xff\xff", id="garbage"),
        pytest.param(codec.delta_to_protobuf(make_delta(*_pair()) or {})[:-5], id="truncated"),
        pytest.param(pb.PolicyDelta(patch_extra_json="[1]").SerializeToString(), id="extra-list"),
        pytest.param(pb.PolicyDelta(patch_extra_json="{").SerializeToString(), id="extra-not-json"),
        pytest.param(
            pb.PolicyDelta(patch_extra_json=_deep(100_000)).SerializeToString(), id="extra-deep"
        ),
        pytest.param(pb.PolicyDelta(json="null").SerializeToString(), id="json-not-an-object"),
        pytest.param(
            pb.PolicyDelta(
                cells=[pb.CellPatch(key="a/b/c", cell=pb.Cell(extra_json=_deep(100_000)))]
            ).SerializeToString(),
            id="cell-deep",
        ),
        pytest.param(b"\x42\x02\x1a\x80", id="cell-truncated"),
    ],
)
def test_wire_delta__hostile_bytes__wire_error_and_the_sdk_counts_them(raw: bytes) -> None:
    # Given / When bytes that are not a PolicyDelta (or say nothing JSON could)
    with pytest.raises(codec.WireError):
        codec.delta_from_protobuf(raw)

    # Then the SDK reads no delta from them: a poll's 226 is an unusable document (ValueError,
    # counted by the caller), an MQTT fetch none, a frame holding them no frame (dropped and
    # counted as an unreadable frame)
    with pytest.raises(ValueError):
        document_of(PROTOBUF_MEDIA_TYPE, raw, delta=True)
    with pytest.raises(ValueError):
        json_answer(PROTOBUF_MEDIA_TYPE, raw, delta=True)
    assert frame_text(_frame_holding(raw)) is None


def _frame_holding(delta: bytes) -> bytes:
    """A `Frame` whose `policy_delta.delta` is these bytes (field 7, then field 1)."""
    inner = b"\x0a" + varint(len(delta)) + delta
    return b"\x3a" + varint(len(inner)) + inner


def test_wire_delta__unknown_fields__ignored_like_json() -> None:
    # Given a delta in protobuf with a field this schema does not have (a newer server's)
    delta = make_delta(*_pair())
    assert delta is not None
    raw = codec.delta_to_protobuf(delta) + b"\xa8\x06\x01"  # field 101, varint 1

    # When / Then it reads as the delta
    assert codec.delta_from_protobuf(raw) == delta


def test_wire_delta__corrupted_protobuf_delta__refused_counted_not_applied() -> None:
    # Given a device holding v3 and a protobuf delta to v4 whose θ was altered on the way
    base, target = _pair()
    delta = make_delta(base, target)
    assert delta is not None
    message = pb.PolicyDelta()
    message.ParseFromString(codec.delta_to_protobuf(delta))
    message.cells[0].cell.threshold = 0.99
    deltas = PolicyDeltas(device_id="d-1", enabled=True)

    # When it applies it
    made = deltas.document(base, codec.delta_from_protobuf(message.SerializeToString()))

    # Then the hash does not match: nothing applied, counted (the device takes the whole one)
    assert made is None
    assert (deltas.applied, deltas.refused) == (0, 1)
