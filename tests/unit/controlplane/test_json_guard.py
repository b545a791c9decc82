"""controlplane.json_guard: the depth scan is exact on JSON and never too lenient on anything
else, names the path, and the walk finds every NUL, lone surrogate and non-finite number."""

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane import json_guard
from controlplane.json_guard import JsonRefused, depth_problem, value_problem

LIMIT = 4  # small, so that generated values cross it often

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    # Brackets, quotes and backslashes inside strings must not count as nesting.
    st.text(alphabet=st.sampled_from('[]{}"\\,:ab\n\u00e9\U0001f600'), max_size=12),
)
json_values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.text(alphabet='[]{}"\\ab', max_size=4), children, max_size=4),
    ),
    max_leaves=30,
)


def _depth(value: Any) -> int:
    """Nesting depth as a recursive parser sees it (a scalar is 0, `[]` is 1)."""
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    return 0


@settings(max_examples=300, deadline=None)
@given(value=json_values, ascii_only=st.booleans())
def test_depth_problem__any_json__refused_exactly_when_deeper_than_the_limit(
    value: Any, ascii_only: bool
) -> None:
    # Given any JSON document (its strings full of brackets, quotes and escapes)
    raw = json.dumps(value, ensure_ascii=ascii_only).encode()

    # When its depth is checked / Then it is refused exactly when nested past the limit
    assert (depth_problem(raw, LIMIT) is not None) == (_depth(value) > LIMIT)


@settings(max_examples=300, deadline=None)
@given(raw=st.text(alphabet=st.sampled_from('[]{}",:\\ 1a'), max_size=40))
def test_depth_problem__any_text__never_lets_a_parser_recurse_past_the_limit(raw: str) -> None:
    # Given any text made of JSON's structural characters (mostly not JSON)
    # When the scan passes it
    if depth_problem(raw.encode(), LIMIT) is not None:
        return
    # Then whatever a parser makes of it is nested at most to the limit
    try:
        parsed = json.loads(raw)
    except ValueError:
        return
    assert _depth(parsed) <= LIMIT


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        ('{"events": [{"x": ' + "[" * 40 + "]" * 40 + "}]}", "events[0].x" + "[0]" * 29),
        (
            '{"a": 1, "b": [0, 1, {"c": ' + '{"d": ' * 40 + "1" + "}" * 41 + "]}",
            "b[2].c" + ".d" * 29,
        ),
        ('["[[[[", "\\"{{{{", ' + "[" * 40 + "]" * 40 + "]", "[2]" + "[0]" * 31),
    ],
    ids=["under-an-event", "under-objects", "after-strings-of-brackets"],
)
def test_depth_problem__too_deep__names_the_path_of_the_value_past_the_limit(
    raw: str, path: str
) -> None:
    # Given a body nested past 32 levels somewhere / When it is checked
    problem = depth_problem(raw.encode())

    # Then the path named leads to the value that opens level 33
    assert problem is not None
    assert problem.field == path
    assert "32 levels" in problem.message


def test_depth_problem__huge_body__refused_fast_without_a_path() -> None:
    # Given 900 KB of brackets (past the size whose path is worth a token-by-token scan)
    raw = b"[" + b"[]," * 300_000 + b"[" * 40

    # When it is checked / Then it is refused, naming the body
    problem = depth_problem(raw)
    assert problem is not None
    assert problem.field == ""


@pytest.mark.parametrize(
    ("value", "path", "says"),
    [
        ({"a": ["ok", "x\x00"]}, "a[1]", "NUL"),
        ({"a\x00b": 1}, "a\\u0000b", "name must not contain the NUL"),
        ({"cells": [{"values": {"threshold": math.nan}}]}, "cells[0].values.threshold", "finite"),
        ([1, -math.inf], "[1]", "finite"),
        ({"s": "\ud83d"}, "s", "surrogate"),
        ({"s": "\udc00 tail"}, "s", "surrogate"),
    ],
)
def test_value_problem__bad_string_or_number__named_by_path(
    value: Any, path: str, says: str
) -> None:
    problem = value_problem(value)
    assert problem is not None
    assert problem.field == path
    assert says in problem.message


def test_value_problem__surrogate_pair_and_ordinary_values__fine() -> None:
    assert value_problem({"emoji": "\U0001f600", "n": 1e308, "l": [True, None, "\u00e9"]}) is None


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ('{"name": "\\ud800"}', "name"),
        ('{"name": "ok", "t": NaN}', "t"),
        ('{"x": [1e999]}', "x[0]"),
        ("[" * 5000 + "]" * 5000, "[0]" * 32),
    ],
)
def test_loads__refused__a_validation_error_naming_the_field(raw: str, field: str) -> None:
    with pytest.raises(JsonRefused) as refused:
        json_guard.loads(raw)
    assert refused.value.details[0]["field"] == field
    assert refused.value.status_code == 400


@pytest.mark.parametrize("raw", [b'{"a": ', b"\xff\xfe{}", b"nul"])
def test_loads__not_json__value_error(raw: bytes) -> None:
    with pytest.raises(ValueError):
        json_guard.loads(raw)
