"""The ingest backlog's answer in the OpenAPI schema.

A device's batch is declared once, by its msgspec struct (`ingest.events.TelemetryBatch`), whose
JSON Schema is the request's (telemetry.structs.request_body).
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers


class IngestStatusSerializer(serializers.Serializer[Any]):
    landed_batches = serializers.IntegerField(min_value=0)
    landed_events = serializers.IntegerField(min_value=0)
    lag_seconds = serializers.FloatField(min_value=0)
