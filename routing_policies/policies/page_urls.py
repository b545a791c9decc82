"""Page routes of the policy editor."""

from django.urls import path

from . import views

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
]
