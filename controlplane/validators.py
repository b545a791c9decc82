"""Checks of identifiers and names shared by the API, the services and the pages."""

import re
from typing import Final, TypeGuard

from django.core.validators import RegexValidator
from rest_framework import serializers

_CONTROL: Final = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# The schema's patterns spell every class out: a JSON Schema pattern is ECMA-262, whose `\s`
# is not Python's (ECMA counts U+FEFF, Python counts U+001C-U+001F and U+0085), so `\s` in a
# pattern would let a client and the server disagree on the same text.
_CTRL_CLASS: Final = r"\x00-\x1f\x7f-\x9f\u2028\u2029"
# What Python's str.strip() takes away (every c with c.isspace()), a test holds them equal.
PY_SPACE_CLASS: Final = r"\t-\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
# text_problem's rule as a regular expression, for the OpenAPI schema (a generated client then
# refuses what the server would): no control character, no whitespace at either end. Kept as
# escapes, not characters, so the schema shows it readably; a property test holds the two equal.
TIDY_TEXT_PATTERN: Final = (
    rf"^(?:[^{_CTRL_CLASS}{PY_SPACE_CLASS}]"
    rf"(?:[^{_CTRL_CLASS}]*[^{_CTRL_CLASS}{PY_SPACE_CLASS}])?)?$"
)
# Some text, not only whitespace: what a service that refuses `not value.strip()` accepts.
SOME_TEXT_PATTERN: Final = rf"[^{PY_SPACE_CLASS}]"


def is_whole_number(value: object, low: int, high: int | None = None) -> TypeGuard[int]:
    """Whether `value` is a JSON whole number from `low` to `high` (no upper end: None).

    `True` is not 1 and `"5"` is not 5: a service taking JSON as it is typed refuses both,
    as the schema's integer does."""
    if isinstance(value, bool) or not isinstance(value, int):
        return False
    return low <= value and (high is None or value <= high)


def text_problem(value: str) -> str | None:
    """Why `value` is not a clean id or name, or None.

    Leading or trailing whitespace and control characters are refused, never trimmed: an id
    quietly stored as something else than what the client sent (`"abc\\n"` as `"abc"`) is an
    id the client cannot find again, and two names that differ only in a trailing space look
    the same on every page.
    """
    if value != value.strip():
        return "Must not start or end with whitespace."
    if _CONTROL.search(value):
        return "Must not contain control characters (newlines, tabs, NUL, …)."
    return None


def refuse_untidy_text(value: str) -> None:
    """A DRF field validator: `text_problem` as a ValidationError."""
    problem = text_problem(value)
    if problem is not None:
        raise serializers.ValidationError(problem)


class TidyTextValidator(RegexValidator):
    """`refuse_untidy_text` as a RegexValidator, so drf-spectacular writes its `pattern` into the
    schema; the message stays `text_problem`'s."""

    def __init__(self) -> None:
        super().__init__(regex=TIDY_TEXT_PATTERN)

    def __call__(self, value: object) -> None:
        refuse_untidy_text(str(value))
