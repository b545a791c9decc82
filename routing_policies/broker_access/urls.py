"""API routes of broker access: the brokers' hooks (under /api/v1/)."""

from django.urls import path

from . import apis

urlpatterns = [
    path("mqtt/auth", apis.MqttAuthApi.as_view(), name="api-mqtt-auth"),
    path("mqtt/acl", apis.MqttAclApi.as_view(), name="api-mqtt-acl"),
    path("mqtt/vernemq", apis.VerneMQHookApi.as_view(), name="api-mqtt-vernemq"),
    path("devices/me/broker-access", apis.BrokerAccessApi.as_view(), name="api-broker-access"),
]
