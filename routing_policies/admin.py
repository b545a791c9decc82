"""Django admin for superusers: read-mostly views of the policy data and the audit log."""

from django.contrib import admin

from .policies.models import AuditEntry, Fleet, PolicyCell, PolicyVersion


@admin.register(Fleet)
class FleetAdmin(admin.ModelAdmin[Fleet]):
    """Fleets."""

    list_display = ("slug", "name", "created_at")
    search_fields = ("slug", "name")


class PolicyCellInline(admin.TabularInline[PolicyCell, PolicyVersion]):
    """Cells of a version, read-only: edits go through the editor (validated, audited)."""

    model = PolicyCell
    extra = 0
    can_delete = False

    def has_change_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return False

    def has_add_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return False


@admin.register(PolicyVersion)
class PolicyVersionAdmin(admin.ModelAdmin[PolicyVersion]):
    """Policy versions, read-only."""

    list_display = ("fleet", "number", "published_at", "published_by", "revision")
    list_filter = ("fleet",)
    inlines = [PolicyCellInline]
    readonly_fields = [f.name for f in PolicyVersion._meta.fields]


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin[AuditEntry]):
    """The audit log, read-only."""

    list_display = ("created_at", "actor_name", "action", "fleet", "target")
    list_filter = ("action", "fleet")
    readonly_fields = [f.name for f in AuditEntry._meta.fields]

    def has_add_permission(self, request):  # type: ignore[no-untyped-def]
        return False

    def has_change_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return False
