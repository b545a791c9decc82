"""Who reads the OpenAPI schema (/api/schema/) and its Swagger UI (/api/docs/).

API_DOCS_ACCESS (docs/operations.md): `authenticated` (the default) lets any logged-in user
or API token (`Authorization: Token …`, as generated clients and the schemathesis test fetch
it) read them; `public` opens them to anyone. The schema names every route and field of a
control plane, so it is not shown to the internet by default. (The Swagger UI view is in
controlplane/urls.py: drf-spectacular imports this module while its views load.)
"""

from typing import Any

from django.conf import settings
from rest_framework.permissions import BasePermission
from rest_framework.request import Request


class CanReadApiDocs(BasePermission):
    """API_DOCS_ACCESS, read at each request."""

    message = "Log in, or send an API token, to read the API schema."

    def has_permission(self, request: Request, view: Any) -> bool:
        if settings.API_DOCS_ACCESS == "public":
            return True
        return bool(request.user and request.user.is_authenticated)
