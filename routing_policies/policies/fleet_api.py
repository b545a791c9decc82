"""What the fleet APIs of every part share: a method that changes the fleet its URL names with
a body its input serializer checks (`fleet_input`), a method whose query parameters their
serializer checks (`query_input`), and an API whose reads are for viewers and whose changes need
a role above (`ViewerReadsApi`)."""

import functools
from collections.abc import Callable, Mapping
from typing import Any, cast

from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.api import input_validate, require_object
from controlplane.exceptions import ValidationFailed
from controlplane.openapi import query_params_validate

from .selectors import fleet_get

InputSerializer = type[serializers.Serializer[Any]]
Declared = InputSerializer | PolymorphicProxySerializer
FleetMethod = Callable[..., Response]
# What a method does to the body before its serializer checks it (a draft edit takes the
# revision of an If-Match header), and how the serializer checks it.
BodyStep = Callable[[Request, dict[str, Any]], dict[str, Any]]
Validate = Callable[[InputSerializer, dict[str, Any]], dict[str, Any]]


def by_kind(inputs: dict[str, InputSerializer], data: Mapping[str, Any]) -> InputSerializer:
    """The input serializer of the body's `kind` (a refusal naming `kind` when unknown), for the
    API's body and a page's posted form alike."""
    kind = data.get("kind")
    if not isinstance(kind, str) or kind not in inputs:
        problem = f"one of {', '.join(inputs)} (got {str(kind)[:40]!r})"
        raise ValidationFailed(f"Kind: {problem}.", details=[{"field": "kind", "message": problem}])
    return inputs[kind]


def fleet_input(
    declared: Declared,
    *,
    validate: Validate = input_validate,
    body_step: BodyStep | None = None,
    **schema: Any,
) -> Callable[[FleetMethod], Callable[..., Response]]:
    """An API method that changes a fleet with the body `declared` checks: the same serializer
    its OpenAPI request shows (a polymorphic one: the serializer of the body's kind). The method
    is called with the fleet (an unknown one is a 404 first) and the checked body, as `fleet`
    and `data`, for its slug; `schema`: the rest of its `extend_schema`. `validate` checks the
    body (by default refusing an unknown field too); `body_step` comes before it."""

    def decorate(method: FleetMethod) -> Callable[..., Response]:
        @functools.wraps(method)
        def checked(view: APIView, request: Request, slug: str, **kwargs: Any) -> Response:
            fleet = fleet_get(slug=slug)
            body = require_object(request.data)
            if body_step is not None:
                body = body_step(request, body)
            serializer = (
                by_kind(cast(dict[str, InputSerializer], declared.serializers), body)
                if isinstance(declared, PolymorphicProxySerializer)
                else declared
            )
            return method(view, request, fleet=fleet, data=validate(serializer, body), **kwargs)

        return extend_schema(request=declared, **schema)(checked)

    return decorate


def query_input(
    declared: InputSerializer, *, parameters: tuple[Any, ...] = (), **schema: Any
) -> Callable[[FleetMethod], Callable[..., Response]]:
    """An API method whose query parameters `declared` checks, first: the serializer its OpenAPI
    parameters show (before any other `parameters`). The method is called with the checked
    parameters as `query`; `schema`: the rest of its `extend_schema`."""

    def decorate(method: FleetMethod) -> Callable[..., Response]:
        @functools.wraps(method)
        def checked(view: APIView, request: Request, *args: Any, **kwargs: Any) -> Response:
            query = query_params_validate(declared, request)
            return method(view, request, *args, query=query, **kwargs)

        return extend_schema(parameters=[declared, *parameters], **schema)(checked)

    return decorate
