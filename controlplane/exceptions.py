"""One application error type and the DRF handler that turns every error into the same JSON shape.

Every API error answers `{"error": {"code": ..., "message": ..., "details": [...]}}`.
"""

from typing import Any

from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.http import Http404
from rest_framework import exceptions as drf_exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler


class ApplicationError(Exception):
    """A refusal a user can act on: carries an HTTP status, a stable code and per-field details."""

    status_code = 400
    code = "invalid"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int | None = None,
        details: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if status is not None:
            self.status_code = status
        self.details = details or []


class ValidationFailed(ApplicationError):
    """Input broke a rule; `details` names each cell and field."""

    status_code = 400
    code = "validation_failed"


class Conflict(ApplicationError):
    """The request is well formed but clashes with current state (stale revision, duplicate)."""

    status_code = 409
    code = "conflict"


class NotFound(ApplicationError):
    """The named object does not exist."""

    status_code = 404
    code = "not_found"


def drf_error_details(detail: Any, path: str = "") -> list[dict[str, Any]]:
    """A DRF error detail as the API's `details`: one `{field, message}` per problem."""
    if isinstance(detail, dict):
        out: list[dict[str, Any]] = []
        for key, value in detail.items():
            # A list's item errors come keyed by index (ListField): `cells[0].threshold`,
            # the one path syntax of every error the API writes.
            if isinstance(key, int):
                child = f"{path}[{key}]"
            else:
                child = f"{path}.{key}" if path else str(key)
            out.extend(drf_error_details(value, child))
        return out
    if isinstance(detail, list):
        if all(not isinstance(item, dict | list) for item in detail):
            return [{"field": path or "body", "message": str(item)} for item in detail]
        out = []
        for index, value in enumerate(detail):
            out.extend(drf_error_details(value, f"{path}[{index}]"))
        return out
    return [{"field": path or "body", "message": str(detail)}]


def error_body(
    code: str, message: str, details: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The one JSON shape of every API error."""
    return {"error": {"code": code, "message": message, "details": details or []}}


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Map application, DRF and Django errors to `error_body` responses."""
    if isinstance(exc, ApplicationError):
        return Response(error_body(exc.code, exc.message, exc.details), status=exc.status_code)
    if isinstance(exc, RequestDataTooBig):
        return Response(error_body("payload_too_large", str(exc)), status=413)
    if isinstance(exc, Http404):
        exc = drf_exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = drf_exceptions.PermissionDenied()
    response = exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, drf_exceptions.ValidationError):
        body = error_body(
            "validation_failed", "The request is invalid.", drf_error_details(exc.detail)
        )
    elif isinstance(exc, drf_exceptions.APIException):
        message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        body = error_body(str(exc.default_code), str(message))
    else:
        body = error_body("error", str(exc))
    response.data = body
    return response
