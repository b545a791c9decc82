"""What the lab's input serializers share: objects that refuse unknown fields, a cell named by
its three dimensions, and a reference to a version by number or by name.

Every input field is JSON-typed (a number is a JSON number, never `"5"` or `true`); the
patterns and limits are routing_policies.validation's, declared there once."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlplane.api import JsonIntegerField, JsonRegexField, TidyJsonStringField
from controlplane.openapi import closed_body
from routing_policies.cell_schema import CellKey
from routing_policies.validation import DIMENSION_VALUE_RE, MAX_VERSION

from .replay import DEFAULT_HOURS
from .segments import MAX_SEGMENT_NAME


class ClosedSerializer(serializers.Serializer[Any]):
    """An object that refuses the fields it does not declare (each named in the 400), at
    every level it nests."""

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, dict):
            # A list detail is named by the field itself ("cell"), not "cell.non_field_errors".
            raise serializers.ValidationError([f"Must be an object, not {type(data).__name__}."])
        unknown = sorted(set(data) - set(self.fields))
        if unknown:
            raise serializers.ValidationError({name: ["unknown field"] for name in unknown})
        return super().to_internal_value(data)


def dimension_field() -> JsonRegexField:
    """One dimension's value in a cell (`text`, `interactive`, `normal`)."""
    return JsonRegexField(DIMENSION_VALUE_RE.pattern, max_length=32)


def version_number_field(**kwargs: Any) -> JsonIntegerField:
    """A version's number or a revision: a whole number from 1 to MAX_VERSION."""
    return JsonIntegerField(min_value=1, max_value=MAX_VERSION, **kwargs)


def window_hours_field(*, max_hours: int, help_text: str) -> JsonIntegerField:
    """A window's length: a whole number of hours up to `max_hours`, the last day unless
    asked otherwise."""
    return JsonIntegerField(
        min_value=1, max_value=max_hours, default=DEFAULT_HOURS, help_text=help_text
    )


def segment_field(help_text: str) -> TidyJsonStringField:
    """A segment of the fleet by its name (lab.segments: one the fleet has, else a 400 naming
    the field); omitted, the whole fleet."""
    return TidyJsonStringField(max_length=MAX_SEGMENT_NAME, required=False, help_text=help_text)


class CellKeyFields(ClosedSerializer):
    """The three dimensions that name a cell of the table."""

    task_type = dimension_field()
    latency_budget = dimension_field()
    privacy_tier = dimension_field()


# A cell by its three dimensions in an answer (the fields first, as the answers list them).
# (A comment: a docstring here would become the description of every answer built on it.)
class CellKeyOut(serializers.Serializer[Any]):
    task_type = serializers.CharField()
    latency_budget = serializers.CharField()
    privacy_tier = serializers.CharField()


def cell_key(cell: dict[str, Any]) -> CellKey:
    """The key of a validated `CellKeyFields` object."""
    return (cell["task_type"], cell["latency_budget"], cell["privacy_tier"])


@closed_body
class LabCellSerializer(CellKeyFields):
    """The cell: one value of each dimension."""

    class Meta:
        ref_name = "LabCell"


def _version_ref_schema(names: tuple[str, ...], description: str) -> dict[str, Any]:
    return {
        "oneOf": [
            {"type": "integer", "minimum": 1, "maximum": MAX_VERSION},
            {"type": "string", "enum": list(names)},
        ],
        "description": description,
    }


def version_ref_text(text: str) -> int | str:
    """A version as a page's URL or form names it: `3` is version 3, anything else a name."""
    stripped = text.strip()
    return int(stripped) if stripped.isascii() and stripped.isdigit() else stripped


class VersionRefField(serializers.Field):  # type: ignore[type-arg]
    """A version number, or one of the names `names` (`draft`, `latest`). A page posts text:
    a number typed into it reads as the number (`form_value`, controlplane.pages)."""

    names: tuple[str, ...] = ("draft", "latest")
    default_error_messages = {
        "invalid": "Must be a version number (1, 2, ...), 'draft' or 'latest'."
    }

    def to_internal_value(self, data: Any) -> int | str:
        if isinstance(data, str) and data in self.names:
            return data
        if isinstance(data, bool) or not isinstance(data, int) or not 1 <= data <= MAX_VERSION:
            self.fail("invalid")
        return int(data)

    def to_representation(self, value: Any) -> Any:
        return value

    def form_value(self, text: str) -> int | str:
        return version_ref_text(text)


@extend_schema_field(
    _version_ref_schema(
        ("draft", "latest"),
        "a version number, `draft` or `latest` (default: the draft, else latest)",
    )
)
class LabVersionRefField(VersionRefField):
    """A version number, `draft` or `latest` (the playground's)."""


@extend_schema_field(
    {
        **_version_ref_schema(("draft",), '"draft" (the default) or a published version number'),
        "default": "draft",
    }
)
class SubjectField(VersionRefField):
    """`"draft"` or a published version number (what a backtest replays)."""

    names = ("draft",)
    default_error_messages = {
        "invalid": 'Must be "draft" or a published version number (1, 2, ...).'
    }
