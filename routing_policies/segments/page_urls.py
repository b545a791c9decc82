"""Page routes of segments."""

from django.urls import include, path

from . import views

# Under /fleets/<slug>/segments/.
segment_routes = [
    path("", views.segment_page, name="fleet-segments"),
    path("add/", views.segment_create, name="segment-create"),
    path("<str:name>/save/", views.segment_update, name="segment-update"),
    path("<str:name>/delete/", views.segment_delete, name="segment-delete"),
]

urlpatterns = [path("fleets/<slug:slug>/segments/", include(segment_routes))]
