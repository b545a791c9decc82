"""API routes of fleets, drafts, versions, diffs and the audit log (under /api/v1/)."""

from django.urls import include, path

from . import apis

# Under /api/v1/fleets/<slug>/.
fleet_routes = [
    path("", apis.FleetDetailApi.as_view(), name="api-fleet-detail"),
    path("versions/", apis.VersionListApi.as_view(), name="api-version-list"),
    path("versions/<str:ref>/", apis.VersionDetailApi.as_view(), name="api-version-detail"),
    path(
        "versions/<str:ref>/document",
        apis.VersionDocumentApi.as_view(),
        name="api-version-document",
    ),
    path("draft/", apis.DraftApi.as_view(), name="api-draft"),
    path("draft/cells/", apis.DraftCellsApi.as_view(), name="api-draft-cells"),
    path("draft/dimensions/", apis.DraftDimensionsApi.as_view(), name="api-draft-dimensions"),
    path(
        "draft/dimensions/<str:dimension>/<str:value>/",
        apis.DraftDimensionValueApi.as_view(),
        name="api-draft-dimension-value",
    ),
    path("draft/document", apis.DraftImportApi.as_view(), name="api-draft-import"),
    path(
        "draft/overrides/<str:segment>",
        apis.DraftOverrideApi.as_view(),
        name="api-draft-override",
    ),
    path("draft/publish/", apis.PublishApi.as_view(), name="api-draft-publish"),
    path("diff/", apis.DiffApi.as_view(), name="api-diff"),
    path("audit/", apis.AuditApi.as_view(), name="api-fleet-audit"),
]

urlpatterns = [
    path("fleets/", apis.FleetListApi.as_view(), name="api-fleet-list"),
    path("fleets/<slug:slug>/", include(fleet_routes)),
    path("audit/", apis.AuditApi.as_view(), name="api-audit"),
]
