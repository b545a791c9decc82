"""Late feedback: the app's quality (0-1) of an answer, sent after its event, keyed by event_id.

`POST /api/v1/telemetry/feedback` `{"feedback": [{"event_id": "…", "quality": 0.8}]}` (1 to
1,000 items, the device token) answers like telemetry, and the queue treats every answer as
`TelemetryQueue` does: kept until a 202 (idempotent per `event_id`, so a resend is harmless),
the items a 400 names dropped, halved on a 413, TelemetryRevoked on a 401, nothing lost on a
429, a 5xx or no network. It is bounded (oldest dropped first, counted) and, on a device with
a `state_dir`, kept in `feedback.jsonl` across offline periods and restarts.

The device sends feedback after its telemetry (`Device`): the server joins feedback to its
event whichever arrives first, but sending the event first keeps the join immediate.
"""

from __future__ import annotations

import math
import re
import uuid
from typing import Any, Final

from edge_sdk.telemetry import TelemetryQueue

__all__ = ["FEEDBACK_FILE", "FEEDBACK_PATH", "FeedbackQueue", "feedback_item"]

FEEDBACK_FILE: Final = "feedback.jsonl"
FEEDBACK_PATH: Final = "/api/v1/telemetry/feedback"
# A 400 names an item as `"item": n`, or by a field path `feedback[n].quality`.
_FIELD_INDEX: Final = re.compile(r"\Afeedback\[(\d+)\]")


def feedback_item(event_id: str, quality: float) -> dict[str, Any]:
    """One feedback item; ValueError when the id is not a uuid or the quality not in [0, 1].

    Unlike an event's readings, feedback is the app's own statement: a bad one is a bug in
    the app, said at once, not clamped into a plausible number.
    """
    if not isinstance(event_id, str):
        raise ValueError("feedback event_id must be the event's uuid string")
    try:
        canonical = str(uuid.UUID(event_id))
    except ValueError:
        raise ValueError(f"feedback event_id {event_id!r} is not a uuid") from None
    if (
        isinstance(quality, bool)
        or not isinstance(quality, int | float)
        or not math.isfinite(quality)
        or not 0.0 <= quality <= 1.0
    ):
        raise ValueError(f"feedback quality must be a number in [0, 1], got {quality!r}")
    return {"event_id": canonical, "quality": float(quality)}


class FeedbackQueue(TelemetryQueue):
    """Unsent feedback items of one device, oldest first, bounded (see the module doc)."""

    _prefix = b'{"feedback":['
    _file_name = FEEDBACK_FILE
    _kind = "feedback"

    def add(self, event_id: str, quality: float) -> None:
        """Queue the app's quality of the answer of event `event_id` (ValueError: see
        `feedback_item`)."""
        self.record(feedback_item(event_id, quality))

    def _named(self, detail: Any) -> int | None:
        if not isinstance(detail, dict):
            return None
        for key in ("item", "event"):
            index = detail.get(key)
            if isinstance(index, int) and not isinstance(index, bool):
                return index
        field = detail.get("field")
        if isinstance(field, str):
            match = _FIELD_INDEX.match(field)
            if match:
                return int(match.group(1))
        return None
