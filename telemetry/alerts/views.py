"""The alerts page of a fleet: rules with their states, add / edit / delete, webhooks and their
delivery log, history. Thin: reads through `selectors.alerts`, each action one service call,
a refusal shown on the page with its HTTP status (nothing changed), success → redirect."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from controlplane.pages import form_input, posted_change, role_required
from controlplane.roles import Role, has_role
from routing_policies.models import Fleet
from routing_policies.pages import fleet_or_404

from ..rollups.segments import segment_names
from . import additions, limits, selectors, services
from .additions import Addition
from .judging import format_clear, format_threshold, format_value
from .models import AlertRule, AlertState, Condition, Metric, Scope, WebhookFormat
from .schemas import AlertRuleUpdateSerializer


def _rule_row(rule: AlertRule) -> dict[str, Any]:
    scope = "whole fleet" if rule.scope == Scope.FLEET else f"{rule.scope} {rule.scope_value}"
    if rule.segment:
        segment = f"segment {rule.segment}"
        scope = segment if rule.scope == Scope.FLEET else f"{scope} · {segment}"
    return {
        "rule": rule,
        "condition_text": format_threshold(rule.metric, rule.condition, rule.threshold),
        "clear_text": format_clear(rule.metric, rule.condition, rule.threshold, rule.hysteresis),
        "value_text": format_value(rule.metric, rule.last_value),
        "scope_text": scope,
        "state_label": AlertState(rule.state).label,
    }


def _form_values(rule: AlertRule | None) -> dict[str, str]:
    if rule is None:
        return {
            "metric": Metric.CLOUD_SHARE,
            "condition": Condition.ABOVE,
            "window_minutes": "10",
            "min_samples": "50",
            "for_seconds": "0",
            "hysteresis": "0",
            "scope": Scope.FLEET,
            "enabled": "on",
        }
    return {
        "name": rule.name,
        "metric": rule.metric,
        "condition": rule.condition,
        "threshold": f"{rule.threshold:g}",
        "window_minutes": str(rule.window_minutes),
        "min_samples": str(rule.min_samples),
        "for_seconds": str(rule.for_seconds),
        "hysteresis": f"{rule.hysteresis:g}",
        "scope": rule.scope,
        "scope_value": rule.scope_value,
        "segment": rule.segment,
        "enabled": "on" if rule.enabled else "",
        "revision": str(rule.revision),
    }


def _alerts_page(
    request: HttpRequest,
    fleet: Fleet,
    *,
    status: int = 200,
    error: str = "",
    problems: list[dict[str, Any]] | None = None,
    form: dict[str, str] | None = None,
    editing: AlertRule | None = None,
) -> HttpResponse:
    rules = selectors.rule_list(fleet_id=fleet.pk)
    context = {
        "fleet": fleet,
        "rows": [_rule_row(rule) for rule in rules],
        "firing": sum(1 for rule in rules if rule.state == "firing" and rule.enabled),
        "history": selectors.alert_history(fleet_id=fleet.pk),
        "webhooks": selectors.webhook_list(fleet_id=fleet.pk),
        "deliveries": selectors.delivery_list(fleet_id=fleet.pk),
        "metrics": Metric.choices,
        "conditions": Condition.choices,
        "scopes": Scope.choices,
        "segments": segment_names(fleet.pk),
        "formats": WebhookFormat.choices,
        "rules": rules,
        "form": form if form is not None else _form_values(editing),
        "editing": editing,
        "error": error,
        "problems": problems or [],
        "can_edit": has_role(request.user, Role.EDITOR),
        "can_publish": has_role(request.user, Role.PUBLISHER),
        "limits": limits,
    }
    return render(request, "alerts/alerts.html", context, status=status)


def _act(
    request: HttpRequest,
    fleet: Fleet,
    change: Callable[[], str],
    *,
    editing: AlertRule | None = None,
) -> HttpResponse:
    """One action of the page: `change` makes it (one service call) and says what it did, and
    the browser goes back to the alerts page; refused, the page again, its form as posted."""
    to = reverse("fleet-alerts", args=[fleet.slug])

    def page_again(*, posted: dict[str, str], **shown: Any) -> HttpResponse:
        return _alerts_page(request, fleet, form=posted, editing=editing, **shown)

    return posted_change(request, page_again, lambda: (change(), to))


PageAction = Callable[..., HttpResponse]


def _adding_action(role: Role, addition: Addition, said: Callable[[Any], str]) -> PageAction:
    """The page's POST (for `role` and up) that adds one to the fleet as `addition` takes it
    from the form; `said` says so."""

    @role_required(role)
    @require_POST
    def add_action(request: HttpRequest, slug: str) -> HttpResponse:
        fleet = fleet_or_404(slug)
        return _act(request, fleet, lambda: said(addition.from_form(request, fleet)))

    return add_action


def _removing_action(role: Role, delete: Callable[..., Any], said: str) -> PageAction:
    """The page's POST (for `role` and up) that removes one of the fleet's: `delete` (a
    service) takes it by the URL's key (`rule_id=…`)."""

    @role_required(role)
    @require_POST
    def remove_action(request: HttpRequest, slug: str, **key: int) -> HttpResponse:
        fleet = fleet_or_404(slug)

        def remove() -> str:
            delete(actor=request.user, fleet=fleet, **key)
            return said

        return _act(request, fleet, remove)

    return remove_action


@role_required(Role.VIEWER)
@require_GET
def alerts_page(request: HttpRequest, slug: str) -> HttpResponse:
    """Rules and their states, history, webhooks and deliveries."""
    return _alerts_page(request, fleet_or_404(slug))


# Add a rule.
alert_rule_create = _adding_action(
    Role.EDITOR,
    additions.RULE,
    lambda rule: f"Added the rule {rule.name!r}; it is judged with the next rollups.",
)


@role_required(Role.EDITOR)
@require_http_methods(["GET", "POST"])
def alert_rule_edit(request: HttpRequest, slug: str, rule_id: int) -> HttpResponse:
    """The page with the rule in the form (GET); save it (POST, with its revision)."""
    fleet = fleet_or_404(slug)
    rule = AlertRule.objects.filter(fleet=fleet, pk=rule_id).first()
    if rule is None:
        raise Http404(f"Fleet {slug!r} has no alert rule {rule_id}.")
    if request.method == "GET":
        return _alerts_page(request, fleet, editing=rule)

    def save() -> str:
        changes = form_input(AlertRuleUpdateSerializer, request.POST)
        saved = services.alert_rule_update(
            actor=request.user, fleet=fleet, rule_id=rule_id, **changes
        )
        return f"Saved the rule {saved.name!r}."

    return _act(request, fleet, save, editing=rule)


# Remove a rule (its history stays).
alert_rule_delete = _removing_action(Role.EDITOR, services.alert_rule_delete, "Removed the rule.")
# Add a webhook for every rule or one.
alert_webhook_create = _adding_action(
    Role.PUBLISHER, additions.WEBHOOK, lambda webhook: f"Alerts are now posted to {webhook.url}."
)
# Stop posting to a webhook.
alert_webhook_delete = _removing_action(
    Role.PUBLISHER, services.alert_webhook_delete, "Removed the webhook."
)
