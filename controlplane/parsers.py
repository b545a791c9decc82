"""The one JSON parser of the REST API: the body goes through controlplane.json_guard."""

from collections.abc import Mapping
from typing import IO, Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


class GuardedJSONParser(JSONParser):
    """DRF's JSONParser, with depth, strings and numbers checked by `json_guard`.

    Too deep, NUL or a lone surrogate in a string, or NaN / Infinity / an overflowing number:
    400 `validation_failed` naming the field. Not JSON (or not UTF-8): 400 `parse_error`.
    """

    def parse(
        self,
        stream: IO[Any] | None,
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        # Imported here: DRF loads this class while controlplane.exceptions (which json_guard
        # needs) is still importing rest_framework.views.
        from . import json_guard

        raw = stream.read() if stream is not None else b""
        try:
            return json_guard.loads(raw)
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
