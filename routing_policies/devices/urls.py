"""API routes of devices: enrolment and polling (device token), the registry (under /api/v1/)."""

from django.urls import path

from . import apis

FLEET = "fleets/<slug:slug>"

urlpatterns = [
    path("devices/enroll", apis.EnrollApi.as_view(), name="api-device-enroll"),
    path("devices/me/policy", apis.DevicePolicyApi.as_view(), name="api-device-policy"),
    path(f"{FLEET}/enrollment-key", apis.EnrollmentKeyApi.as_view(), name="api-enrollment-key"),
    path(f"{FLEET}/devices/", apis.DeviceListApi.as_view(), name="api-device-list"),
    path(
        f"{FLEET}/devices/<str:device_id>/table",
        apis.DeviceTableApi.as_view(),
        name="api-device-table",
    ),
    path(
        f"{FLEET}/devices/<str:device_id>/revoke",
        apis.DeviceRevokeApi.as_view(),
        name="api-device-revoke",
    ),
]
