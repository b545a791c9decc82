"""Page routes of the device registry."""

from django.urls import path

from . import views

FLEET = "fleets/<slug:slug>"

urlpatterns = [
    path(f"{FLEET}/devices/", views.device_list_page, name="device-list"),
    path(f"{FLEET}/devices/<str:device_id>/", views.device_page, name="device-detail"),
    path(f"{FLEET}/devices/<str:device_id>/revoke/", views.device_revoke, name="device-revoke"),
    path(f"{FLEET}/enrollment-key/", views.enrollment_key_rotate, name="enrollment-key-rotate"),
]
