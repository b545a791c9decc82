"""The OpenAPI contract's shared parts: the error body, the error answers of every operation,
the device-token security scheme, and query parameters validated by serializers.

Every operation's schema lists the statuses it can answer. `ApiAutoSchema` adds the ones that
follow from how a view is built (400 for any bad input, 401/403 from its permissions, 404 when
its path names an object, 413 for a body over MAX_REQUEST_BYTES); a view adds the ones only it
can answer (409, 428, 429) with `error_responses(...)` in its `extend_schema(responses=...)`.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar, Final, TypeVar

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import build_bearer_security_scheme_object
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, PolymorphicProxySerializer
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.request import Request

from .exceptions import ValidationFailed

# --- components named once ------------------------------------------------------------------


# A comment, not a docstring: drf-spectacular would show a docstring as the description of
# every component whose serializer has none of its own.
class ApiSerializer(serializers.Serializer[Any]):
    # A serializer whose OpenAPI component is its class name less `Serializer` (`Rollout` for
    # `RolloutSerializer`), or its own `component_name` when it sets one. Each subclass gets a
    # `Meta.ref_name` of its own (what drf-spectacular and `closed_body` read): one inherited
    # from its base would give two serializers one component.

    Meta: ClassVar[type]
    component_name: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        name = cls.__dict__.get("component_name") or cls.__name__.removesuffix("Serializer")
        cls.Meta = type("Meta", (), {"ref_name": name})


# --- the error body ------------------------------------------------------------------------------


class ErrorDetailSerializer(serializers.Serializer[Any]):
    """One problem of a refused request: the field (or parameter, or header) and why."""

    field = serializers.CharField(help_text="The field, query parameter or header at fault.")
    message = serializers.CharField(required=False)
    cell = serializers.CharField(
        required=False, help_text="Policy validation: the cell, task_type/latency_budget/tier."
    )
    segment = serializers.CharField(
        required=False, help_text="Policy validation: the segment of an override at fault."
    )
    event = serializers.IntegerField(
        required=False, help_text="Telemetry only: the index of the bad event in the batch."
    )

    class Meta:
        ref_name = "ErrorDetail"


class ErrorInnerSerializer(serializers.Serializer[Any]):
    code = serializers.CharField(help_text="Stable machine-readable code, e.g. validation_failed.")
    message = serializers.CharField(help_text="What went wrong, for a person.")
    details = ErrorDetailSerializer(many=True)

    class Meta:
        ref_name = "ErrorInner"


class ErrorSerializer(serializers.Serializer[Any]):
    """`{"error": {"code", "message", "details": [{"field", "message"}]}}`: every API error."""

    error = ErrorInnerSerializer()

    class Meta:
        ref_name = "Error"


def _example(name: str, code: str, message: str, details: list[dict[str, Any]]) -> OpenApiExample:
    return OpenApiExample(
        name, value={"error": {"code": code, "message": message, "details": details}}
    )


ERROR_DESCRIPTIONS: dict[int, tuple[str, list[OpenApiExample]]] = {
    400: (
        "The request is invalid; `details` names each bad field or query parameter.",
        [
            _example(
                "validation_failed",
                "validation_failed",
                "The request is invalid.",
                [{"field": "limit", "message": "Ensure this value is less than or equal to 1000."}],
            )
        ],
    ),
    401: (
        "No credentials, or credentials that are not (or no longer) valid.",
        [
            _example(
                "not_authenticated",
                "not_authenticated",
                "Authentication credentials were not provided.",
                [],
            )
        ],
    ),
    403: (
        "Authenticated, but the role is too low for this operation.",
        [
            _example(
                "permission_denied",
                "permission_denied",
                "You need the publisher role for this (publishing, creating fleets).",
                [],
            )
        ],
    ),
    404: (
        "The fleet (or the object the path names) does not exist.",
        [_example("not_found", "not_found", "Fleet 'nope' does not exist.", [])],
    ),
    409: (
        "Well formed, but clashes with the current state (a stale revision, a duplicate, a "
        "rollout in the wrong state).",
        [
            _example(
                "stale_revision",
                "stale_revision",
                "The draft changed since you read it (revision 3, now 4).",
                [],
            )
        ],
    ),
    413: (
        "The body is over the size limit (MAX_REQUEST_BYTES, 1 MiB by default).",
        [
            _example(
                "payload_too_large",
                "payload_too_large",
                "Request body is 2000000 bytes; the limit is 1048576 bytes.",
                [],
            )
        ],
    ),
    428: (
        'The draft revision is missing: send `If-Match: "r<revision>"` or a `revision` field.',
        [
            _example(
                "revision_required",
                "revision_required",
                "Say which draft revision you are changing (If-Match header or `revision` "
                "field), so nobody's edit is overwritten.",
                [],
            )
        ],
    ),
    429: (
        "Too many requests from this device: retry after `Retry-After` seconds.",
        [
            _example(
                "rate_limited",
                "rate_limited",
                "Too many batches from this device; retry in 2 s.",
                [],
            )
        ],
    ),
    503: (
        "A service the control plane depends on (the MQTT broker) did not answer: retry after "
        "`Retry-After` seconds; nothing was changed.",
        [
            _example(
                "broker_unavailable",
                "broker_unavailable",
                "The MQTT broker could not be told; retry in 30 s.",
                [],
            )
        ],
    ),
}


def error_response(status: int) -> OpenApiResponse:
    """The documented answer of one error status: the error body with an example."""
    description, examples = ERROR_DESCRIPTIONS[status]
    return OpenApiResponse(ErrorSerializer, description=description, examples=examples)


def error_responses(*statuses: int) -> dict[int, OpenApiResponse]:
    """`{409: …, 428: …}` to merge into an `extend_schema(responses=…)`."""
    return {status: error_response(status) for status in statuses}


# --- protobuf twins (docs/PROTOCOL.md, "Binary frames and compression") --------------------------

# The protobuf media type (edge_sdk.wire.PROTOBUF_MEDIA_TYPE; controlplane does not import the
# SDK's wire package for its schema).
PROTOBUF: Final = "application/x-protobuf"


def json_or_protobuf(
    status: int, json: Any, message: str, description: str = ""
) -> dict[Any, OpenApiResponse]:
    """A status whose body is JSON (`json`, a serializer) by default, or `message` of
    edge_sdk/wire/edge_routing.proto when the request's `Accept` prefers protobuf: both media
    types under the status, the description saying so."""
    said = (
        f"{description} In protobuf (`{PROTOBUF}`, edge_sdk/wire/edge_routing.proto: {message}) "
        "when `Accept` prefers it, compressed when `Accept-Encoding` asks."
    ).strip()
    return {
        (status, "application/json"): OpenApiResponse(json, description=said),
        (status, PROTOBUF): OpenApiResponse(OpenApiTypes.BINARY, description=said),
    }


_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_PATH_PARAMETER_RE = re.compile(r"{\w+}")


class ApiAutoSchema(AutoSchema):
    """drf-spectacular's schema, with the error statuses every operation can answer."""

    def _implied_error_statuses(self) -> list[int]:
        statuses = [400]
        permissions = self.view.get_permissions()
        if not all(isinstance(p, AllowAny) for p in permissions):
            statuses.append(401)
            if any(getattr(p, "required", None) is not None for p in permissions):
                statuses.append(403)  # a role permission: a viewer may not publish
        if _PATH_PARAMETER_RE.search(self.path):
            statuses.append(404)
        if self.method in _BODY_METHODS:
            statuses.append(413)
        return statuses

    def _get_request_for_media_type(self, serializer: Any, direction: Any = "request") -> Any:
        schema, required = super()._get_request_for_media_type(serializer, direction)  # type: ignore[no-untyped-call]
        # A body that is one of several shapes (by its `kind`) is required all the same: each
        # shape has required fields, which drf-spectacular does not look into.
        return schema, required or isinstance(serializer, PolymorphicProxySerializer)

    def _get_response_bodies(self, direction: Any = "response") -> dict[str, Any]:
        responses: dict[str, Any] = super()._get_response_bodies(direction)
        if direction != "response":
            return responses
        for status in self._implied_error_statuses():
            if str(status) not in responses:
                responses[str(status)] = self._get_response_for_code(  # type: ignore[no-untyped-call]
                    error_response(status), str(status), direction=direction
                )
        return dict(sorted(responses.items()))


# --- bodies that refuse unknown fields ------------------------------------------------------

_CLOSED_BODIES: set[str] = set()
SerializerClass = TypeVar("SerializerClass", bound=type[serializers.Serializer[Any]])


def closed_body(serializer_class: SerializerClass) -> SerializerClass:
    """Mark an input serializer whose body the server refuses unknown fields in (a typo must not
    be silently ignored): its request component says `additionalProperties: false`."""
    _CLOSED_BODIES.add(serializer_class.Meta.ref_name)  # type: ignore[attr-defined]
    return serializer_class


_NON_EMPTY_BODIES: set[str] = set()


def non_empty_body(serializer_class: SerializerClass) -> SerializerClass:
    """Mark an input serializer of optional fields of which the server needs at least one: its
    request component says `minProperties: 1`."""
    _NON_EMPTY_BODIES.add(serializer_class.Meta.ref_name)  # type: ignore[attr-defined]
    return serializer_class


def postprocess_closed_bodies(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """drf-spectacular postprocessing hook: close the request components `closed_body` marked
    (and ask for one field at least in those `non_empty_body` marked)."""
    for name, component in result.get("components", {}).get("schemas", {}).items():
        if name.endswith("Request") and name.removesuffix("Request") in _CLOSED_BODIES:
            component["additionalProperties"] = False
        if name.endswith("Request") and name.removesuffix("Request") in _NON_EMPTY_BODIES:
            component["minProperties"] = 1
    return result


# --- security schemes --------------------------------------------------------------------------


class DeviceTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    """`Authorization: Bearer <device token>`, the token `POST /api/v1/devices/enroll` returns."""

    target_class = "routing_policies.devices.apis.DeviceTokenAuthentication"
    name = "deviceToken"

    def get_security_definition(self, auto_schema: AutoSchema) -> dict[str, Any]:
        definition: dict[str, Any] = build_bearer_security_scheme_object(
            header_name="Authorization", token_prefix="Bearer"
        )
        definition["description"] = (
            "A device's token from `POST /api/v1/devices/enroll`, sent as "
            "`Authorization: Bearer <token>`."
        )
        return definition


# --- query parameters ------------------------------------------------------------------------


def query_params_validate(
    serializer_class: type[serializers.Serializer[Any]], request: Request
) -> dict[str, Any]:
    """The view's query parameters checked by `serializer_class`, or a 400 naming each bad one.

    Only the parameters the serializer declares are read; a repeated one counts by its last
    value, as `request.query_params.get` reads it.
    """
    params = request.query_params
    declared: list[str] = list(serializer_class().fields.keys())
    data = {name: params.get(name) for name in declared if name in params}
    serializer = serializer_class(data=data)
    if not serializer.is_valid():
        details = [
            {"field": name, "message": str(message)}
            for name, messages in serializer.errors.items()
            for message in (messages if isinstance(messages, list) else [messages])
        ]
        raise ValidationFailed(
            f"Query parameter `{details[0]['field']}` is invalid: {details[0]['message']}",
            details=details,
        )
    return dict(serializer.validated_data)
