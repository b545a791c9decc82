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
