"""Page routes of the device registry."""

from django.urls import path

from . import views

urlpatterns = [
    path("fleets/<slug:slug>/devices/", views.device_list_page, name="device-list"),
    path(
        "fleets/<slug:slug>/devices/<str:device_id>/revoke/",
        views.device_revoke,
        name="device-revoke",
    ),
    path(
        "fleets/<slug:slug>/enrollment-key/",
        views.enrollment_key_rotate,
        name="enrollment-key-rotate",
    ),
]
