"""Request-level guards shared by every endpoint."""

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from rest_framework.views import APIView

from controlplane.exceptions import error_body
from controlplane.json_guard import unstorable_character


class _Middleware:
    """Django's middleware plumbing: the next handler, called as it is unless a subclass
    does more."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)


class _ViewGuardMiddleware(_Middleware):
    """A guard that looks at the view a request resolved to, before the view runs: Django
    calls `process_view`, and the guard's `refusal` answers instead of the view, or None to
    let the request through."""

    def process_view(
        self,
        request: HttpRequest,
        view_func: Callable[..., Any],
        view_args: tuple[Any, ...],
        view_kwargs: dict[str, Any],
    ) -> HttpResponse | None:
        return self.refusal(request, view_func, view_kwargs)

    def refusal(
        self, request: HttpRequest, view_func: Callable[..., Any], view_kwargs: dict[str, Any]
    ) -> HttpResponse | None:
        """The answer that refuses this request, or None."""
        raise NotImplementedError


class RequestSizeLimitMiddleware(_Middleware):
    """Refuse bodies over MAX_REQUEST_BYTES with 413 before any view parses them."""

    def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        limit: int = settings.MAX_REQUEST_BYTES
        if length > limit:
            return JsonResponse(
                error_body(
                    "payload_too_large",
                    f"Request body is {length} bytes; the limit is {limit} bytes.",
                ),
                status=413,
            )
        return self.get_response(request)


class ApiParameterCharactersMiddleware(_ViewGuardMiddleware):
    """Refuse an API request whose query parameters or path parameters hold a NUL or a lone
    surrogate with a 400 naming the parameter, before any view hands one to the database.

    Query serializers refuse them in the parameters a view declares; this covers the rest (path
    parameters such as a device id, and parameters a view does not read) in one place.
    """

    def refusal(
        self, request: HttpRequest, view_func: Callable[..., Any], view_kwargs: dict[str, Any]
    ) -> HttpResponse | None:
        if not request.path.startswith("/api/"):
            return None
        bad = [
            name
            for name, values in request.GET.lists()
            if unstorable_character(name) or any(unstorable_character(v) for v in values)
        ]
        bad += [
            name
            for name, value in view_kwargs.items()
            if isinstance(value, str) and unstorable_character(value)
        ]
        if not bad:
            return None
        shown = [name.encode("unicode_escape").decode("ascii") for name in bad]
        return JsonResponse(
            error_body(
                "validation_failed",
                f"Parameter `{shown[0]}` holds a NUL or a lone surrogate character.",
                [
                    {"field": name, "message": "NUL and lone surrogates are refused"}
                    for name in shown
                ],
            ),
            status=400,
        )


class ApiNotFoundMiddleware(_Middleware):
    """A path under /api/ that no route matches answers the API's JSON 404, not the HTML page
    (a client of the JSON API parses every answer as JSON)."""

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (
            response.status_code == 404
            and request.path.startswith("/api/")
            and getattr(request, "resolver_match", None) is None
        ):
            return JsonResponse(
                error_body("not_found", "No API operation at this path."), status=404
            )
        return response


class MethodNotAllowedMiddleware(_ViewGuardMiddleware):
    """A method an API view does not serve answers 405 with `Allow`, before authentication.

    DRF authenticates and checks permissions before it looks for the method's handler, so an
    anonymous `TRACE` on a device endpoint would be a 401 (or a 403), which tells a client to
    fix its token rather than its method.
    """

    def refusal(
        self, request: HttpRequest, view_func: Callable[..., Any], view_kwargs: dict[str, Any]
    ) -> HttpResponse | None:
        view_class = getattr(view_func, "cls", None)
        if not isinstance(view_class, type) or not issubclass(view_class, APIView):
            return None
        allowed = [m for m in view_class.http_method_names if hasattr(view_class, m)]
        if "get" in allowed and "head" not in allowed:
            allowed.append("head")  # View.setup serves HEAD with GET
        method = (request.method or "").lower()
        if method in allowed:
            return None
        response = JsonResponse(
            error_body("method_not_allowed", f'Method "{request.method}" not allowed.'),
            status=405,
        )
        order = [m for m in view_class.http_method_names if m in allowed]
        response["Allow"] = ", ".join(m.upper() for m in order)
        return response
