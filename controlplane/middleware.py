"""Request-level guards shared by every endpoint."""

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse

from controlplane.exceptions import error_body


class RequestSizeLimitMiddleware:
    """Refuse bodies over MAX_REQUEST_BYTES with 413 before any view parses them."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

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
