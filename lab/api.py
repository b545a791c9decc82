"""What the lab's APIs share: a fleet-scoped POST whose body one input serializer checks.

`fleet_post` names the input serializer once: the one the OpenAPI document shows is the one
that validates, and the handler gets the fleet of the URL (404 first) and the checked body.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.api import input_validate, require_object
from routing_policies.models import Fleet
from routing_policies.selectors import fleet_get

FleetHandler = Callable[[Any, Request, Fleet, dict[str, Any]], Response]
SlugHandler = Callable[[Any, Request, str], Response]


def fleet_post(
    input_serializer: type[serializers.Serializer[Any]],
    *,
    responses: Any,
    operation_id: str,
    description: str | None = None,
) -> Callable[[FleetHandler], SlugHandler]:
    """An APIView's `post(self, request, slug)`, documented with `input_serializer` as its
    body, that calls `handler(self, request, fleet, values)` with the values it checked."""

    def decorate(handler: FleetHandler) -> SlugHandler:
        @extend_schema(
            request=input_serializer,
            responses=responses,
            operation_id=operation_id,
            description=description,
        )
        @functools.wraps(handler)
        def post(view: Any, request: Request, slug: str) -> Response:
            fleet = fleet_get(slug=slug)
            values = input_validate(input_serializer, require_object(request.data))
            return handler(view, request, fleet, values)

        return post

    return decorate
