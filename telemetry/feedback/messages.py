"""The feedback body of PROTOCOL.md extensions: decoding and validation.

The struct `TelemetryFeedbackBatch` is the one declaration of the body; its JSON Schema is the
API's (telemetry.structs). As for telemetry (ingest.events), in two passes: msgspec decodes a
good body into typed structs in C; only when it refuses the body is it parsed again with the
standard library and each item checked against the struct field by field, so that the 400
names every bad item and field (`feedback[3].quality`).
Unknown fields are ignored: the protocol grows by new optional fields.
"""

from __future__ import annotations

import json
import uuid
from typing import Annotated, Final

import msgspec

from controlplane import json_guard
from controlplane.exceptions import ValidationFailed

from ..structs import field_problems

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


_EMPTY: Final = {
    "field": "feedback",
    "message": f"A batch holds 1 to {MAX_ITEMS} items; this one is empty (send nothing instead).",
}


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
    """Check the whole body by hand and name every problem (the fast pass stopped at one)."""
    try:
        document = json.loads(body.decode("utf-8"))
    except ValueError as exc:
        return ValidationFailed(f"The body is not valid JSON: {exc}", code="malformed_json")
    if not isinstance(document, dict) or not isinstance(document.get("feedback"), list):
        return _refuse([{"field": "feedback", "message": 'The body must be {"feedback": [...]}.'}])
    items = document["feedback"]
    if len(items) > MAX_ITEMS:
        return FeedbackTooLarge(f"{len(items)} items; at most {MAX_ITEMS} per batch.")
    if not items:
        return _refuse([dict(_EMPTY)])
    details: list[dict[str, str]] = []
    for index, raw in enumerate(items):
        if not isinstance(raw, dict):
            details.append({"field": f"feedback[{index}]", "message": "Must be an object."})
            continue
        details.extend(
            {"field": f"feedback[{index}].{name}", "message": problem}
            for name, problem in field_problems(TelemetryFeedbackItem, raw).items()
        )
    if not details and (unread := json_guard.value_problem(document)) is not None:
        # NaN / Infinity in a field the protocol does not know (Python's json reads them).
        details.append({"field": unread.field or "feedback", "message": unread.message})
    if not details:
        # The fast pass refused what the complete check accepts: say what msgspec said.
        try:
            _DECODER.decode(body)
        except msgspec.MsgspecError as exc:
            details.append({"field": "feedback", "message": str(exc)})
    return _refuse(details)
