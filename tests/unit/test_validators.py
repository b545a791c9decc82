"""The tidy-text rule (ids, names, notes refused, never trimmed) and its schema pattern agree."""

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.validators import TIDY_TEXT_PATTERN, text_problem

EDGES = st.sampled_from(["", " ", "\t", "\n", "\u00a0", "\u2028", "\x07", "\x85", "a", "é"])


@settings(max_examples=3000, deadline=None)
@given(st.text() | st.tuples(EDGES, st.text(), EDGES).map("".join))
def test_tidy_text_pattern__any_text__matches_exactly_what_the_server_accepts(text: str) -> None:
    # Given any text, with whitespace and control characters at its edges half of the time
    # When the schema's pattern and the server's check both judge it
    matches = re.fullmatch(TIDY_TEXT_PATTERN, text) is not None

    # Then a generated client refuses exactly what the server refuses
    assert matches == (text_problem(text) is None)
