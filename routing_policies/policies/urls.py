"""API routes of fleets, drafts, versions, diffs and the audit log (under /api/v1/)."""

from django.urls import URLPattern, URLResolver, include, path

from . import apis

# Under /api/v1/fleets/<slug>/versions/.
version_routes = [
    path("", apis.VersionListApi.as_view(), name="api-version-list"),
    path("<str:ref>/", apis.VersionDetailApi.as_view(), name="api-version-detail"),
    path("<str:ref>/document", apis.VersionDocumentApi.as_view(), name="api-version-document"),
]

# Under /api/v1/fleets/<slug>/draft/.
draft_routes = [
    path("", apis.DraftApi.as_view(), name="api-draft"),
    path("cells/", apis.DraftCellsApi.as_view(), name="api-draft-cells"),
    path("dimensions/", apis.DraftDimensionsApi.as_view(), name="api-draft-dimensions"),
    path(
        "dimensions/<str:dimension>/<str:value>/",
        apis.DraftDimensionValueApi.as_view(),
        name="api-draft-dimension-value",
    ),
    path("document", apis.DraftImportApi.as_view(), name="api-draft-import"),
    path("overrides/<str:segment>", apis.DraftOverrideApi.as_view(), name="api-draft-override"),
    path("publish/", apis.PublishApi.as_view(), name="api-draft-publish"),
]

# Under /api/v1/fleets/<slug>/.
fleet_routes: list[URLPattern | URLResolver] = [
    path("", apis.FleetDetailApi.as_view(), name="api-fleet-detail"),
    path("versions/", include(version_routes)),
    path("draft/", include(draft_routes)),
    path("diff/", apis.DiffApi.as_view(), name="api-diff"),
    path("audit/", apis.AuditApi.as_view(), name="api-fleet-audit"),
]

urlpatterns = [
    path("fleets/", apis.FleetListApi.as_view(), name="api-fleet-list"),
    path("fleets/<slug:slug>/", include(fleet_routes)),
    path("audit/", apis.AuditApi.as_view(), name="api-audit"),
]
