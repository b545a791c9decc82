"""API routes of the policy app, mounted under /api/v1/."""

from django.urls import path

from .apis import policy as apis
from .apis import rollout as fleet_apis

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
    path("devices/enroll", fleet_apis.EnrollApi.as_view(), name="api-device-enroll"),
    path("devices/me/policy", fleet_apis.DevicePolicyApi.as_view(), name="api-device-policy"),
    path("fleets/<slug:slug>/rollout/", fleet_apis.RolloutStatusApi.as_view(), name="api-rollout"),
    path(
        "fleets/<slug:slug>/rollout/start",
        fleet_apis.RolloutStartApi.as_view(),
        name="api-rollout-start",
    ),
    path(
        "fleets/<slug:slug>/rollout/advance",
        fleet_apis.RolloutAdvanceApi.as_view(),
        name="api-rollout-advance",
    ),
    path(
        "fleets/<slug:slug>/rollout/pause",
        fleet_apis.RolloutPauseApi.as_view(),
        name="api-rollout-pause",
    ),
    path(
        "fleets/<slug:slug>/rollout/resume",
        fleet_apis.RolloutResumeApi.as_view(),
        name="api-rollout-resume",
    ),
    path(
        "fleets/<slug:slug>/rollout/complete",
        fleet_apis.RolloutCompleteApi.as_view(),
        name="api-rollout-complete",
    ),
    path(
        "fleets/<slug:slug>/rollout/rollback",
        fleet_apis.RolloutRollbackApi.as_view(),
        name="api-rollout-rollback",
    ),
    path("fleets/<slug:slug>/switch", fleet_apis.FleetSwitchApi.as_view(), name="api-fleet-switch"),
    path(
        "fleets/<slug:slug>/cloud-pressure",
        fleet_apis.CloudPressureApi.as_view(),
        name="api-cloud-pressure",
    ),
    path(
        "fleets/<slug:slug>/enrollment-key",
        fleet_apis.EnrollmentKeyApi.as_view(),
        name="api-enrollment-key",
    ),
    path("fleets/<slug:slug>/devices/", fleet_apis.DeviceListApi.as_view(), name="api-device-list"),
    path(
        "fleets/<slug:slug>/devices/<str:device_id>/revoke",
        fleet_apis.DeviceRevokeApi.as_view(),
        name="api-device-revoke",
    ),
]
