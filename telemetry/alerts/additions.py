"""Adding a rule or a webhook to a fleet, declared once for the API and the alerts page.

Both take the input with the same serializer (the API's JSON body, the page's posted form) and
make it with the same service; the API shows what was made with `shown` and heads a refusal of
its body with `invalid` (the page names the first field at fault instead).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest
from rest_framework import serializers
from rest_framework.request import Request

from controlplane.api import input_validate, require_object
from controlplane.pages import form_input
from routing_policies.models import Fleet

from . import schemas, services


@dataclass(frozen=True, slots=True)
class Addition:
    """One kind of thing a fleet has a list of, as it is added: the input serializer, the
    service that makes it (`actor`, `fleet` and the validated input as keywords), the output
    serializer of the API's answer and the message of a refused body."""

    body: type[serializers.Serializer[Any]]
    create: Callable[..., Any]
    shown: type[serializers.Serializer[Any]]
    invalid: str

    def from_api(self, request: Request, fleet: Fleet) -> Any:
        """Made from the API's JSON body (a ValidationFailed naming every bad field)."""
        values = input_validate(self.body, require_object(request.data), message=self.invalid)
        return self.create(actor=request.user, fleet=fleet, **values)

    def from_form(self, request: HttpRequest, fleet: Fleet) -> Any:
        """Made from the page's posted form (a ValidationFailed naming the first bad field)."""
        values = form_input(self.body, request.POST)
        return self.create(actor=request.user, fleet=fleet, **values)


RULE = Addition(
    schemas.AlertRuleCreateSerializer,
    services.alert_rule_create,
    schemas.AlertRuleSerializer,
    services.RULE_INVALID,
)
WEBHOOK = Addition(
    schemas.AlertWebhookCreateSerializer,
    services.alert_webhook_create,
    schemas.AlertWebhookSerializer,
    services.WEBHOOK_INVALID,
)
