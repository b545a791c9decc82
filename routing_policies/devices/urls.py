"""API routes of devices: enrolment and polling (device token), the registry (under /api/v1/)."""

from django.urls import include, path

from . import apis

# Under /api/v1/fleets/<slug>/devices/.
device_routes = [
    path("", apis.DeviceListApi.as_view(), name="api-device-list"),
    path("<str:device_id>/table", apis.DeviceTableApi.as_view(), name="api-device-table"),
    path("<str:device_id>/revoke", apis.DeviceRevokeApi.as_view(), name="api-device-revoke"),
]

urlpatterns = [
    path("devices/enroll", apis.EnrollApi.as_view(), name="api-device-enroll"),
    path("devices/me/policy", apis.DevicePolicyApi.as_view(), name="api-device-policy"),
    path(
        "fleets/<slug:slug>/enrollment-key",
        apis.EnrollmentKeyApi.as_view(),
        name="api-enrollment-key",
    ),
    path("fleets/<slug:slug>/devices/", include(device_routes)),
]
