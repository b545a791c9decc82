"""Page routes of segments."""

from django.urls import path

from . import views

SEGMENTS = "fleets/<slug:slug>/segments/"

urlpatterns = [
    path(SEGMENTS, views.segment_page, name="fleet-segments"),
    path(f"{SEGMENTS}add/", views.segment_create, name="segment-create"),
    path(f"{SEGMENTS}<str:name>/save/", views.segment_update, name="segment-update"),
    path(f"{SEGMENTS}<str:name>/delete/", views.segment_delete, name="segment-delete"),
]
