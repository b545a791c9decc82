"""What the fleet APIs of every part share: a method that changes the fleet its URL names with
a body its input serializer checks (`fleet_input`), a method whose query parameters their
serializer checks (`query_input`), and an API whose reads are for viewers and whose changes need
a role above (`ViewerReadsApi`). An API of one such changing method is a `FleetActionApi`
declared by its `FleetAction`; one that answers a GET of the fleet, a `FleetReadApi`."""

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, cast

from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema
from rest_framework import serializers
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.api import input_validate, require_object
from controlplane.exceptions import ValidationFailed
from controlplane.openapi import error_responses, query_params_validate
from controlplane.permissions import IsViewer

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


@dataclass(frozen=True)
class Answer:
    """What a `FleetActionApi` answers: `code` with a body of the `serializer` (or a status
    of `also`, the same body, where `act` answers a whole Response), or one of the error
    statuses it may refuse with (`errors`), as its OpenAPI responses say."""

    serializer: Any
    code: int = 200
    errors: tuple[int, ...] = ()
    also: tuple[int, ...] = ()

    def responses(self) -> dict[int, Any]:
        bodies = dict.fromkeys((self.code, *self.also), self.serializer)
        return {**bodies, **error_responses(*self.errors)}


@dataclass(frozen=True)
class FleetAction:
    """What a `FleetActionApi` does, declared once: who may (`role`; `reads`, the role of GET,
    HEAD and OPTIONS where the API reads too), the body `declared` checks (`fleet_input`, with
    its `validate` and `body_step`), the OpenAPI `operation_id` (None: drf-spectacular's), the
    HTTP `method`. With the API's `Answer` it makes the OpenAPI operation (described by the
    docstring of the API's `act`, as one line), so the schema and the checks never part."""

    role: type[BasePermission]
    declared: Declared | None
    operation_id: str | None = None
    method: str = "post"
    reads: type[BasePermission] | None = None
    validate: Validate = input_validate
    body_step: BodyStep | None = None

    def handler(self, answer: Answer, act: Callable[..., Any]) -> Callable[..., Response]:
        """The API method: the fleet and the checked body to the view's `act`, whose answer
        (a body, or a whole Response) goes out with the answer's code. Without a `declared`
        serializer the action takes no body (none is read) and `act` gets no `data`."""

        def handle(view: "FleetActionApi", request: Request, **kwargs: Any) -> Response:
            body = view.act(request, **kwargs)
            return body if isinstance(body, Response) else Response(body, status=answer.code)

        schema: dict[str, Any] = {
            "responses": answer.responses(),
            "operation_id": self.operation_id,
            "description": " ".join((act.__doc__ or "").split()) or None,
        }
        if self.declared is None:

            def bodyless(
                view: "FleetActionApi", request: Request, slug: str, **kwargs: Any
            ) -> Response:
                return handle(view, request, fleet=fleet_get(slug=slug), **kwargs)

            return extend_schema(request=None, **schema)(bodyless)
        return fleet_input(
            self.declared, validate=self.validate, body_step=self.body_step, **schema
        )(handle)


class FleetActionApi(APIView):
    """An API of one method that changes the fleet its URL names, declared by `does` (a
    `FleetAction`) and `answer` (an `Answer`): a subclass only says what
    `act(request, fleet, data, **url_kwargs)` does and answers. It may read too (a `get` of
    its own, for `does.reads`)."""

    does: ClassVar[FleetAction]  # not `action`: DRF's viewsets name theirs so
    answer: ClassVar[Answer]
    # `act(request, fleet, data, **url_kwargs)`: what the API does; its body or a Response.
    act: Callable[..., Any]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "does" in cls.__dict__ or "answer" in cls.__dict__:
            setattr(cls, cls.does.method, cls.does.handler(cls.answer, cls.act))

    def get_permissions(self) -> list[BasePermission]:
        if self.does.reads is not None and self.request.method in SAFE_METHODS:
            return [self.does.reads()]
        return [self.does.role()]


class FleetReadApi(APIView):
    """An API that answers a GET of the fleet its URL names (an unknown one is a 404 first),
    declared by its `answer` (an `Answer`) and `read_operation` (the OpenAPI operation id): a
    subclass only says what `look(request, fleet, **url_kwargs)` answers (a body, or a whole
    Response). Viewers read it."""

    permission_classes = [IsViewer]
    answer: ClassVar[Answer]
    read_operation: ClassVar[str]
    look: Callable[..., Any]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        answer = cls.answer

        def get(view: "FleetReadApi", request: Request, slug: str, **kwargs: Any) -> Response:
            body = view.look(request, fleet_get(slug=slug), **kwargs)
            return body if isinstance(body, Response) else Response(body, status=answer.code)

        schema = extend_schema(responses=answer.responses(), operation_id=cls.read_operation)
        cls.get = schema(get)  # type: ignore[attr-defined]
