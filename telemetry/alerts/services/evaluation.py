"""Alert rules and webhooks (create, change, delete) and evaluating a fleet's rules and guards.

Evaluation is one transaction per fleet under a PostgreSQL advisory lock (two evaluations of a
fleet never interleave; the second waits and then sees the newer rollups): one query reads the
fleet's minute rollups for the longest window any rule or guard needs, every rule is judged
from those rows in memory, state changes are recorded as history, and the notifications
(banner, webhooks) go out after the commit.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from controlplane.exceptions import Conflict, NotFound, ValidationFailed
from controlplane.validators import text_problem
from routing_policies.models import Fleet, Rollout
from routing_policies.services.policy import Actor, audit_record

from ..alert_models import (
    AlertEvent,
    AlertRule,
    AlertState,
    AlertWebhook,
    Condition,
    Metric,
    RolloutGuardSet,
    Scope,
    WebhookDelivery,
    WebhookFormat,
)
from ..alerting import (
    LATENCY_METRICS,
    RATE_METRICS,
    Judgement,
    figures_of,
    judge_rule,
    parse_scope,
)
from ..notify import broadcast_alerts, webhook_payload
from ..selectors import alerts as alert_selectors
from .webhooks import url_refusal

logger = logging.getLogger(__name__)

MAX_RULES_PER_FLEET = 100
MAX_WEBHOOKS_PER_FLEET = 20
_ADVISORY_CLASS = 726_001  # pg_advisory_xact_lock(class, fleet id): one evaluation per fleet
# What an evaluation writes on a rule (never what a person edits).
STATE_FIELDS = (
    "state",
    "state_since",
    "last_value",
    "last_previous",
    "last_samples",
    "last_message",
    "last_evaluated_at",
)
RULE_FIELDS = (
    "name",
    "metric",
    "condition",
    "threshold",
    "window_minutes",
    "min_samples",
    "for_seconds",
    "hysteresis",
    "scope",
    "scope_value",
    "enabled",
)


# --- rules ------------------------------------------------------------------------------------


def _problem(field_name: str, message: str) -> dict[str, str]:
    return {"field": field_name, "message": message}


def _whole(values: dict[str, Any], name: str, low: int, high: int, problems: list[Any]) -> None:
    value = values.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        problems.append(_problem(name, f"a whole number from {low} to {high} (got {value!r})"))


def _clean_rule(values: dict[str, Any], *, fleet_id: int) -> dict[str, Any]:
    """Check a rule's fields together; raise ValidationFailed naming every bad one."""
    problems: list[dict[str, str]] = []
    name = values.get("name")
    if not isinstance(name, str) or not name or len(name) > 120:
        problems.append(_problem("name", "a name of 1 to 120 characters"))
    elif (untidy := text_problem(name)) is not None:
        # Refused, not trimmed, as ids are: the name shown is the name sent.
        problems.append(_problem("name", f"{untidy} Nothing is trimmed."))
    # A metric of the wrong JSON type (a list, an object) is refused like an unknown one, and
    # the checks below see None: it is unhashable, so `in RATE_METRICS` would raise.
    metric = values.get("metric") if isinstance(values.get("metric"), str) else None
    if metric not in Metric.values:
        problems.append(_problem("metric", f"one of {', '.join(Metric.values)}"))
    if values.get("condition") not in Condition.values:
        problems.append(_problem("condition", f"one of {', '.join(Condition.values)}"))
    threshold = values.get("threshold")
    if (
        isinstance(threshold, bool)
        or not isinstance(threshold, int | float)
        or not math.isfinite(threshold)
        or not -1e9 <= threshold <= 1e9
    ):
        problems.append(_problem("threshold", f"a finite number (got {threshold!r})"))
    else:
        values["threshold"] = float(threshold)
        if metric in RATE_METRICS and not -1.0 <= threshold <= 1.0:
            problems.append(_problem("threshold", "a share: a fraction from 0 to 1 (0.2 is 20%)"))
    _whole(values, "window_minutes", 1, 360, problems)
    _whole(values, "min_samples", 0, 10_000_000, problems)
    _whole(values, "for_seconds", 0, 86_400, problems)
    hysteresis = values.get("hysteresis")
    if (
        isinstance(hysteresis, bool)
        or not isinstance(hysteresis, int | float)
        or not math.isfinite(hysteresis)
        or not 0 <= hysteresis <= 1e9
    ):
        problems.append(
            _problem(
                "hysteresis", f"a finite number ≥ 0, in the threshold's unit (got {hysteresis!r})"
            )
        )
    else:
        values["hysteresis"] = float(hysteresis)
        if metric in RATE_METRICS and hysteresis > 1.0:
            problems.append(
                _problem("hysteresis", "a share: a fraction from 0 to 1 (0.01 is 1 pt)")
            )
    if metric == Metric.EVENTS and values.get("condition") in (
        Condition.RISES_BY,
        Condition.FALLS_BY,
    ):
        problems.append(_problem("condition", "silence (events) is judged above or below a count"))
    scope = values.get("scope")
    scope_value = values.get("scope_value")
    if scope not in Scope.values:
        problems.append(_problem("scope", f"one of {', '.join(Scope.values)}"))
    elif not isinstance(scope_value, str) or len(scope_value) > 120:
        problems.append(_problem("scope_value", "text of at most 120 characters"))
    else:
        try:
            where = parse_scope(scope, scope_value)
        except ValueError as exc:
            problems.append(_problem("scope_value", str(exc)))
        else:
            if scope == Scope.CELL and not alert_selectors.cell_known(fleet_id=fleet_id, **where):
                # A rule on a cell no version of the fleet has could never have data.
                problems.append(
                    _problem(
                        "scope_value",
                        f"the fleet's policy has no cell {'/'.join(where.values())} (in no "
                        "version, nor the draft)",
                    )
                )
        if scope == Scope.FLEET:
            values["scope_value"] = ""
    if not isinstance(values.get("enabled"), bool):
        problems.append(_problem("enabled", "true or false"))
    if problems:
        raise ValidationFailed("The alert rule is invalid.", details=problems)
    return values


def _save_unique_name(rule: AlertRule, update_fields: list[str] | None = None) -> None:
    """Save; a name the fleet already uses is a 409 (the unique constraint decides)."""
    try:
        with transaction.atomic():
            rule.save(update_fields=update_fields)
    except IntegrityError:
        raise Conflict(
            f"Fleet {rule.fleet.slug!r} already has a rule named {rule.name!r}.",
            code="duplicate_rule",
            details=[_problem("name", "already used in this fleet")],
        ) from None


def _rule_snapshot(rule: AlertRule) -> dict[str, Any]:
    return {name: getattr(rule, name) for name in RULE_FIELDS}


@transaction.atomic
def alert_rule_create(
    *,
    actor: Actor,
    fleet: Fleet,
    name: object,
    metric: object,
    condition: object,
    threshold: object,
    window_minutes: object = 10,
    min_samples: object = 50,
    for_seconds: object = 0,
    hysteresis: object = 0.0,
    scope: object = Scope.FLEET.value,
    scope_value: object = "",
    enabled: object = True,
) -> AlertRule:
    """Add a rule to the fleet; a second rule of the same name is refused (409)."""
    values = _clean_rule(
        {
            "name": name,
            "metric": metric,
            "condition": condition,
            "threshold": threshold,
            "window_minutes": window_minutes,
            "min_samples": min_samples,
            "for_seconds": for_seconds,
            "hysteresis": hysteresis,
            "scope": scope,
            "scope_value": scope_value,
            "enabled": enabled,
        },
        fleet_id=fleet.pk,
    )
    if AlertRule.objects.filter(fleet=fleet).count() >= MAX_RULES_PER_FLEET:
        raise Conflict(f"A fleet has at most {MAX_RULES_PER_FLEET} rules.", code="too_many_rules")
    rule = AlertRule(fleet=fleet, state_since=timezone.now(), **values)
    _save_unique_name(rule)
    audit_record(
        actor=actor,
        action="alert_rule.created",
        fleet=fleet,
        target=f"alert rule {rule.pk}",
        summary=f"Added alert rule {rule.name!r}",
        after=_rule_snapshot(rule),
    )
    logger.info("alert_rule.created fleet=%s rule=%d", fleet.slug, rule.pk)
    return rule


@transaction.atomic
def alert_rule_update(
    *, actor: Actor, fleet: Fleet, rule_id: int, revision: object, changes: dict[str, Any]
) -> AlertRule:
    """Change some of a rule's fields; a stale `revision` is refused (409), nothing saved."""
    rule = AlertRule.objects.select_for_update().filter(fleet=fleet, pk=rule_id).first()
    if rule is None:
        raise NotFound(f"Fleet {fleet.slug!r} has no alert rule {rule_id}.")
    if isinstance(revision, bool) or not isinstance(revision, int):
        raise ValidationFailed(
            "Send the rule's `revision` (from the last read) with the change.",
            details=[_problem("revision", "a whole number")],
        )
    if revision != rule.revision:
        raise Conflict(
            f"The rule changed since you read it (revision {revision}, now {rule.revision}).",
            code="stale_revision",
        )
    unknown = sorted(set(changes) - set(RULE_FIELDS))
    if unknown:
        raise ValidationFailed(
            f"Unknown field {unknown[0]!r}.", details=[_problem(n, "unknown") for n in unknown]
        )
    before = _rule_snapshot(rule)
    values = _clean_rule({**before, **changes}, fleet_id=fleet.pk)
    if values == before:
        return rule
    for name, value in values.items():
        setattr(rule, name, value)
    rule.revision += 1
    definition_changed = any(
        values[n] != before[n] for n in RULE_FIELDS if n not in ("name", "enabled")
    )
    update_fields = [*RULE_FIELDS, "revision"]
    if definition_changed or not rule.enabled:
        # A new definition is judged afresh: what fired under the old one no longer stands.
        rule.state, rule.state_since = AlertState.NO_DATA, timezone.now()
        update_fields += ["state", "state_since"]
    _save_unique_name(rule, update_fields=update_fields)
    audit_record(
        actor=actor,
        action="alert_rule.changed",
        fleet=fleet,
        target=f"alert rule {rule.pk}",
        summary=f"Changed alert rule {rule.name!r}",
        before=before,
        after=_rule_snapshot(rule),
    )
    transaction.on_commit(lambda: broadcast_alerts(fleet_id=fleet.pk))
    return rule


@transaction.atomic
def alert_rule_delete(*, actor: Actor, fleet: Fleet, rule_id: int) -> None:
    """Remove a rule (its history stays, by name); deleting it again is a no-op."""
    rule = AlertRule.objects.select_for_update().filter(fleet=fleet, pk=rule_id).first()
    if rule is None:
        return
    before = _rule_snapshot(rule)
    rule.delete()
    audit_record(
        actor=actor,
        action="alert_rule.deleted",
        fleet=fleet,
        target=f"alert rule {rule_id}",
        summary=f"Removed alert rule {before['name']!r}",
        before=before,
    )
    transaction.on_commit(lambda: broadcast_alerts(fleet_id=fleet.pk))


# --- webhooks -----------------------------------------------------------------------------------


@transaction.atomic
def alert_webhook_create(
    *, actor: Actor, fleet: Fleet, url: object, format: object = "json", rule_id: object = None
) -> AlertWebhook:
    """Add a webhook for every alert of the fleet (or one rule's); a repeat is refused (409)."""
    from urllib.parse import urlparse

    problems = []
    if not isinstance(url, str) or len(url) > 500:
        problems.append(_problem("url", "an http(s) URL of at most 500 characters"))
    else:
        parsed = urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            problems.append(_problem("url", "an http(s) URL"))
        elif (refusal := url_refusal(url)) is not None:
            problems.append(
                _problem(
                    "url",
                    f"a public address ({refusal}; ALERT_WEBHOOK_ALLOW_PRIVATE_NETWORKS allows "
                    "addresses inside the network)",
                )
            )
    if format not in WebhookFormat.values:
        problems.append(_problem("format", f"one of {', '.join(WebhookFormat.values)}"))
    rule = None
    if rule_id is not None:
        if isinstance(rule_id, bool) or not isinstance(rule_id, int):
            problems.append(_problem("rule_id", "a rule id or null"))
        else:
            rule = AlertRule.objects.filter(fleet=fleet, pk=rule_id).first()
            if rule is None:
                problems.append(_problem("rule_id", f"fleet {fleet.slug!r} has no rule {rule_id}"))
    if problems:
        raise ValidationFailed("The webhook is invalid.", details=problems)
    assert isinstance(url, str)
    assert isinstance(format, str)
    if AlertWebhook.objects.filter(fleet=fleet).count() >= MAX_WEBHOOKS_PER_FLEET:
        raise Conflict(
            f"A fleet has at most {MAX_WEBHOOKS_PER_FLEET} webhooks.", code="too_many_webhooks"
        )
    try:
        with transaction.atomic():
            webhook = AlertWebhook.objects.create(fleet=fleet, url=url, format=format, rule=rule)
    except IntegrityError:
        raise Conflict(
            "This fleet already posts to that URL in that format.",
            code="duplicate_webhook",
            details=[_problem("url", "already registered")],
        ) from None
    audit_record(
        actor=actor,
        action="alert_webhook.created",
        fleet=fleet,
        target=f"webhook {webhook.pk}",
        summary=f"Alerts of {rule.name if rule else 'every rule'} are posted to {url} ({format})",
    )
    return webhook


@transaction.atomic
def alert_webhook_delete(*, actor: Actor, fleet: Fleet, webhook_id: int) -> None:
    """Stop posting to a webhook (its delivery log stays); a repeat is a no-op."""
    webhook = AlertWebhook.objects.filter(fleet=fleet, pk=webhook_id).first()
    if webhook is None:
        return
    url = webhook.url
    webhook.delete()
    audit_record(
        actor=actor,
        action="alert_webhook.deleted",
        fleet=fleet,
        target=f"webhook {webhook_id}",
        summary=f"Alerts are no longer posted to {url}",
    )


# --- evaluation ---------------------------------------------------------------------------------


@dataclass(slots=True)
class Evaluation:
    """What one evaluation of a fleet did."""

    rules: int = 0
    events: list[AlertEvent] = field(default_factory=list)
    guard_action: str = ""


def _record(
    *,
    fleet_id: int,
    kind: str,
    message: str,
    now: datetime,
    rule: AlertRule | None = None,
    rollout: Rollout | None = None,
    before: str = "",
    after: str = "",
    judgement: Judgement | None = None,
) -> AlertEvent:
    return AlertEvent.objects.create(
        fleet_id=fleet_id,
        rule=rule,
        rule_name=rule.name if rule else "",
        rollout=rollout,
        kind=kind,
        state_before=before,
        state_after=after,
        value=judgement.value if judgement else None,
        previous=judgement.previous if judgement else None,
        samples=judgement.samples if judgement else 0,
        message=message[:500],
        at=now,
    )


def _next_state(rule: AlertRule, judgement: Judgement, now: datetime) -> str:
    outcome = judgement.outcome
    if outcome == "no_data":
        return AlertState.NO_DATA
    if outcome == "ok":
        if judgement.held and rule.state in (AlertState.PENDING, AlertState.FIRING):
            # Inside the hysteresis band: not cleared yet, and no nearer to firing either.
            return rule.state
        return AlertState.OK
    if rule.state == AlertState.FIRING:
        return AlertState.FIRING
    if rule.state == AlertState.PENDING:
        since = rule.state_since or now
        held = (now - since).total_seconds()
        return AlertState.FIRING if held >= rule.for_seconds else AlertState.PENDING
    return AlertState.FIRING if rule.for_seconds == 0 else AlertState.PENDING


def _apply(rule: AlertRule, judgement: Judgement, now: datetime) -> list[AlertEvent]:
    """Move the rule to its new state; record the changes people care about."""
    before = rule.state
    after = _next_state(rule, judgement, now)
    events: list[AlertEvent] = []

    def note(kind: str, state_before: str, state_after: str) -> None:
        events.append(
            _record(
                fleet_id=rule.fleet_id,
                kind=kind,
                message=judgement.message,
                now=now,
                rule=rule,
                before=state_before,
                after=state_after,
                judgement=judgement,
            )
        )

    if after != before:
        if after == AlertState.FIRING and before != AlertState.PENDING:
            note("pending", before, AlertState.PENDING)
            note("firing", AlertState.PENDING, AlertState.FIRING)
        elif after in (AlertState.PENDING, AlertState.FIRING):
            note(after, before, after)
        elif before == AlertState.FIRING:
            note("resolved" if after == AlertState.OK else "no_data", before, after)
        elif before == AlertState.PENDING:
            note("cleared", before, after)
        rule.state = after
        rule.state_since = now
    rule.last_value = judgement.value
    rule.last_previous = judgement.previous
    rule.last_samples = judgement.samples
    rule.last_message = judgement.message[:300]
    rule.last_evaluated_at = now
    return events  # the caller saves every rule's STATE_FIELDS in one statement


def _lock_fleet_evaluation(fleet_id: int) -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [_ADVISORY_CLASS, fleet_id])


def alerts_evaluate(*, fleet_id: int, now: datetime | None = None) -> Evaluation:
    """Judge every enabled rule of the fleet and its open rollout's guards, now."""
    from .guards import guards_evaluate

    now = now or timezone.now()
    result = Evaluation()
    notifications: list[AlertEvent] = []
    with transaction.atomic():
        _lock_fleet_evaluation(fleet_id)
        rules = list(AlertRule.objects.select_for_update().filter(fleet_id=fleet_id, enabled=True))
        guard_set = (
            RolloutGuardSet.objects.select_for_update(of=("self",))
            .select_related("rollout__candidate", "rollout__stable", "rollout__fleet")
            .prefetch_related("guards")
            .filter(rollout__fleet_id=fleet_id, rollout__state__in=["active", "paused"])
            .first()
        )
        if not rules and guard_set is None:
            return result
        spans = [timedelta(minutes=r.window_minutes * (2 if _compares(r) else 1)) for r in rules]
        if guard_set is not None:
            spans.append(timedelta(minutes=guard_set.window_minutes))
        floor = alert_selectors.minute_floor(now)
        # Histograms are heavy: read them only for the minutes a latency rule or guard looks at.
        latency_spans = [
            span for span, r in zip(spans, rules, strict=False) if r.metric in LATENCY_METRICS
        ]
        if guard_set is not None and any(
            g.metric in LATENCY_METRICS for g in guard_set.guards.all()
        ):
            latency_spans.append(timedelta(minutes=guard_set.window_minutes))
        rows = alert_selectors.recent_rows(
            fleet_id=fleet_id,
            since=floor - max(spans),
            until=now,
            latency_since=floor - max(latency_spans) if latency_spans else None,
        )
        budgets = (
            alert_selectors.cell_budgets(
                fleet_id=fleet_id, versions={row.policy_version for row in rows}
            )
            if latency_spans
            else {}
        )
        for rule in rules:
            judgement = _judge(rule, rows, budgets, now)
            events = _apply(rule, judgement, now)
            result.events.extend(events)
            notifications.extend(e for e in events if e.kind in ("firing", "resolved"))
        AlertRule.objects.bulk_update(rules, STATE_FIELDS)
        result.rules = len(rules)
        if guard_set is not None:
            guard_event = guards_evaluate(guard_set=guard_set, rows=rows, budgets=budgets, now=now)
            if guard_event is not None:
                result.events.append(guard_event)
                result.guard_action = guard_event.kind
                notifications.append(guard_event)
        deliveries = _deliveries_for(notifications)
        if result.events:
            last = result.events[-1]
            summary = {"kind": last.kind, "rule": last.rule_name, "message": last.message}
            transaction.on_commit(lambda: broadcast_alerts(fleet_id=fleet_id, event=summary))
        if deliveries:
            from ..alert_tasks import enqueue_delivery

            ids = [d.pk for d in deliveries]

            def start_deliveries() -> None:
                for delivery_id in ids:
                    enqueue_delivery(delivery_id)

            transaction.on_commit(start_deliveries)
    return result


def _compares(rule: AlertRule) -> bool:
    return rule.condition in (Condition.RISES_BY, Condition.FALLS_BY)


def _judge(rule: AlertRule, rows: list[Any], budgets: dict[Any, int], now: datetime) -> Judgement:
    where = parse_scope(rule.scope, rule.scope_value)
    start, end = alert_selectors.window_bounds(now, rule.window_minutes)
    with_latency = rule.metric in LATENCY_METRICS
    current = figures_of(rows, start=start, end=end, where=where, with_latency=with_latency)
    previous = None
    if _compares(rule):
        previous = figures_of(
            rows,
            start=start - timedelta(minutes=rule.window_minutes),
            end=start - timedelta(microseconds=1),
            where=where,
            with_latency=with_latency,
        )
    reported = True
    if rule.metric == Metric.EVENTS and current.events == 0:
        reported = alert_selectors.reported_before(fleet_id=rule.fleet_id, before=start)
    return judge_rule(
        metric=rule.metric,
        condition=rule.condition,
        threshold=rule.threshold,
        min_samples=rule.min_samples,
        current=current,
        previous=previous,
        budgets=budgets,
        reported_before=reported,
        hysteresis=rule.hysteresis,
    )


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
        body["rule"] = {"id": rule.pk, **_rule_snapshot(rule)}
    if event.rollout is not None:
        body["rollout"] = {
            "id": event.rollout_id,
            "candidate": event.rollout.candidate.number,
            "stable": event.rollout.stable.number,
            "stage": event.rollout.stage,
            "state": event.rollout.state,
        }
    return body


def _deliveries_for(events: list[AlertEvent]) -> list[WebhookDelivery]:
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


# --- seed ---------------------------------------------------------------------------------------

# Each with a hysteresis (in the threshold's unit) that keeps a value hovering at the threshold
# from flapping: a P95 that breached 1.0× its budget clears at 0.9×, a fallback rate that
# breached 5% clears at 4%. Counts (privacy violations, silence) clear as soon as they are
# not breached: any violation is one too many.
SEED_RULES: tuple[dict[str, Any], ...] = (
    {
        "name": "Cloud share jump",
        "metric": "cloud_share",
        "condition": "rises_by",
        "threshold": 0.2,
        "window_minutes": 5,
        "min_samples": 100,
        "hysteresis": 0.05,
    },
    {
        "name": "Device share α drop",
        "metric": "alpha",
        "condition": "falls_by",
        "threshold": 0.15,
        "window_minutes": 10,
        "min_samples": 100,
        "hysteresis": 0.05,
    },
    {
        "name": "Fallback rate above 5%",
        "metric": "fallback_rate",
        "condition": "above",
        "threshold": 0.05,
        "window_minutes": 10,
        "min_samples": 100,
        "for_seconds": 60,
        "hysteresis": 0.01,
    },
    {
        "name": "Error rate above 2%",
        "metric": "error_rate",
        "condition": "above",
        "threshold": 0.02,
        "window_minutes": 10,
        "min_samples": 100,
        "for_seconds": 60,
        "hysteresis": 0.005,
    },
    {
        "name": "Privacy violation",
        "metric": "privacy_violations",
        "condition": "above",
        "threshold": 0,
        "window_minutes": 10,
        "min_samples": 0,
    },
    {
        "name": "P95 over a cell's budget",
        "metric": "p95_budget",
        "condition": "above",
        "threshold": 1.0,
        "window_minutes": 10,
        "min_samples": 50,
        "for_seconds": 120,
        "hysteresis": 0.1,
    },
    {
        "name": "Fleet silent",
        "metric": "events",
        "condition": "below",
        "threshold": 1,
        "window_minutes": 10,
        "min_samples": 0,
    },
)


def alert_rules_seed(*, actor: Actor, fleet: Fleet) -> list[str]:
    """Give a fleet the sensible starting rules it lacks (by name); return what was added."""
    have = set(AlertRule.objects.filter(fleet=fleet).values_list("name", flat=True))
    added = []
    for rule in SEED_RULES:
        if rule["name"] not in have:
            alert_rule_create(actor=actor, fleet=fleet, **rule)
            added.append(f"alert rule {rule['name']!r}")
    return added
