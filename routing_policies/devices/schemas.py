"""The device API's bodies: the device list's query (the API and the device page validate
with it), and the serializers that describe the answers in the OpenAPI schema."""

from rest_framework import serializers

from controlplane.openapi import ApiSerializer

from ..validation import MAX_VERSION


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


class EnrollmentSerializer(ApiSerializer):
    device_token = serializers.CharField(help_text="shown once; send as Authorization: Bearer")
    device_id = serializers.CharField()
    fleet = serializers.SlugField()


class EnrollmentKeySerializer(ApiSerializer):
    fleet_key = serializers.CharField(help_text="shown once")


class DeviceRevokedSerializer(ApiSerializer):
    device_id = serializers.CharField()
    revoked_at = serializers.DateTimeField()
