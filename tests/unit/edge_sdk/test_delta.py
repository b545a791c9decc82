"""Policy deltas (edge_sdk.delta; docs/PROTOCOL.md, "Policy deltas"): make, apply, hash."""

from __future__ import annotations

import copy
import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_sdk.delta import DeltaError, apply_delta, canonical_bytes, canonical_hash, make_delta

from .sdk_helpers import policy_document


def _canonical_equal(a: Any, b: Any) -> bool:
    return canonical_bytes(a) == canonical_bytes(b)


def test_canonical_bytes__numbers__printed_as_ecmascript_does() -> None:
    # Given the RFC 8785 appendix's number cases (and an int that is a float's value)
    cases = [
        (0.0, "0"),
        (-0.0, "0"),
        (400, "400"),
        (400.0, "400"),
        (0.6, "0.6"),
        (1e21, "1e+21"),
        (1e20, "100000000000000000000"),
        (1e-7, "1e-7"),
        (0.000001, "0.000001"),
        (123456789012345680000.0, "123456789012345680000"),
        (-5e-324, "-5e-324"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (333333333.3333333, "333333333.3333333"),
        (9007199254740992.0, "9007199254740992"),
        (1e16, "10000000000000000"),
        (0.0001, "0.0001"),
        (0.00001, "0.00001"),
    ]
    # Then each encodes as ECMAScript prints it
    for value, text in cases:
        assert canonical_bytes(value) == text.encode(), value


def test_canonical_bytes__keys_and_strings__sorted_by_utf16_minimal_escapes() -> None:
    # Given keys whose UTF-16 order differs from code-point order (U+FB33 vs U+1D306)
    document = {"\ufb33": 1, "\U0001d306": 2, "a\nb": 'é\u0001"', "b": [True, None]}
    # Then the astral key sorts first (its surrogate D834 < FB33), escapes are minimal
    assert canonical_bytes(document) == (
        '{"a\\nb":"é\\u0001\\"","b":[true,null],"\U0001d306":2,"\ufb33":1}'.encode()
    )


def test_canonical_bytes__nan_or_lone_surrogate__refused() -> None:
    with pytest.raises(ValueError, match="NaN"):
        canonical_bytes({"x": float("nan")})
    with pytest.raises(ValueError, match="surrogate"):
        canonical_bytes({"x": "\ud800"})


def test_make_delta__one_cell_changed__patch_names_only_that_cell_field() -> None:
    # Given v1 and v2 differing in one cell's threshold
    base = policy_document(1)
    target = policy_document(2, **{"text/interactive/normal": {"threshold": 0.55}})
    # When a delta is made
    delta = make_delta(base, target)
    # Then it carries the changed field, the version fields and the target's hash, no order
    assert delta is not None
    assert delta["patch"] == {
        "version": 2,
        "etag": '"v2-unit"',
        "cells": {"text/interactive/normal": {"threshold": 0.55}},
    }
    assert delta["base"] == 1
    assert delta["version"] == 2
    assert "order" not in delta
    assert delta["hash"] == canonical_hash(target)
    assert len(json.dumps(delta)) < len(json.dumps(target)) / 5
    # And applying it gives the target
    assert _canonical_equal(apply_delta(base, delta), target)


def test_apply_delta__corrupted_patch__hash_mismatch_refused() -> None:
    # Given a delta whose changed value was altered on the way
    base, target = (
        policy_document(1),
        policy_document(2, **{"voice/background/normal": {"threshold": 0.3}}),
    )
    delta = make_delta(base, target)
    assert delta is not None
    delta["patch"]["cells"]["voice/background/normal"]["threshold"] = 0.31
    # Then applying it is refused (the device asks for the whole document)
    with pytest.raises(DeltaError, match="hash"):
        apply_delta(base, delta)


def test_apply_delta__other_base__refused_before_applying() -> None:
    base, target = policy_document(1), policy_document(3)
    delta = make_delta(base, target)
    assert delta is not None
    with pytest.raises(DeltaError, match="from version 1"):
        apply_delta(policy_document(2), delta)


@pytest.mark.parametrize(
    ("delta", "message"),
    [
        ([], "object"),
        ({"hash": "sha256:00", "patch": []}, "patch"),
        ({"patch": {}}, "hash"),
        ({"patch": {}, "hash": "md5:00"}, "hash"),
        ({"patch": {}, "hash": "sha256:00", "order": "x"}, "order"),
        ({"patch": {}, "hash": "sha256:00", "order": ["a/b/c"]}, "order"),
        ({"patch": {"cells": None}, "hash": "sha256:00"}, "no cells"),
        ({"patch": {}, "hash": "sha256:00", "fleet": "other"}, "another fleet"),
    ],
)
def test_apply_delta__malformed__delta_error_naming_the_field(delta: Any, message: str) -> None:
    with pytest.raises(DeltaError, match=message):
        apply_delta(policy_document(1), delta)


def test_apply_delta__deeply_nested_patch__delta_error_not_recursion_error() -> None:
    nested: Any = 1
    for _ in range(5000):
        nested = {"x": nested}
    with pytest.raises(DeltaError, match="deeply"):
        apply_delta(policy_document(1), {"patch": {"cells": nested}, "hash": "sha256:00"})


def test_make_delta__cells_added_and_reordered__order_carried() -> None:
    # Given a target with a new latency budget value inserted in the middle of the order
    base = policy_document(1)
    target = copy.deepcopy(base) | {"version": 2}
    extra = copy.deepcopy(target["cells"][0]) | {"latency_budget": "batch"}
    target["cells"] = [extra, *reversed(target["cells"])]
    # When a delta is made and applied
    delta = make_delta(base, target)
    assert delta is not None
    assert delta["order"][0] == "voice/batch/sensitive"
    # Then the result has the target's order, byte-equal after canonical encoding
    assert canonical_bytes(apply_delta(base, delta)) == canonical_bytes(target)


def test_make_delta__null_member__none_so_the_whole_document_is_sent() -> None:
    base = policy_document(1)
    target = policy_document(2) | {"published_at": None}
    assert make_delta(base, target) is None


# --- property: a chain of deltas ends byte-equal to the whole document ----------------------

_FIELDS = st.sampled_from(["threshold", "cache_ttl_s", "mode", "weights", "upload", "extra"])
_VALUES = st.one_of(
    st.floats(0, 1, allow_nan=False),
    st.integers(-(2**53), 2**53),
    st.text(max_size=8),
    st.booleans(),
    st.dictionaries(st.text(max_size=3), st.integers(0, 9), max_size=3),
    st.lists(st.integers(0, 9), max_size=3),
)
_EDIT = st.tuples(st.integers(0, 11), _FIELDS, _VALUES)


def _next_version(document: dict[str, Any], version: int, edits: list[Any], drop: int | None):
    nxt = copy.deepcopy(document)
    nxt["version"], nxt["etag"] = version, f'"v{version}-prop"'
    for index, field, value in edits:
        cells = nxt["cells"]
        cells[index % len(cells)][field] = value
    if drop is not None and len(nxt["cells"]) > 1:
        del nxt["cells"][drop % len(nxt["cells"])]
    return nxt


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.lists(_EDIT, max_size=4), st.none() | st.integers(0, 11), st.booleans()),
        min_size=1,
        max_size=6,
    )
)
def test_delta_chain__any_edits__ends_byte_equal_to_the_whole_document(steps: list[Any]) -> None:
    # Given a chain of versions, each a few field edits (and maybe a cell dropped, or the cells
    # reversed) away from the one before
    documents = [policy_document(1)]
    for number, (edits, drop, reverse) in enumerate(steps, start=2):
        nxt = _next_version(documents[-1], number, edits, drop)
        if reverse:
            nxt["cells"].reverse()
        documents.append(nxt)
    # When a device starting on v1 applies each delta in turn (each through JSON, as sent)
    held: dict[str, Any] = json.loads(json.dumps(documents[0]))
    for before, after in itertools.pairwise(documents):
        delta = make_delta(before, after)
        assert delta is not None
        held = apply_delta(held, json.loads(json.dumps(delta)))
    # Then it holds the last version, byte-equal after canonical encoding
    assert canonical_bytes(held) == canonical_bytes(documents[-1])
    assert canonical_hash(held) == canonical_hash(documents[-1])


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**60), 2**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=1000, deadline=None)
@given(_JSON)
def test_canonical_bytes__fast_path__the_same_bytes_as_encoding_value_by_value(value: Any) -> None:
    # Given any JSON value (non-ASCII keys, large ints, tiny and huge floats included)
    from edge_sdk.delta import _encode

    out: list[str] = []
    _encode(value, out)
    # Then the standard library's path (when it is taken) agrees with the RFC 8785 encoder
    assert canonical_bytes(value) == "".join(out).encode()
