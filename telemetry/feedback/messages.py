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
from typing import Annotated, Final

import msgspec

from controlplane import json_guard
from controlplane.exceptions import ValidationFailed

from ..structs import batch_items, field_problems, unnamed_problem

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


_DECODER: Final = msgspec.json.Decoder(TelemetryFeedbackBatch)


class FeedbackTooLarge(Exception):
    """More than MAX_ITEMS items (answered 413)."""


def _refuse(details: list[dict[str, str]]) -> ValidationFailed:
    return ValidationFailed(
        "The feedback is invalid; nothing of it was stored.", details=details[:MAX_ERRORS]
    )


def decode_feedback(body: bytes) -> list[TelemetryFeedbackItem]:
    """The body's items, all valid; raises ValidationFailed naming each bad item and field,
    FeedbackTooLarge over MAX_ITEMS items."""
    try:
        # Depth, NUL and lone surrogates before any parser (json_guard), naming the path.
        json_guard.check_raw(body)
    except json_guard.JsonRefused as refused:
        problem = refused.problem
        raise _refuse(
            [{"field": problem.field or "feedback", "message": problem.message}]
        ) from None
    try:
        items = _DECODER.decode(body).feedback
    except msgspec.MsgspecError:
        raise _complete_check(body) from None
    return items  # 1 to MAX_ITEMS (the struct says so)


def _complete_check(body: bytes) -> ValidationFailed | FeedbackTooLarge:
    """Check the whole body by the struct and name every problem (the fast pass stopped at one)."""
    try:
        document, items = batch_items(
            body, "feedback", most=MAX_ITEMS, too_large=FeedbackTooLarge, refuse=_refuse
        )
    except (ValidationFailed, FeedbackTooLarge) as exc:
        return exc
    details: list[dict[str, str]] = []
    for index, raw in enumerate(items):
        if not isinstance(raw, dict):
            details.append({"field": f"feedback[{index}]", "message": "Must be an object."})
            continue
        details.extend(
            {"field": f"feedback[{index}].{name}", "message": problem}
            for name, problem in field_problems(TelemetryFeedbackItem, raw).items()
        )
    if not details and (unnamed := unnamed_problem(document, body, _DECODER)) is not None:
        details.append({"field": unnamed.field or "feedback", "message": unnamed.message})
    return _refuse(details)
