"""The feedback body of PROTOCOL.md extensions: decoding and validation.

The struct `TelemetryFeedbackBatch` is the one declaration of the body; its JSON Schema is the
API's (telemetry.structs). As for telemetry (ingest.events), in two passes: msgspec decodes a
good body into typed structs in C; only when it refuses the body is it parsed again with the
standard library and each item checked against the struct field by field, so that the 400
names every bad item and field (`feedback[3].quality`).
Unknown fields are ignored: the protocol grows by new optional fields.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Final

import msgspec

from controlplane import json_guard
from controlplane.exceptions import ValidationFailed

from ..structs import BatchBody, field_problems

MAX_ITEMS: Final = 1000
MAX_ERRORS: Final = 200  # a 400 names at most this many problems

Unit = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]


class TelemetryFeedbackItem(msgspec.Struct, kw_only=True):
    """The app's quality reading of one event, sent after the event."""

    event_id: uuid.UUID
    quality: Unit


class TelemetryFeedbackBatch(msgspec.Struct):
    """The body of `POST /api/v1/telemetry/feedback`."""

    # 1 to MAX_ITEMS: refused otherwise by the complete check (413 over the most).
    feedback: Annotated[
        list[TelemetryFeedbackItem], msgspec.Meta(min_length=1, max_length=MAX_ITEMS)
    ]


class FeedbackTooLarge(Exception):
    """More than MAX_ITEMS items (answered 413)."""


def _refuse(details: list[dict[str, str]]) -> ValidationFailed:
    return ValidationFailed(
        "The feedback is invalid; nothing of it was stored.", details=details[:MAX_ERRORS]
    )


def _guard_detail(problem: json_guard.JsonProblem) -> dict[str, str]:
    return {"field": problem.field or "feedback", "message": problem.message}


_BODY: Final = BatchBody(
    TelemetryFeedbackBatch, too_large=FeedbackTooLarge, refuse=_refuse, guard_detail=_guard_detail
)


def decode_feedback(body: bytes) -> list[TelemetryFeedbackItem]:
    """The body's items, all valid; raises ValidationFailed naming each bad item and field,
    FeedbackTooLarge over MAX_ITEMS items."""
    return _BODY.decode(body, _item_problems).feedback  # 1 to MAX_ITEMS (the struct says so)


def _item_problems(index: int, raw: Any) -> list[dict[str, Any]]:
    """What the struct refuses of one item, as the standard library read it."""
    if not isinstance(raw, dict):
        return [{"field": f"feedback[{index}]", "message": "Must be an object."}]
    return [
        {"field": f"feedback[{index}].{name}", "message": problem}
        for name, problem in field_problems(TelemetryFeedbackItem, raw).items()
    ]
