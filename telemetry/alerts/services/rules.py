"""Alert rules: add, change and remove a fleet's rules, each change checked and audited.

A rule's fields are checked together (one refusal names every bad field); a second rule of
the same name, a stale `revision` or one rule too many is a 409. The evaluation state on the
row is written only by `alerts.services.evaluation`.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from controlplane.exceptions import Conflict, NotFound, ValidationFailed
from controlplane.validators import text_problem
from routing_policies.models import Fleet
from routing_policies.policies.audit import Actor, audit_record

from .. import selectors as alert_selectors
from ..judging import RATE_METRICS, parse_scope
from ..limits import (
    MAX_FOR_SECONDS,
    MAX_HYSTERESIS,
    MAX_MIN_SAMPLES,
    MAX_RULE_NAME_LENGTH,
    MAX_SCOPE_VALUE_LENGTH,
    MAX_THRESHOLD,
    MAX_WINDOW_MINUTES,
    MIN_WINDOW_MINUTES,
)
from ..models import AlertRule, AlertState, Condition, Metric, Scope
from ..notify import broadcast_alerts
from .problems import field_problem

logger = logging.getLogger(__name__)

MAX_RULES_PER_FLEET = 100
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


def _whole(values: dict[str, Any], name: str, low: int, high: int, problems: list[Any]) -> None:
    value = values.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        problems.append(field_problem(name, f"a whole number from {low} to {high} (got {value!r})"))


def _rate_threshold_rule(values: dict[str, Any], threshold: float) -> str:
    """Why a share's threshold is refused: a share is 0 to 1, and so is a change's size (the
    condition, rises_by or falls_by, gives its direction, so a negative one means nothing)."""
    if values.get("condition") in (Condition.RISES_BY, Condition.FALLS_BY):
        return (
            "a change of a share, in points as a fraction from 0 to 1 (0.2 is 20 pts); "
            f"rises_by or falls_by gives its direction (got {threshold!r})"
        )
    return f"a share: a fraction from 0 to 1 (0.2 is 20%) (got {threshold!r})"


def _clean_rule(values: dict[str, Any], *, fleet_id: int) -> dict[str, Any]:
    """Check a rule's fields together; raise ValidationFailed naming every bad one."""
    problems: list[dict[str, str]] = []
    name = values.get("name")
    if not isinstance(name, str) or not name or len(name) > MAX_RULE_NAME_LENGTH:
        problems.append(field_problem("name", f"a name of 1 to {MAX_RULE_NAME_LENGTH} characters"))
    elif (untidy := text_problem(name)) is not None:
        # Refused, not trimmed, as ids are: the name shown is the name sent.
        problems.append(field_problem("name", f"{untidy} Nothing is trimmed."))
    # A metric of the wrong JSON type (a list, an object) is refused like an unknown one, and
    # the checks below see None: it is unhashable, so `in RATE_METRICS` would raise.
    metric = values.get("metric") if isinstance(values.get("metric"), str) else None
    if metric not in Metric.values:
        problems.append(field_problem("metric", f"one of {', '.join(Metric.values)}"))
    if values.get("condition") not in Condition.values:
        problems.append(field_problem("condition", f"one of {', '.join(Condition.values)}"))
    threshold = values.get("threshold")
    if (
        isinstance(threshold, bool)
        or not isinstance(threshold, int | float)
        or not math.isfinite(threshold)
        or not -MAX_THRESHOLD <= threshold <= MAX_THRESHOLD
    ):
        problems.append(field_problem("threshold", f"a finite number (got {threshold!r})"))
    else:
        values["threshold"] = float(threshold)
        if metric in RATE_METRICS and not 0.0 <= threshold <= 1.0:
            problems.append(field_problem("threshold", _rate_threshold_rule(values, threshold)))
    _whole(values, "window_minutes", MIN_WINDOW_MINUTES, MAX_WINDOW_MINUTES, problems)
    _whole(values, "min_samples", 0, MAX_MIN_SAMPLES, problems)
    _whole(values, "for_seconds", 0, MAX_FOR_SECONDS, problems)
    hysteresis = values.get("hysteresis")
    if (
        isinstance(hysteresis, bool)
        or not isinstance(hysteresis, int | float)
        or not math.isfinite(hysteresis)
        or not 0 <= hysteresis <= MAX_HYSTERESIS
    ):
        problems.append(
            field_problem(
                "hysteresis", f"a finite number ≥ 0, in the threshold's unit (got {hysteresis!r})"
            )
        )
    else:
        values["hysteresis"] = float(hysteresis)
        if metric in RATE_METRICS and hysteresis > 1.0:
            problems.append(
                field_problem("hysteresis", "a share: a fraction from 0 to 1 (0.01 is 1 pt)")
            )
    if metric == Metric.EVENTS and values.get("condition") in (
        Condition.RISES_BY,
        Condition.FALLS_BY,
    ):
        problems.append(
            field_problem("condition", "silence (events) is judged above or below a count")
        )
    scope = values.get("scope")
    scope_value = values.get("scope_value")
    if scope not in Scope.values:
        problems.append(field_problem("scope", f"one of {', '.join(Scope.values)}"))
    elif not isinstance(scope_value, str) or len(scope_value) > MAX_SCOPE_VALUE_LENGTH:
        problems.append(
            field_problem("scope_value", f"text of at most {MAX_SCOPE_VALUE_LENGTH} characters")
        )
    else:
        try:
            where = parse_scope(scope, scope_value)
        except ValueError as exc:
            problems.append(field_problem("scope_value", str(exc)))
        else:
            if scope == Scope.CELL and not alert_selectors.cell_known(fleet_id=fleet_id, **where):
                # A rule on a cell no version of the fleet has could never have data.
                problems.append(
                    field_problem(
                        "scope_value",
                        f"the fleet's policy has no cell {'/'.join(where.values())} (in no "
                        "version, nor the draft)",
                    )
                )
        if scope == Scope.FLEET:
            values["scope_value"] = ""
    if not isinstance(values.get("enabled"), bool):
        problems.append(field_problem("enabled", "true or false"))
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
            details=[field_problem("name", "already used in this fleet")],
        ) from None


def rule_snapshot(rule: AlertRule) -> dict[str, Any]:
    """The fields a person edits, as the audit log and webhook bodies show them."""
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
        after=rule_snapshot(rule),
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
            details=[field_problem("revision", "a whole number")],
        )
    if revision != rule.revision:
        raise Conflict(
            f"The rule changed since you read it (revision {revision}, now {rule.revision}).",
            code="stale_revision",
        )
    unknown = sorted(set(changes) - set(RULE_FIELDS))
    if unknown:
        raise ValidationFailed(
            f"Unknown field {unknown[0]!r}.", details=[field_problem(n, "unknown") for n in unknown]
        )
    before = rule_snapshot(rule)
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
        after=rule_snapshot(rule),
    )
    transaction.on_commit(lambda: broadcast_alerts(fleet_id=fleet.pk))
    return rule


@transaction.atomic
def alert_rule_delete(*, actor: Actor, fleet: Fleet, rule_id: int) -> None:
    """Remove a rule (its history stays, by name); deleting it again is a no-op."""
    rule = AlertRule.objects.select_for_update().filter(fleet=fleet, pk=rule_id).first()
    if rule is None:
        return
    before = rule_snapshot(rule)
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
