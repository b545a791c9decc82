"""What several parts answer with, in the OpenAPI schema: the cost report (the dashboard's cost
card and the lab), a device batch's acceptance (ingest and late feedback), and a segment's
name as the dashboard, the metrics API and alert rules take it.

Each part of telemetry declares its own API schemas beside its views (`ingest.schemas`, late
feedback its msgspec struct, `dashboards.schemas`, `alerts.schemas`); what stays here is what more
than one of them answers with.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from .rollups.segments import SEGMENT_NAME_MESSAGE, SEGMENT_NAME_PATTERN


def segment_field(field_class: type[Any], help_text: str, **kwargs: Any) -> Any:
    """A field taking one of the fleet's named segments by name (`field_class`: a RegexField,
    of a query or of a JSON body); a value that is not a name is refused naming `segment`,
    one that names no segment of the fleet by `rollups.segments.segment_named`."""
    return field_class(
        SEGMENT_NAME_PATTERN,
        required=False,
        help_text=help_text,
        error_messages=dict.fromkeys(
            ("invalid", "max_length"), SEGMENT_NAME_MESSAGE.format(field="segment")
        ),
        **kwargs,
    )


# An answer with a field named by a Python keyword (`from`) or by a serializer's own attribute
# (`label`): declared with a trailing `_`, documented without it. (No docstring: drf-spectacular
# would show it as the description of every answer built on this.)
class KeywordNamedSerializer(serializers.Serializer[Any]):
    def get_fields(self) -> dict[str, Any]:
        return {name.removesuffix("_"): field for name, field in super().get_fields().items()}


class CostSpanSerializer(KeywordNamedSerializer):
    """The span that holds data: the first and the last event the cost is taken over."""

    from_ = serializers.DateTimeField(allow_null=True, help_text="the first event")
    to = serializers.DateTimeField(allow_null=True, help_text="the last event")
    text = serializers.CharField(allow_null=True, help_text='its length in words ("3 h 12 m")')


class DashboardAllCloudCostSerializer(serializers.Serializer[Any]):
    window = serializers.FloatField()
    per_hour = serializers.FloatField(allow_null=True)
    per_day = serializers.FloatField(allow_null=True)


class CostSavingSerializer(serializers.Serializer[Any]):
    amount = serializers.FloatField(help_text="the baseline's cost minus the actual, in the view")
    share = serializers.FloatField(allow_null=True, help_text="amount / the baseline's cost")


class CostReportSerializer(KeywordNamedSerializer):
    """A cost over a span, per hour and day, with the savings against all-cloud and against
    the stable version (routing_policies.pricing.cost_report; docs/lab.md, "Cost")."""

    currency = serializers.CharField()
    label_ = serializers.CharField(help_text='the figure\'s name on every page: "Cloud cost / day"')
    hours = serializers.FloatField(
        help_text="the span that holds data (first to last event), in hours: per_hour and "
        "per_day are the cost over it; 0 (and they null) with fewer than two events"
    )
    span = CostSpanSerializer()
    window = serializers.FloatField(help_text="the cost over the span")
    per_hour = serializers.FloatField(allow_null=True)
    per_day = serializers.FloatField(allow_null=True)
    all_cloud = DashboardAllCloudCostSerializer(help_text="every task priced as a cloud call")
    stable = DashboardAllCloudCostSerializer(
        allow_null=True, help_text="the stable version on the same tasks; null: no comparison"
    )
    saving_vs_all_cloud = CostSavingSerializer()
    saving_vs_stable = CostSavingSerializer(allow_null=True)


class TelemetryAcceptedSerializer(serializers.Serializer[Any]):
    accepted = serializers.IntegerField(min_value=0, help_text="new events, now durable")
    duplicates = serializers.IntegerField(min_value=0, help_text="event ids already received")
