"""Bodies a hostile client sends, for the bad-input tests of every JSON endpoint and frame.

Each is a raw JSON value put under one extra field of an otherwise good body, so that the test
can check the refusal names that field: nested 1,000 deep (2 KB; a recursive parser would
overflow), a NUL, a lone surrogate, and the non-JSON literals NaN / Infinity.
"""

import json
from dataclasses import dataclass
from typing import Any

import pytest


@dataclass(frozen=True)
class Hostile:
    """A raw JSON value and a word the refusal's message must contain."""

    name: str
    raw: str
    says: str


DEPTH = 1000
HOSTILE = [
    Hostile("nested-1000-deep", "[" * DEPTH + "]" * DEPTH, "levels deep"),
    Hostile("nested-objects", '{"a":' * DEPTH + "1" + "}" * DEPTH, "levels deep"),
    Hostile("nul", '"abc\\u0000def"', "NUL"),
    Hostile("lone-surrogate", '"\\ud800"', "surrogate"),
    Hostile("low-surrogate", '["ok", "x\\udfffy"]', "surrogate"),
    Hostile("nan", "NaN", "finite"),
    Hostile("infinity", "Infinity", "finite"),
    Hostile("minus-infinity", "-Infinity", "finite"),
    Hostile("overflowing", "1e999", "finite"),
]
HOSTILE_PARAMS = [pytest.param(h, id=h.name) for h in HOSTILE]


def with_field(body: dict[str, Any], name: str, raw: str) -> str:
    """`body` as JSON text with `name` set to the raw JSON value `raw` (last, replacing any)."""
    rest = json.dumps({k: v for k, v in body.items() if k != name})
    joiner = ", " if rest != "{}" else ""
    return f"{rest[:-1]}{joiner}{json.dumps(name)}: {raw}}}"


def assert_names(error: dict[str, Any], field: str, hostile: Hostile) -> None:
    """The refusal's details name `field` (or a path inside it) and say what is wrong."""
    (detail,) = error["details"]
    named = detail["field"]
    assert named == field or named.startswith((f"{field}.", f"{field}[")), detail
    assert hostile.says in detail["message"], detail


# --- for property-based fuzzing (hypothesis) ---------------------------------------------------


def _strategies() -> Any:
    """(any JSON value, bodies shaped like `shape` with any values) as hypothesis strategies."""
    from hypothesis import strategies as st

    weird_text = st.text(
        alphabet=st.one_of(
            st.characters(codec="utf-8"),
            st.sampled_from(["\x00", "\ud800", "\udfff", "\n", " ", "\u2028", "\ufeff", '"']),
        ),
        max_size=20,
    )
    numbers = st.one_of(
        st.integers(min_value=-(10**30), max_value=10**30),
        st.integers(min_value=10**300, max_value=10**310),
        st.floats(),  # NaN and infinities included: written as NaN / Infinity tokens
        st.sampled_from([1e308, -1e308, 5e-324, 2**63, -(2**63) - 1, 2**31]),
    )
    scalars = st.one_of(st.none(), st.booleans(), numbers, weird_text)
    values = st.recursive(
        scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=4), st.dictionaries(weird_text, children, max_size=4)
        ),
        max_leaves=12,
    )
    return st, values


def fuzz_bodies(shape: dict[str, Any]) -> Any:
    """Bodies (bytes) a fuzzer sends where a `shape` object is expected: any JSON value, `shape`
    with any field replaced or added, nested thousands deep, or any bytes at all."""
    st, values = _strategies()

    def encode(value: Any) -> bytes:
        # ensure_ascii: lone surrogates travel as \\ud800 escapes, as a hostile client sends them
        return json.dumps(value, ensure_ascii=True).encode()

    def shaped(changes: dict[str, Any]) -> bytes:
        return encode({**shape, **changes})

    field_names = st.one_of(st.sampled_from(sorted(shape)), st.text(max_size=8))
    deep = st.integers(min_value=30, max_value=5000).map(
        lambda depth: ("[" * depth + "]" * depth).encode()
    )
    deep_objects = st.integers(min_value=30, max_value=3000).map(
        lambda depth: ('{"a":' * depth + "1" + "}" * depth).encode()
    )
    return st.one_of(
        values.map(encode),
        st.dictionaries(field_names, values, max_size=4).map(shaped),
        deep,
        deep_objects,
        st.binary(max_size=64),
        st.sampled_from([b"NaN", b'{"a": Infinity}', b"[" * 100_000, b"\xed\xa0\x80"]),
    )
