"""Pagination of list APIs: `limit` and `offset`, bounded, refused (not clamped) when bad.

DRF's `LimitOffsetPagination` quietly replaces a `limit` it cannot read by the default and
clamps one above the maximum; a client asking for 5,000 rows and getting 1,000 without a word
is how lists "silently stop". Here a bad value is a 400 naming the parameter, and the answer
always says how many rows match (`count`) and where the next page is (`next`, `previous`).
The OpenAPI schema (limit, offset and the paginated body) is generated from this class.
"""

import re
from typing import Any

from rest_framework.pagination import LimitOffsetPagination
from rest_framework.request import Request

from .exceptions import ValidationFailed

_DIGITS = re.compile(r"[0-9]{1,18}")


class BoundedLimitOffsetPagination(LimitOffsetPagination):
    """`?limit=` (1 to `max_limit`, default `default_limit`) and `?offset=` (0 or more)."""

    default_limit = 200
    max_limit = 1000
    max_offset = 2**31 - 1  # declared in the schema: a longer number is refused, not parsed

    def _whole_number(
        self, request: Request, name: str, default: int, low: int, high: int | None
    ) -> int:
        raw = request.query_params.get(name)
        if raw is None:
            return default
        # ASCII digits only: int() would also take "", " 5", "+5" and "٥", which the schema's
        # integer does not allow (an empty `limit=` is refused, not read as the default).
        value = int(raw) if _DIGITS.fullmatch(raw) else None
        if value is None or value < low or (high is not None and value > high):
            bounds = f"from {low} to {high:,}" if high is not None else f"of {low} or more"
            raise ValidationFailed(
                f"`{name}` must be a whole number {bounds}.",
                details=[{"field": name, "message": f"must be a whole number {bounds}"}],
            )
        return value

    def get_limit(self, request: Request) -> int:
        assert self.default_limit is not None
        return self._whole_number(
            request, self.limit_query_param, self.default_limit, 1, self.max_limit
        )

    def get_offset(self, request: Request) -> int:
        return self._whole_number(request, self.offset_query_param, 0, 0, self.max_offset)

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        parameters: list[dict[str, Any]] = super().get_schema_operation_parameters(view)
        bounds = {
            self.limit_query_param: {
                "minimum": 1,
                "maximum": self.max_limit,
                "default": self.default_limit,
            },
            self.offset_query_param: {"minimum": 0, "maximum": self.max_offset, "default": 0},
        }
        for parameter in parameters:
            parameter["schema"].update(bounds.get(parameter["name"], {}))
        return parameters
