"""API routes of fleets, drafts, versions, diffs and the audit log (under /api/v1/)."""

from django.urls import path

from . import apis

urlpatterns = [
    path("fleets/", apis.FleetListApi.as_view(), name="api-fleet-list"),
    path("fleets/<slug:slug>/", apis.FleetDetailApi.as_view(), name="api-fleet-detail"),
    path("fleets/<slug:slug>/versions/", apis.VersionListApi.as_view(), name="api-version-list"),
    path(
        "fleets/<slug:slug>/versions/<str:ref>/",
        apis.VersionDetailApi.as_view(),
        name="api-version-detail",
    ),
    path(
        "fleets/<slug:slug>/versions/<str:ref>/document",
        apis.VersionDocumentApi.as_view(),
        name="api-version-document",
    ),
    path("fleets/<slug:slug>/draft/", apis.DraftApi.as_view(), name="api-draft"),
    path("fleets/<slug:slug>/draft/cells/", apis.DraftCellsApi.as_view(), name="api-draft-cells"),
    path(
        "fleets/<slug:slug>/draft/dimensions/",
        apis.DraftDimensionsApi.as_view(),
        name="api-draft-dimensions",
    ),
    path(
        "fleets/<slug:slug>/draft/dimensions/<str:dimension>/<str:value>/",
        apis.DraftDimensionValueApi.as_view(),
        name="api-draft-dimension-value",
    ),
    path(
        "fleets/<slug:slug>/draft/document", apis.DraftImportApi.as_view(), name="api-draft-import"
    ),
    path("fleets/<slug:slug>/draft/publish/", apis.PublishApi.as_view(), name="api-draft-publish"),
    path("fleets/<slug:slug>/diff/", apis.DiffApi.as_view(), name="api-diff"),
    path("fleets/<slug:slug>/audit/", apis.AuditApi.as_view(), name="api-fleet-audit"),
    path("audit/", apis.AuditApi.as_view(), name="api-audit"),
]
