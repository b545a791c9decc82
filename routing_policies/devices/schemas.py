"""Serializers that describe the device API's answers in the OpenAPI schema."""

from typing import Any

from rest_framework import serializers


class EnrollmentSerializer(serializers.Serializer[Any]):
    device_token = serializers.CharField(help_text="shown once; send as Authorization: Bearer")
    device_id = serializers.CharField()
    fleet = serializers.SlugField()

    class Meta:
        ref_name = "Enrollment"


class EnrollmentKeySerializer(serializers.Serializer[Any]):
    fleet_key = serializers.CharField(help_text="shown once")

    class Meta:
        ref_name = "EnrollmentKey"


class DeviceRevokedSerializer(serializers.Serializer[Any]):
    device_id = serializers.CharField()
    revoked_at = serializers.DateTimeField()

    class Meta:
        ref_name = "DeviceRevoked"
