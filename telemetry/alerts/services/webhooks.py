"""Alert webhooks: register and remove a fleet's webhooks; the deliveries an alert owes them.

Publishers add a URL (every rule's alerts, or one rule's) in JSON or Slack format; a URL
inside the network is refused unless ALERT_WEBHOOK_ALLOW_PRIVATE_NETWORKS (see
`alerts.services.delivery`, which posts them). When an evaluation records a firing, a
resolution or a guard's action, `webhook_deliveries_create` writes one pending delivery per
matching webhook in the same transaction.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from controlplane.exceptions import Conflict, ValidationFailed
from routing_policies.models import Fleet
from routing_policies.services import Actor, audit_of

from ..models import AlertEvent, AlertRule, AlertWebhook, WebhookDelivery
from ..notify import webhook_payload
from ..selectors import rule_snapshot
from .delivery import deliveries_start_on_commit, url_refusal
from .problems import field_problem, unique_or_conflict

MAX_WEBHOOKS_PER_FLEET = 20
# The headline of every refusal of a webhook's fields, the input serializer's and these checks'.
WEBHOOK_INVALID = "The webhook is invalid."


def _webhook_audited(
    actor: Actor, fleet: Fleet, webhook: AlertWebhook, action: str, summary: str
) -> None:
    """Audit the `action` (created, deleted) of one of the fleet's webhooks."""
    audit_of(
        "alert_webhook",
        webhook.pk,
        action,
        actor=actor,
        fleet=fleet,
        summary=summary,
        noun="webhook",
    )


@transaction.atomic
def alert_webhook_create(
    *, actor: Actor, fleet: Fleet, url: str, format: str = "json", rule_id: int | None = None
) -> AlertWebhook:
    """Add a webhook for every alert of the fleet (or one rule's), its fields as the input
    serializer (`alerts.schemas`) took them: the address must be public (unless allowed) and
    the rule the fleet's; a repeat is refused (409)."""
    problems = []
    if (refusal := url_refusal(url)) is not None:
        problems.append(
            field_problem(
                "url",
                f"a public address ({refusal}; ALERT_WEBHOOK_ALLOW_PRIVATE_NETWORKS allows "
                "addresses inside the network)",
            )
        )
    rule = None
    if rule_id is not None:
        rule = AlertRule.objects.filter(fleet=fleet, pk=rule_id).first()
        if rule is None:
            problems.append(field_problem("rule_id", f"fleet {fleet.slug!r} has no rule {rule_id}"))
    if problems:
        raise ValidationFailed(WEBHOOK_INVALID, details=problems)
    if AlertWebhook.objects.filter(fleet=fleet).count() >= MAX_WEBHOOKS_PER_FLEET:
        raise Conflict(
            f"A fleet has at most {MAX_WEBHOOKS_PER_FLEET} webhooks.", code="too_many_webhooks"
        )
    webhook = unique_or_conflict(
        lambda: AlertWebhook.objects.create(fleet=fleet, url=url, format=format, rule=rule),
        message="This fleet already posts to that URL in that format.",
        code="duplicate_webhook",
        field="url",
        problem="already registered",
    )
    whose = rule.name if rule else "every rule"
    summary = f"Alerts of {whose} are posted to {url} ({format})"
    _webhook_audited(actor, fleet, webhook, "created", summary)
    return webhook


@transaction.atomic
def alert_webhook_delete(*, actor: Actor, fleet: Fleet, webhook_id: int) -> None:
    """Stop posting to a webhook (its delivery log stays); a repeat is a no-op."""
    webhook = AlertWebhook.objects.filter(fleet=fleet, pk=webhook_id).first()
    if webhook is None:
        return
    summary = f"Alerts are no longer posted to {webhook.url}"
    _webhook_audited(actor, fleet, webhook, "deleted", summary)
    webhook.delete()


def _event_body(event: AlertEvent) -> dict[str, Any]:
    fleet_slug = Fleet.objects.filter(pk=event.fleet_id).values_list("slug", flat=True).first()
    rule = event.rule
    body: dict[str, Any] = {
        "kind": f"rollout.{event.kind}" if event.rollout_id else f"alert.{event.kind}",
        "fleet": fleet_slug,
        "state": event.state_after,
        "message": event.message,
        "value": event.value,
        "previous_value": event.previous,
        "samples": event.samples,
        "at": event.at.isoformat(),
        "rule": None,
        "rollout": None,
        "alert_event_id": event.pk,
    }
    if rule is not None:
        body["rule"] = {"id": rule.pk, **rule_snapshot(rule)}
    if event.rollout is not None:
        body["rollout"] = {
            "id": event.rollout_id,
            "candidate": event.rollout.candidate.number,
            "stable": event.rollout.stable.number,
            "stage": event.rollout.stage,
            "state": event.rollout.state,
        }
    return body


def webhook_deliveries_create(*, events: list[AlertEvent]) -> list[WebhookDelivery]:
    """One pending delivery per (event, matching webhook), created in this transaction."""
    if not events:
        return []
    fleet_ids = {e.fleet_id for e in events}
    webhooks = list(AlertWebhook.objects.filter(fleet_id__in=fleet_ids, enabled=True))
    deliveries = []
    now = timezone.now()
    for event in events:
        body = _event_body(event)
        for webhook in webhooks:
            if webhook.fleet_id != event.fleet_id:
                continue
            if webhook.rule_id is not None and webhook.rule_id != event.rule_id:
                continue
            deliveries.append(
                WebhookDelivery(
                    fleet_id=event.fleet_id,
                    webhook=webhook,
                    alert_event=event,
                    url=webhook.url,
                    payload=webhook_payload(format=webhook.format, body=body),
                    next_attempt_at=now,
                )
            )
    return WebhookDelivery.objects.bulk_create(deliveries)


def governance_deliveries_create(fleet_id: int, body: dict[str, Any]) -> None:
    """A change request's or a freeze's notification (routing_policies.extensions), to every
    fleet-wide webhook of the fleet; delivered after the change commits."""
    webhooks = list(AlertWebhook.objects.filter(fleet_id=fleet_id, enabled=True, rule__isnull=True))
    now = timezone.now()
    deliveries = WebhookDelivery.objects.bulk_create(
        WebhookDelivery(
            fleet_id=fleet_id,
            webhook=webhook,
            url=webhook.url,
            payload=webhook_payload(format=webhook.format, body=body),
            next_attempt_at=now,
        )
        for webhook in webhooks
    )
    deliveries_start_on_commit(deliveries)
