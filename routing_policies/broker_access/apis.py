"""The HTTP hooks a broker calls (docs/mqtt-brokers.md): EMQX 5's HTTP authentication and
authorisation (`/mqtt/auth`, `/mqtt/acl`; HiveMQ through an extension calling the same) and
VerneMQ's webhooks (`/mqtt/vernemq`, by its `vernemq-hook` header). And the one a device calls
when the broker refused its credentials (`/devices/me/broker-access`, dynsec only).

The broker proves itself with the shared secret MQTT_HOOK_SECRET in `X-MQTT-Hook-Secret`
(401 without it; always 401 while the secret is unset). A decision is always 200 with the
broker's own answer format; only a malformed request is refused (400 naming the field).
"""

import hmac
from typing import Any, Final

from django.conf import settings
from django.core.cache import cache
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.api import JsonChoiceField, JsonIntegerField, JsonStringField, require_object
from controlplane.exceptions import Conflict, ValidationFailed, error_body
from controlplane.openapi import ApiSerializer, error_responses

from ..devices.apis import DeviceTokenAuthentication, IsDevice
from ..devices.models import Device
from . import selectors, services
from .access import ACTIONS

SECRET_HEADER: Final = "X-MQTT-Hook-Secret"
# MQTT allows longer; no name or topic of ours comes near these.
MAX_USERNAME_CHARS: Final = 256
MAX_PASSWORD_CHARS: Final = 512
MAX_TOPIC_CHARS: Final = 1024
MAX_SUBSCRIBE_TOPICS: Final = 100


class _BrokerHook:
    """request.user of a call that carried the hook secret."""

    is_authenticated = True
    is_anonymous = False


class HookSecretAuthentication(BaseAuthentication):
    """`X-MQTT-Hook-Secret: <MQTT_HOOK_SECRET>`, compared in constant time."""

    def authenticate(self, request: Request) -> tuple[Any, None] | None:
        expected = settings.MQTT_HOOK_SECRET
        sent = request.headers.get(SECRET_HEADER, "")
        if not expected or not hmac.compare_digest(sent.encode(), expected.encode()):
            raise AuthenticationFailed(f"The broker's hook secret ({SECRET_HEADER}) is required.")
        return _BrokerHook(), None

    def authenticate_header(self, request: Request) -> str:
        return 'MQTT-Hook-Secret realm="mqtt"'


class HookSecretScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    """The hooks' security scheme in the OpenAPI document."""

    target_class = HookSecretAuthentication
    name = "mqttHookSecret"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "apiKey",
            "in": "header",
            "name": SECRET_HEADER,
            "description": "MQTT_HOOK_SECRET, which the broker is configured to send.",
        }


def _name(**kwargs: Any) -> JsonStringField:
    return JsonStringField(max_length=MAX_USERNAME_CHARS, allow_blank=True, **kwargs)


class HookResultSerializer(ApiSerializer):
    """EMQX 5's answer: `allow`, `deny` or `ignore` (the next source of the chain decides)."""

    component_name = "MqttHookResult"

    result = serializers.ChoiceField(choices=selectors.RESULTS)
    is_superuser = serializers.BooleanField(required=False)
    client_attrs = serializers.DictField(child=serializers.CharField(), required=False)


class _HookApi(APIView):
    authentication_classes = [HookSecretAuthentication]
    permission_classes = [IsAuthenticated]
    InputSerializer: type[serializers.Serializer[Any]]

    def checked(self, request: Request) -> dict[str, Any]:
        """The hook's body as its InputSerializer (the documented one) checks it; a 400
        naming each bad field otherwise."""
        serializer = self.InputSerializer(data=require_object(request.data))
        serializer.is_valid(raise_exception=True)
        return dict(serializer.validated_data)


class MqttAuthApi(_HookApi):
    """EMQX HTTP authentication: may this client connect (username, password, client id)?"""

    class InputSerializer(ApiSerializer):
        component_name = "MqttAuthInput"
        username = _name()
        password = JsonStringField(max_length=MAX_PASSWORD_CHARS, allow_blank=True)
        clientid = _name()

    @extend_schema(
        request=InputSerializer,
        responses={200: HookResultSerializer},
        operation_id="mqtt_auth",
    )
    def post(self, request: Request) -> Response:
        data = self.checked(request)
        result = selectors.mqtt_authenticate(**data)
        body: dict[str, Any] = {"result": result, "is_superuser": False}
        if result == "allow":
            # EMQX (5.7+) sends it back with each authorisation question: see mqtt_authorize.
            body["client_attrs"] = {"session": selectors.mqtt_session_fingerprint(data["password"])}
        return Response(body)


class MqttAclApi(_HookApi):
    """EMQX HTTP authorisation: may this client publish on, or subscribe with, this topic?"""

    class InputSerializer(ApiSerializer):
        component_name = "MqttAclInput"
        username = _name()
        topic = JsonStringField(max_length=MAX_TOPIC_CHARS)
        action = JsonChoiceField(choices=ACTIONS)
        session = JsonStringField(
            max_length=64,
            required=False,
            allow_blank=True,
            default="",
            help_text="`${client_attrs.session}`: the session's token fingerprint, as /mqtt/auth "
            "answered it; when sent, a session opened with a since-replaced token is denied.",
        )

    @extend_schema(
        request=InputSerializer,
        responses={200: HookResultSerializer},
        operation_id="mqtt_acl",
    )
    def post(self, request: Request) -> Response:
        return Response({"result": selectors.mqtt_authorize(**self.checked(request))})


# --- VerneMQ's webhooks --------------------------------------------------------------------

VERNEMQ_HOOK_HEADER: Final = "vernemq-hook"
VERNEMQ_HOOKS: Final = (
    "auth_on_register",
    "auth_on_register_m5",
    "auth_on_publish",
    "auth_on_publish_m5",
    "auth_on_subscribe",
    "auth_on_subscribe_m5",
)
# MQTT 3.1.1 refuses a subscription with 128 (failure), MQTT 5 with 135 (not authorized).
_REFUSED_QOS: Final = {"auth_on_subscribe": 128, "auth_on_subscribe_m5": 135}
_VERNEMQ_ANSWER: Final = {"allow": "ok", "deny": {"error": "not_allowed"}, "ignore": "next"}


class _VerneNameField(JsonStringField):
    """VerneMQ sends `null` for a client that gave no username or password."""

    def __init__(self, **kwargs: Any) -> None:
        if not kwargs.get("required", True):
            kwargs["default"] = ""
        super().__init__(allow_blank=True, allow_null=True, **kwargs)

    def validate_empty_values(self, data: Any) -> tuple[bool, Any]:
        if data is None:
            return True, ""
        return super().validate_empty_values(data)


class VerneSubscriptionSerializer(ApiSerializer):
    component_name = "VerneMQSubscription"
    topic = JsonStringField(max_length=MAX_TOPIC_CHARS)
    qos = JsonIntegerField(min_value=0, max_value=2)


class VerneMQHookApi(_HookApi):
    """VerneMQ's webhooks auth_on_register, auth_on_publish and auth_on_subscribe (and their
    `_m5` forms), told apart by the `vernemq-hook` header; other fields of its payloads
    (peer_addr, mountpoint, payload, properties …) are not read."""

    class InputSerializer(ApiSerializer):
        component_name = "VerneMQHookInput"
        username = _VerneNameField(max_length=MAX_USERNAME_CHARS)
        password = _VerneNameField(max_length=MAX_PASSWORD_CHARS, required=False)
        client_id = _VerneNameField(max_length=MAX_USERNAME_CHARS, required=False)
        topic = JsonStringField(max_length=MAX_TOPIC_CHARS, required=False)
        topics = VerneSubscriptionSerializer(  # type: ignore[call-arg]  # ListSerializer's
            many=True, required=False, max_length=MAX_SUBSCRIBE_TOPICS
        )

    @extend_schema(
        request=InputSerializer,
        parameters=[
            OpenApiParameter(
                VERNEMQ_HOOK_HEADER,
                location=OpenApiParameter.HEADER,
                required=True,
                enum=list(VERNEMQ_HOOKS),
                description="Which hook VerneMQ calls.",
            ),
        ],
        responses={
            200: OpenApiResponse(
                description='VerneMQ\'s answer: `{"result": "ok"}`, `{"result": "next"}`, '
                '`{"result": {"error": "not_allowed"}}`, or for a subscription with a refused '
                "topic `ok` with the topics, the refused ones at QoS 128 (135 for MQTT 5)."
            )
        },
        operation_id="mqtt_vernemq_hook",
    )
    def post(self, request: Request) -> Response:
        hook = request.headers.get(VERNEMQ_HOOK_HEADER, "")
        if hook not in VERNEMQ_HOOKS:
            raise ValidationFailed(
                "Not a VerneMQ authentication hook.",
                details=[
                    {
                        "field": VERNEMQ_HOOK_HEADER,
                        "message": f"One of {', '.join(VERNEMQ_HOOKS)}.",
                    }
                ],
            )
        data = self.checked(request)
        if hook.startswith("auth_on_register"):
            result = selectors.mqtt_authenticate(
                username=data["username"], password=data["password"], clientid=data["client_id"]
            )
            return Response({"result": _VERNEMQ_ANSWER[result]})
        if hook.startswith("auth_on_publish"):
            _require(data, "topic")
            result = selectors.mqtt_authorize(
                username=data["username"], topic=data["topic"], action="publish"
            )
            return Response({"result": _VERNEMQ_ANSWER[result]})
        _require(data, "topics")
        return Response(_vernemq_subscribe(hook, data["username"], data["topics"]))


def _require(data: dict[str, Any], field: str) -> None:
    if field not in data:
        raise ValidationFailed(
            "The request is invalid.",
            details=[{"field": field, "message": "This field is required for this hook."}],
        )


def _vernemq_subscribe(hook: str, username: str, topics: list[dict[str, Any]]) -> dict[str, Any]:
    """All allowed: `ok`; a stranger: `next`; else `ok` with the refused topics' QoS set to
    VerneMQ's refusal (the others kept)."""
    results = [
        selectors.mqtt_authorize(username=username, topic=item["topic"], action="subscribe")
        for item in topics
    ]
    if all(r == "ignore" for r in results) and results:
        return {"result": "next"}
    if all(r == "allow" for r in results):
        return {"result": "ok"}
    answered = [
        {"topic": item["topic"], "qos": item["qos"] if r == "allow" else _REFUSED_QOS[hook]}
        for item, r in zip(topics, results, strict=True)
    ]
    if hook.endswith("_m5"):
        return {"result": "ok", "modifiers": {"topics": answered}}
    return {"result": "ok", "topics": answered}


# A device asks again at most this often (each ask is a broker round trip of the admin account).
ACCESS_ASK_INTERVAL_S: Final = 60
RETRY_AFTER_S: Final = 30


class BrokerAccessApi(APIView):
    """The broker refused this device's credentials though its token is live (it enrolled while
    the broker was down, or the broker lost its clients): give the broker the device's client
    again, with the token this request carries. Only where the control plane manages the
    broker's access (MQTT_ACCESS=dynsec); at most once a minute per device."""

    authentication_classes = [DeviceTokenAuthentication]
    permission_classes = [IsDevice]

    @extend_schema(
        request=None,
        responses={204: None, **error_responses(409, 429, 503)},
        operation_id="device_broker_access",
    )
    def post(self, request: Request) -> Response:
        device = request.auth
        assert isinstance(device, Device)
        if not services.dynsec_enabled():
            raise Conflict(
                "The control plane does not manage this broker's access (MQTT_ACCESS is not "
                "dynsec): the broker asks the hooks, or its operator, on every connect.",
                code="broker_access_not_managed",
            )
        if not cache.add(f"broker-access-ask:{device.pk}", 1, timeout=ACCESS_ASK_INTERVAL_S):
            return _retry_later(
                429, "rate_limited", "Asked already; ask again in a minute.", ACCESS_ASK_INTERVAL_S
            )
        token = request.headers["Authorization"].partition(" ")[2].strip()
        if not services.broker_device_grant(
            fleet=device.fleet.slug, device_id=device.device_id, token=token
        ):
            message = f"The MQTT broker could not be told; retry in {RETRY_AFTER_S} s."
            return _retry_later(503, "broker_unavailable", message, RETRY_AFTER_S)
        return Response(status=204)


def _retry_later(status_code: int, code: str, message: str, after_s: int) -> Response:
    response = Response(error_body(code, message), status=status_code)
    response["Retry-After"] = str(after_s)
    return response
