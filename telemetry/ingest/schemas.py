"""The telemetry ingest API in the OpenAPI schema: a device's batch of events and the answer.

The batch is checked by msgspec (`ingest.events`); these fields are built from the same
`FIELDS` rules, so a generated client refuses what the server would.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from .events import FIELDS, MAX_EVENTS, FieldRule


def _event_field(rule: FieldRule) -> serializers.Field[Any, Any, Any, Any]:
    options: dict[str, Any] = {"required": rule.required}
    if not rule.required:
        options["allow_null"] = rule.kind != "bool"
    if rule.kind == "uuid":
        return serializers.UUIDField(**options)
    if rule.kind == "datetime":
        return serializers.DateTimeField(help_text="RFC 3339 with a time zone", **options)
    if rule.kind == "enum":
        return serializers.ChoiceField(choices=list(rule.choices), **options)
    if rule.kind == "bool":
        return serializers.BooleanField(**options)
    if rule.kind == "str":
        return serializers.CharField(min_length=1, max_length=rule.max_length, **options)
    numeric: dict[str, Any] = {**options, "min_value": rule.minimum, "max_value": rule.maximum}
    if rule.kind == "int":
        return serializers.IntegerField(**numeric)
    return serializers.FloatField(**numeric)


TelemetryEventSerializer = type(
    "TelemetryEventSerializer",
    (serializers.Serializer,),
    {
        **{rule.name: _event_field(rule) for rule in FIELDS},
        "__doc__": "One routing decision as a device reports it (PROTOCOL.md).",
        "Meta": type("Meta", (), {"ref_name": "TelemetryEvent"}),
    },
)


class TelemetryBatchSerializer(serializers.Serializer[Any]):
    events = serializers.ListField(child=TelemetryEventSerializer(), max_length=MAX_EVENTS)

    class Meta:
        ref_name = "TelemetryBatch"


class IngestStatusSerializer(serializers.Serializer[Any]):
    landed_batches = serializers.IntegerField(min_value=0)
    landed_events = serializers.IntegerField(min_value=0)
    lag_seconds = serializers.FloatField(min_value=0)

    class Meta:
        ref_name = "IngestStatus"
