"""API routes of devices: enrolment and polling (device token), the registry (under /api/v1/)."""

from django.urls import path

from . import apis

urlpatterns = [
    path("devices/enroll", apis.EnrollApi.as_view(), name="api-device-enroll"),
    path("devices/me/policy", apis.DevicePolicyApi.as_view(), name="api-device-policy"),
    path(
        "fleets/<slug:slug>/enrollment-key",
        apis.EnrollmentKeyApi.as_view(),
        name="api-enrollment-key",
    ),
    path("fleets/<slug:slug>/devices/", apis.DeviceListApi.as_view(), name="api-device-list"),
    path(
        "fleets/<slug:slug>/devices/<str:device_id>/revoke",
        apis.DeviceRevokeApi.as_view(),
        name="api-device-revoke",
    ),
]
