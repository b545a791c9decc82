"""What every API module shares: the JSON-object body check and JSON-typed input fields.

The one error shape itself is `controlplane.exceptions.error_body`, raised as `ApplicationError`.
"""

import math
from typing import Any

from rest_framework import serializers
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.views import APIView

from controlplane.exceptions import ValidationFailed, drf_error_details
from controlplane.permissions import IsPublisher, IsViewer
from controlplane.validators import TidyTextValidator


def require_object(data: Any) -> dict[str, Any]:
    """The request body as a JSON object; `[]`, `null` or `"x"` are refused, not read as `{}`."""
    if not isinstance(data, dict):
        raise ValidationFailed(
            "The body must be a JSON object.",
            details=[{"field": "body", "message": "expected an object"}],
        )
    return data


# --- JSON-typed fields: the input serializers the views validate with take JSON as it is typed.
# DRF's fields coerce (`123` becomes "123", "5" becomes 5, "yes" becomes True); the schema says
# string, integer, boolean, and the server must refuse what the schema refuses.


class _JsonStringMixin:
    """A JSON string only: DRF's CharField would quietly turn `123` or `1.5` into `"123"`.

    Kept as sent, never trimmed: DRF's default `trim_whitespace` would turn `"\\x1e"` (Python
    counts the information separators as whitespace) into a blank the schema never refused.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(*args, **kwargs)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")  # type: ignore[attr-defined]
        return super().to_internal_value(data)  # type: ignore[misc,no-any-return]


class JsonStringField(_JsonStringMixin, serializers.CharField):
    """`CharField` that refuses numbers, booleans and objects."""


class TidyJsonStringField(JsonStringField):
    """`JsonStringField` kept as sent, never trimmed: leading / trailing whitespace and control
    characters are refused (controlplane.validators.text_problem, declared in the schema as a
    pattern), so `"abc\\n"` is not stored as `"abc"`."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs["validators"] = [*kwargs.get("validators", ()), TidyTextValidator()]
        super().__init__(**kwargs)


class JsonRegexField(_JsonStringMixin, serializers.RegexField):
    """`RegexField` that refuses numbers, booleans and objects, and is never trimmed (an id
    with a trailing newline is refused, not matched as the id without it)."""


class JsonSlugField(JsonRegexField):
    """A slug that refuses numbers, booleans and objects. Anchored with `\\Z`: DRF's
    SlugField pattern ends in `$`, which also matches before a trailing newline."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(r"\A[-a-zA-Z0-9_]+\Z", **kwargs)


class _JsonNumberMixin:
    """A JSON number only: DRF's numeric fields would read `"5"` as 5 and `true` as 1."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("invalid")  # type: ignore[attr-defined]
        return super().to_internal_value(data)  # type: ignore[misc]


class JsonIntegerField(_JsonNumberMixin, serializers.IntegerField):
    """A JSON number that is whole: not `"5"`, not `true`."""


class JsonChoiceField(serializers.ChoiceField):
    """A choice of the JSON type of its choices: `5` for a stage, never `"5"` or `true`."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, bool) or not any(type(data) is type(c) for c in self.choices):
            self.fail("invalid_choice", input=data)
        return super().to_internal_value(data)


class JsonFloatField(_JsonNumberMixin, serializers.FloatField):
    """A finite JSON number, whole or not: not `"0.5"`, not `true`. (controlplane.json_guard
    refuses NaN and infinities in a body already; a service that checks its arguments with
    the serializer meets them too.)"""

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, float) and not math.isfinite(data):
            self.fail("invalid")
        return float(super().to_internal_value(data))


class JsonBooleanField(serializers.BooleanField):
    """`true` or `false` only: DRF's BooleanField would take `"yes"`, `1` or `"on"`."""

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


def input_validate(
    serializer_class: type[serializers.Serializer[Any]],
    data: dict[str, Any],
    *,
    message: str = "The request is invalid.",
) -> dict[str, Any]:
    """`data` checked by an input serializer, or one ValidationFailed naming every bad field
    (an unknown field included: a typo must not be silently ignored). For the views of the
    API and of the pages alike, which both show a ValidationFailed's details."""
    fields = serializer_class().fields
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ValidationFailed(
            f"Unknown field {unknown[0]!r}.",
            details=[{"field": name, "message": "unknown"} for name in unknown],
        )
    serializer = serializer_class(data=data)
    if not serializer.is_valid():
        raise ValidationFailed(message, details=drf_error_details(serializer.errors))
    return dict(serializer.validated_data)


class ViewerReadsApi(APIView):
    """An API that viewers read (GET, HEAD, OPTIONS); its other methods need
    `change_permission`."""

    change_permission: type[BasePermission] = IsPublisher

    def get_permissions(self) -> list[BasePermission]:
        if self.request.method in SAFE_METHODS:
            return [IsViewer()]
        return [self.change_permission()]
