"""Template context: the current user's role, so pages show only what the user may do."""

from typing import Any

from django.http import HttpRequest

from controlplane.roles import Role, user_role


def roles(request: HttpRequest) -> dict[str, Any]:
    """`role`, its label (bare and with its article), `can_edit`, `can_publish` for every page."""
    role = user_role(getattr(request, "user", None))
    return {
        "role": role,
        "role_label": role.label if role else "",
        "role_with_article": role.with_article if role else "",
        "can_edit": role >= Role.EDITOR,
        "can_publish": role >= Role.PUBLISHER,
    }
