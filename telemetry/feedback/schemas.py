"""The late-feedback API in the OpenAPI schema (PROTOCOL.md extensions).

The batch is checked by msgspec (`feedback.messages`); the same limit is declared here.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from .messages import MAX_ITEMS as MAX_FEEDBACK_ITEMS


class TelemetryFeedbackItemSerializer(serializers.Serializer[Any]):
    """The app's quality reading of one event it sent before (PROTOCOL.md extensions)."""

    event_id = serializers.UUIDField()
    quality = serializers.FloatField(min_value=0.0, max_value=1.0)

    class Meta:
        ref_name = "TelemetryFeedbackItem"


class TelemetryFeedbackBatchSerializer(serializers.Serializer[Any]):
    feedback = serializers.ListField(
        child=TelemetryFeedbackItemSerializer(), min_length=1, max_length=MAX_FEEDBACK_ITEMS
    )

    class Meta:
        ref_name = "TelemetryFeedbackBatch"
