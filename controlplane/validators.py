"""Checks of identifiers and names shared by the API, the services and the pages."""

import re
from typing import Final

from rest_framework import serializers

_CONTROL: Final = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


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
