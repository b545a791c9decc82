"""DRF permissions built on `roles`, so the API enforces exactly what the pages enforce."""

from typing import Any

from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from .roles import Role, has_role


class _RolePermission(BasePermission):
    required = Role.VIEWER
    message = "You need the viewer role."

    def has_permission(self, request: Request, view: Any) -> bool:
        return has_role(request.user, self.required)


class IsViewer(_RolePermission):
    """Reads."""

    required = Role.VIEWER
    message = "You need the viewer role (or higher) to read policies."


class IsEditor(_RolePermission):
    """Edits drafts."""

    required = Role.EDITOR
    message = "You need the editor role (or higher) to change a draft."


class IsPublisher(_RolePermission):
    """Publishes versions."""

    required = Role.PUBLISHER
    message = "You need the publisher role for this (publishing, creating fleets)."


# The same refusal texts for the pages (controlplane.pages.role_required) as for the API.
ROLE_REFUSALS = {
    Role.VIEWER: IsViewer.message,
    Role.EDITOR: IsEditor.message,
    Role.PUBLISHER: IsPublisher.message,
}
