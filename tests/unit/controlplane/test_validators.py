"""The tidy-text rule (ids, names, notes refused, never trimmed) and its schema pattern agree."""

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.validators import (
    PY_SPACE_CLASS,
    SOME_TEXT_PATTERN,
    TIDY_TEXT_PATTERN,
    text_problem,
)

EDGES = st.sampled_from(
    ["", " ", "\t", "\n", "\u00a0", "\u2028", "\x07", "\x1e", "\x85", "\ufeff", "\u3000", "a", "é"]
)


@settings(max_examples=3000, deadline=None)
@given(st.text() | st.tuples(EDGES, st.text(), EDGES).map("".join))
def test_tidy_text_pattern__any_text__matches_exactly_what_the_server_accepts(text: str) -> None:
    # Given any text, with whitespace and control characters at its edges half of the time
    # When the schema's pattern and the server's check both judge it
    matches = re.fullmatch(TIDY_TEXT_PATTERN, text) is not None

    # Then a generated client refuses exactly what the server refuses
    assert matches == (text_problem(text) is None)


def test_space_class__every_code_point__is_exactly_what_strip_takes_away() -> None:
    # Given every Unicode code point
    # When the pattern's whitespace class and Python's isspace() judge each
    in_class = re.compile(f"[{PY_SPACE_CLASS}]")
    disagree = [hex(c) for c in range(0x110000) if bool(in_class.match(chr(c))) != chr(c).isspace()]

    # Then they agree on all of them
    assert disagree == []


@settings(max_examples=2000, deadline=None)
@given(st.text(alphabet=st.sampled_from(" \t\n\x1e\x85\u3000\ufeffa")))
def test_some_text_pattern__any_text__matches_what_is_not_blank_after_strip(text: str) -> None:
    # Given text made of whitespace of every kind and an occasional letter
    # When the schema's pattern (a search) and the server's blank check both judge it
    matches = re.search(SOME_TEXT_PATTERN, text) is not None

    # Then they agree
    assert matches == bool(text.strip())


def test_patterns__no_shorthand_classes__an_ecma_engine_reads_them_as_python_does() -> None:
    # Given the patterns the schema publishes
    # When they are read for \\s, \\S, \\w, \\d (ECMA-262 and Python define them differently)
    shorthand = [p for p in (TIDY_TEXT_PATTERN, SOME_TEXT_PATTERN) if re.search(r"\\[sSwWdD]", p)]

    # Then there is none
    assert shorthand == []
