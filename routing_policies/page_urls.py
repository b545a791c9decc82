"""Page routes of the policy editor (the API lives under /api/v1/, see `urls`)."""

from django.urls import path

from . import rollout_views, views

urlpatterns = [
    path("", views.fleet_list_page, name="fleet-list"),
    path("fleets/new/", views.fleet_create, name="fleet-create"),
    path("fleets/<slug:slug>/", views.fleet_detail_page, name="fleet-detail"),
    path("fleets/<slug:slug>/versions/", views.version_list_page, name="version-list"),
    path("fleets/<slug:slug>/diff/", views.diff_page, name="version-diff"),
    path("fleets/<slug:slug>/audit/", views.audit_page, name="fleet-audit"),
    path("fleets/<slug:slug>/draft/start/", views.draft_start, name="draft-start"),
    path("fleets/<slug:slug>/draft/cells/", views.draft_cells_update, name="draft-cells"),
    path("fleets/<slug:slug>/draft/discard/", views.draft_discard, name="draft-discard"),
    path("fleets/<slug:slug>/draft/publish/", views.draft_publish, name="draft-publish"),
    path("fleets/<slug:slug>/draft/import/", views.draft_import_page, name="draft-import"),
    path(
        "fleets/<slug:slug>/draft/dimensions/add/",
        views.dimension_value_add,
        name="dimension-add",
    ),
    path(
        "fleets/<slug:slug>/draft/dimensions/remove/",
        views.dimension_value_remove,
        name="dimension-remove",
    ),
    path("fleets/<slug:slug>/rollout/", rollout_views.rollout_page, name="fleet-rollout"),
    path("fleets/<slug:slug>/rollout/start/", rollout_views.rollout_start, name="rollout-start"),
    path(
        "fleets/<slug:slug>/rollout/advance/",
        rollout_views.rollout_advance,
        name="rollout-advance",
    ),
    path("fleets/<slug:slug>/rollout/pause/", rollout_views.rollout_pause, name="rollout-pause"),
    path("fleets/<slug:slug>/rollout/resume/", rollout_views.rollout_resume, name="rollout-resume"),
    path(
        "fleets/<slug:slug>/rollout/complete/",
        rollout_views.rollout_complete,
        name="rollout-complete",
    ),
    path(
        "fleets/<slug:slug>/rollout/rollback/",
        rollout_views.rollout_rollback,
        name="rollout-rollback",
    ),
    path("fleets/<slug:slug>/switch/", rollout_views.fleet_switch, name="fleet-switch"),
    path(
        "fleets/<slug:slug>/cloud-pressure/",
        rollout_views.cloud_pressure,
        name="fleet-cloud-pressure",
    ),
    path("fleets/<slug:slug>/devices/", rollout_views.device_list_page, name="device-list"),
    path(
        "fleets/<slug:slug>/devices/<str:device_id>/revoke/",
        rollout_views.device_revoke,
        name="device-revoke",
    ),
    path(
        "fleets/<slug:slug>/enrollment-key/",
        rollout_views.enrollment_key_rotate,
        name="enrollment-key-rotate",
    ),
]
