"""URL routes: pages, the REST API under /api/v1/, OpenAPI, admin."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponseBase, JsonResponse
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework import exceptions


def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness probe for load balancers and `make run`."""
    return JsonResponse({"status": "ok"})


class ApiDocsView(SpectacularSwaggerView):
    """Swagger UI (API_DOCS_ACCESS, controlplane/api_docs.py); a browser that is not logged in
    is sent to the login page and back, rather than shown a JSON 401."""

    # A redirect is no DRF Response, and DRF passes any HttpResponseBase on unchanged.
    def handle_exception(self, exc: Exception) -> HttpResponseBase:  # type: ignore[override]
        if isinstance(exc, exceptions.NotAuthenticated):
            return auth_views.redirect_to_login(self.request.get_full_path())
        return super().handle_exception(exc)


urlpatterns = [
    path("admin/", admin.site.urls),
    path(
        "login/",
        auth_views.LoginView.as_view(template_name="registration/login.html"),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("healthz", healthz, name="healthz"),
    path("api/v1/", include("routing_policies.urls")),
    path("api/v1/", include("telemetry.urls")),
    path("api/v1/", include("lab.urls")),
    path("api/v1/", include("autopilot.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", ApiDocsView.as_view(url_name="api-schema"), name="api-docs"),
    path("", include("telemetry.page_urls")),
    path("", include("lab.page_urls")),
    path("", include("autopilot.page_urls")),
    path("", include("routing_policies.page_urls")),
]
