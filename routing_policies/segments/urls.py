"""API routes of segments (under /api/v1/)."""

from django.urls import path

from . import apis

SEGMENTS = "fleets/<slug:slug>/segments/"

urlpatterns = [
    path(SEGMENTS, apis.SegmentListApi.as_view(), name="api-segment-list"),
    # Before the detail: `preview` is a reserved name.
    path(f"{SEGMENTS}preview", apis.SegmentPreviewApi.as_view(), name="api-segment-preview"),
    path(f"{SEGMENTS}<str:name>", apis.SegmentDetailApi.as_view(), name="api-segment-detail"),
]
