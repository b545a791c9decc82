"""Alert rules: add, change and remove a fleet's rules, each change checked and audited.

Each field's type and range is checked by the rule input serializers (`alerts.schemas`),
which the API and the alerts page both run; here only what the fields say together and what
needs the database (one refusal names every bad field). A second rule of the same name, a
stale `revision` or one rule too many is a 409. The evaluation state on the
row is written only by `alerts.services.evaluation`.
"""

from __future__ import annotations

import logging
from typing import Any, Required, TypedDict, Unpack

from django.db import transaction
from django.utils import timezone

from controlplane.exceptions import Conflict, NotFound, ValidationFailed
from routing_policies.models import Fleet
from routing_policies.services import Actor, audit_record

from .. import selectors as alert_selectors
from ..judging import RATE_METRICS, parse_scope
from ..models import AlertRule, AlertState, Condition, Metric, Scope
from ..notify import broadcast_alerts
from ..selectors import RULE_FIELDS, rule_snapshot
from .problems import field_problem, unique_or_conflict

logger = logging.getLogger(__name__)

MAX_RULES_PER_FLEET = 100
# The headline of every refusal of a rule's fields, the input serializer's and these checks'.
RULE_INVALID = "The alert rule is invalid."


def _rate_threshold_rule(condition: str, threshold: float) -> str:
    """Why a share's threshold is refused: a share is 0 to 1, and so is a change's size (the
    condition, rises_by or falls_by, gives its direction, so a negative one means nothing)."""
    if condition in (Condition.RISES_BY, Condition.FALLS_BY):
        return (
            "a change of a share, in points as a fraction from 0 to 1 (0.2 is 20 pts); "
            f"rises_by or falls_by gives its direction (got {threshold!r})"
        )
    return f"a share: a fraction from 0 to 1 (0.2 is 20%) (got {threshold!r})"


def _scope_problem(scope: str, scope_value: str, *, fleet_id: int) -> dict[str, str] | None:
    """Why a scope value is refused for its scope, or None (a cell the fleet never had, too)."""
    try:
        where = parse_scope(scope, scope_value)
    except ValueError as exc:
        return field_problem("scope_value", str(exc))
    if scope == Scope.CELL and not alert_selectors.cell_known(fleet_id=fleet_id, **where):
        # A rule on a cell no version of the fleet has could never have data.
        return field_problem(
            "scope_value",
            f"the fleet's policy has no cell {'/'.join(where.values())} (in no version, nor "
            "the draft)",
        )
    return None


def _clean_rule(values: dict[str, Any], *, fleet_id: int) -> dict[str, Any]:
    """Check what a rule's fields say together (each field's own type and range are the input
    serializer's, `alerts.schemas`); raise ValidationFailed naming every bad one."""
    problems: list[dict[str, str]] = []
    metric, condition = values["metric"], values["condition"]
    threshold, hysteresis = float(values["threshold"]), float(values["hysteresis"])
    values["threshold"], values["hysteresis"] = threshold, hysteresis
    if metric in RATE_METRICS and not 0.0 <= threshold <= 1.0:
        problems.append(field_problem("threshold", _rate_threshold_rule(condition, threshold)))
    if metric in RATE_METRICS and hysteresis > 1.0:
        problems.append(
            field_problem("hysteresis", "a share: a fraction from 0 to 1 (0.01 is 1 pt)")
        )
    if metric == Metric.EVENTS and condition in (Condition.RISES_BY, Condition.FALLS_BY):
        problems.append(
            field_problem("condition", "silence (events) is judged above or below a count")
        )
    if values["scope"] == Scope.FLEET:
        values["scope_value"] = ""
    elif found := _scope_problem(values["scope"], values["scope_value"], fleet_id=fleet_id):
        problems.append(found)
    segment = values.get("segment") or ""
    values["segment"] = segment
    if segment and not alert_selectors.segment_ids(fleet_id=fleet_id, names={segment}):
        problems.append(field_problem("segment", f"this fleet has no segment {segment!r}"))
    if problems:
        raise ValidationFailed(RULE_INVALID, details=problems)
    return values


def _save_unique_name(rule: AlertRule, update_fields: list[str] | None = None) -> None:
    """Save; a name the fleet already uses is a 409 (the unique constraint decides)."""
    unique_or_conflict(
        lambda: rule.save(update_fields=update_fields),
        message=f"Fleet {rule.fleet.slug!r} already has a rule named {rule.name!r}.",
        code="duplicate_rule",
        field="name",
        problem="already used in this fleet",
    )


_AUDIT_VERBS = {"created": "Added", "changed": "Changed", "deleted": "Removed"}


def _rule_audited(
    *, actor: Actor, fleet: Fleet, rule: AlertRule, action: str, before: Any = None
) -> None:
    """Audit a rule's `action` (created, changed, deleted): its fields `before`, and after
    unless it is gone (`rule_snapshot`)."""
    audit_record(
        actor=actor,
        action=f"alert_rule.{action}",
        fleet=fleet,
        target=f"alert rule {rule.pk}",
        summary=f"{_AUDIT_VERBS[action]} alert rule {rule.name!r}",
        before=before,
        after=None if action == "deleted" else rule_snapshot(rule),
    )


class RuleSettings(TypedDict, total=False):
    """A rule's fields that have a default (`RULE_DEFAULTS`), as the input serializer took
    them (`alerts.schemas`)."""

    window_minutes: int
    min_samples: int
    for_seconds: int
    hysteresis: float
    scope: str
    scope_value: str
    segment: str
    enabled: bool


class RuleFields(RuleSettings):
    """A new rule's fields: its name, metric, condition and threshold, and any settings."""

    name: Required[str]
    metric: Required[str]
    condition: Required[str]
    threshold: Required[float]


class RuleChanges(RuleSettings, total=False):
    """The fields a change sends: any of a rule's."""

    name: str
    metric: str
    condition: str
    threshold: float


RULE_DEFAULTS: RuleSettings = {
    "window_minutes": 10,
    "min_samples": 50,
    "for_seconds": 0,
    "hysteresis": 0.0,
    "scope": Scope.FLEET.value,
    "scope_value": "",
    "segment": "",
    "enabled": True,
}


@transaction.atomic
def alert_rule_create(*, actor: Actor, fleet: Fleet, **fields: Unpack[RuleFields]) -> AlertRule:
    """Add a rule to the fleet, its fields as the input serializer (`alerts.schemas`) took
    them (the rest `RULE_DEFAULTS`); a second rule of the same name is refused (409)."""
    values = _clean_rule({**RULE_DEFAULTS, **fields}, fleet_id=fleet.pk)
    if AlertRule.objects.filter(fleet=fleet).count() >= MAX_RULES_PER_FLEET:
        raise Conflict(f"A fleet has at most {MAX_RULES_PER_FLEET} rules.", code="too_many_rules")
    rule = AlertRule(fleet=fleet, state_since=timezone.now(), **values)
    _save_unique_name(rule)
    _rule_audited(actor=actor, fleet=fleet, rule=rule, action="created")
    logger.info("alert_rule.created fleet=%s rule=%d", fleet.slug, rule.pk)
    return rule


@transaction.atomic
def alert_rule_update(
    *, actor: Actor, fleet: Fleet, rule_id: int, revision: int, **changes: Unpack[RuleChanges]
) -> AlertRule:
    """Change some of a rule's fields (those sent, as `AlertRuleUpdateSerializer` took them);
    a stale `revision` is refused (409), nothing saved."""
    rule = AlertRule.objects.select_for_update().filter(fleet=fleet, pk=rule_id).first()
    if rule is None:
        raise NotFound(f"Fleet {fleet.slug!r} has no alert rule {rule_id}.")
    if revision != rule.revision:
        raise Conflict(
            f"The rule changed since you read it (revision {revision}, now {rule.revision}).",
            code="stale_revision",
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
    _rule_audited(actor=actor, fleet=fleet, rule=rule, action="changed", before=before)
    transaction.on_commit(lambda: broadcast_alerts(fleet_id=fleet.pk))
    return rule


@transaction.atomic
def alert_rule_delete(*, actor: Actor, fleet: Fleet, rule_id: int) -> None:
    """Remove a rule (its history stays, by name); deleting it again is a no-op."""
    rule = AlertRule.objects.select_for_update().filter(fleet=fleet, pk=rule_id).first()
    if rule is None:
        return
    _rule_audited(actor=actor, fleet=fleet, rule=rule, action="deleted", before=rule_snapshot(rule))
    rule.delete()
    transaction.on_commit(lambda: broadcast_alerts(fleet_id=fleet.pk))
