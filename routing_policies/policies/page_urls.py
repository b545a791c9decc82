"""Page routes of the policy editor."""

from django.urls import include, path

from . import views

# Under /fleets/<slug>/.
fleet_routes = [
    path("", views.fleet_detail_page, name="fleet-detail"),
    path("versions/", views.version_list_page, name="version-list"),
    path("diff/", views.diff_page, name="version-diff"),
    path("audit/", views.audit_page, name="fleet-audit"),
    path("draft/start/", views.draft_start, name="draft-start"),
    path("draft/cells/", views.draft_cells_update, name="draft-cells"),
    path("draft/discard/", views.draft_discard, name="draft-discard"),
    path("draft/publish/", views.draft_publish, name="draft-publish"),
    path("draft/import/", views.draft_import_page, name="draft-import"),
    path("draft/overrides/", views.draft_override, name="draft-override"),
    path("draft/dimensions/add/", views.dimension_value_add, name="dimension-add"),
    path("draft/dimensions/remove/", views.dimension_value_remove, name="dimension-remove"),
]

urlpatterns = [
    path("", views.fleet_list_page, name="fleet-list"),
    path("fleets/new/", views.fleet_create, name="fleet-create"),
    path("fleets/<slug:slug>/", include(fleet_routes)),
]
