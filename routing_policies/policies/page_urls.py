"""Page routes of the policy editor."""

from django.urls import URLPattern, URLResolver, include, path

from . import views

# Under /fleets/<slug>/draft/.
draft_routes = [
    path("start/", views.draft_start, name="draft-start"),
    path("cells/", views.draft_cells_update, name="draft-cells"),
    path("discard/", views.draft_discard, name="draft-discard"),
    path("publish/", views.draft_publish, name="draft-publish"),
    path("import/", views.draft_import_page, name="draft-import"),
    path("overrides/", views.draft_override, name="draft-override"),
    path("dimensions/add/", views.dimension_value_add, name="dimension-add"),
    path("dimensions/remove/", views.dimension_value_remove, name="dimension-remove"),
]

# Under /fleets/<slug>/.
fleet_routes: list[URLPattern | URLResolver] = [
    path("", views.fleet_detail_page, name="fleet-detail"),
    path("versions/", views.version_list_page, name="version-list"),
    path("diff/", views.diff_page, name="version-diff"),
    path("audit/", views.audit_page, name="fleet-audit"),
    path("draft/", include(draft_routes)),
]

urlpatterns = [
    path("", views.fleet_list_page, name="fleet-list"),
    path("fleets/new/", views.fleet_create, name="fleet-create"),
    path("fleets/<slug:slug>/", include(fleet_routes)),
]
