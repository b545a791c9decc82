"""The device API's bodies: the device list's query (the API and the device page validate
with it), and the serializers that describe the answers in the OpenAPI schema."""

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlplane.openapi import ApiSerializer

from ..segments.rules import ATTRIBUTES, attributes_checked, attributes_schema
from ..validation import MAX_VERSION


@extend_schema_field(attributes_schema())
class DeviceAttributesField(serializers.JSONField):
    """What a device reports about itself (edge_sdk.segments.REPORTED_ATTRIBUTES), checked
    by the one declaration devices use too; a refusal names the attribute."""

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        return attributes_checked(data, field=self.field_name or "attributes")


class DeviceListQuerySerializer(ApiSerializer):
    """The device list's filters (API query parameters; the device page's version and
    platform)."""

    version = serializers.IntegerField(
        min_value=1,
        max_value=MAX_VERSION,
        required=False,
        label="the version",
        help_text="assigned or acked",
    )
    # Absent means either; an empty `online=` is refused, not read as absent.
    online = serializers.BooleanField(required=False)
    platform = serializers.CharField(
        trim_whitespace=False, max_length=64, required=False, label="the platform"
    )


class DeviceTableQuerySerializer(ApiSerializer):
    """Which version's cells a device runs (left out: the one it acknowledged, else the one
    it is assigned)."""

    version = serializers.IntegerField(
        min_value=1, max_value=MAX_VERSION, required=False, label="the version"
    )


class DeviceTableCellSerializer(ApiSerializer):
    cell = serializers.CharField(help_text="task_type/latency_budget/privacy_tier")
    values = serializers.DictField(help_text="the cell's fields as the device runs them")
    segment = serializers.CharField(
        allow_null=True, help_text="the segment whose override it takes; null: the base cell"
    )
    overridden = serializers.ListField(
        child=serializers.CharField(), help_text="the fields that override sets"
    )


class DeviceTableSerializer(ApiSerializer):
    """Which cell values a device runs: the version resolved with its attributes."""

    device_id = serializers.CharField()
    version = serializers.IntegerField(allow_null=True, help_text="null: no such version")
    etag = serializers.CharField(allow_null=True)
    attributes = serializers.DictField(help_text="as rules read them; null: unknown")
    overrides = serializers.ListField(
        child=serializers.CharField(),
        help_text="the version's overrides whose segment it is in, in precedence order",
    )
    cells = DeviceTableCellSerializer(many=True)


class EnrollmentSerializer(ApiSerializer):
    device_token = serializers.CharField(help_text="shown once; send as Authorization: Bearer")
    device_id = serializers.CharField()
    fleet = serializers.SlugField()


class EnrollmentKeySerializer(ApiSerializer):
    fleet_key = serializers.CharField(help_text="shown once")


class DeviceRevokedSerializer(ApiSerializer):
    device_id = serializers.CharField()
    revoked_at = serializers.DateTimeField()


def _attribute_out(name: str) -> serializers.Field[Any, Any, Any, Any]:
    attribute = ATTRIBUTES[name]
    if attribute.kind == "number":
        return serializers.FloatField(allow_null=True, help_text=attribute.meaning)
    return serializers.CharField(allow_null=True, help_text=attribute.meaning)


# The device list's `attributes`: every attribute, declared once in edge_sdk.segments.
AttributesOutSerializer = type(
    "AttributesOutSerializer",
    (ApiSerializer,),
    {"component_name": "DeviceAttributes", **{name: _attribute_out(name) for name in ATTRIBUTES}},
)
