"""API routes of the MQTT link's documents (under /api/v1/)."""

from django.urls import path

from . import apis

urlpatterns = [
    path(
        "fleets/<slug:slug>/documents/<int:number>",
        apis.PublishedDocumentApi.as_view(),
        name="api-published-document",
    ),
]
