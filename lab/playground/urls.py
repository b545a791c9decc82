"""API routes of the playground, mounted under /api/v1/ (lab.urls)."""

from django.urls import path

from . import apis

urlpatterns = [
    path("fleets/<slug:slug>/lab/explain", apis.ExplainApi.as_view(), name="api-lab-explain"),
]
