"""Evaluating a fleet's alert rules and its open rollout's guards.

Evaluation is one transaction per fleet under a PostgreSQL advisory lock (two evaluations of a
fleet never interleave; the second waits and then sees the newer rollups): one query reads the
fleet's minute rollups for the longest window any rule or guard needs, every rule is judged
from those rows in memory, state changes are recorded as history, and the notifications
(banner, webhooks) go out after the commit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from ...rollups import ALL_DEVICES
from .. import selectors as alert_selectors
from ..judging import LATENCY_METRICS, Judgement, figures_of, judge_rule, parse_scope
from ..models import (
    AlertEvent,
    AlertRule,
    AlertState,
    Condition,
    GuardKind,
    Metric,
    RolloutGuardSet,
)
from ..notify import broadcast_alerts
from .delivery import deliveries_start_on_commit
from .guards import guards_evaluate
from .webhooks import webhook_deliveries_create

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


@dataclass(slots=True)
class Evaluation:
    """What one evaluation of a fleet did."""

    rules: int = 0
    events: list[AlertEvent] = field(default_factory=list)
    guard_action: str = ""


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
            AlertEvent.objects.create(
                fleet_id=rule.fleet_id,
                rule=rule,
                rule_name=rule.name,
                kind=kind,
                state_before=state_before,
                state_after=state_after,
                value=judgement.value,
                previous=judgement.previous,
                samples=judgement.samples,
                message=judgement.message[:500],
                at=now,
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
        floor = alert_selectors.minute_floor(now)
        guard_span = timedelta(0)
        if guard_set is not None:
            guard_span = timedelta(minutes=guard_set.window_minutes)
            if any(g.kind == GuardKind.SEQUENTIAL for g in guard_set.guards.all()):
                # Statistical guards judge every row since the stage began (the evidence
                # accumulates, docs/alerts.md), not the fixed guards' window.
                stage_start = alert_selectors.minute_floor(guard_set.rollout.stage_changed_at)
                guard_span = max(guard_span, floor - stage_start)
            spans.append(guard_span)
        # Histograms are heavy: read them only for the minutes a latency rule or guard looks at.
        latency_spans = [
            span for span, r in zip(spans, rules, strict=False) if r.metric in LATENCY_METRICS
        ]
        if guard_set is not None and any(
            g.metric in LATENCY_METRICS for g in guard_set.guards.all()
        ):
            latency_spans.append(guard_span)
        # A guarded rollout scoped to a segment compares its arms inside that segment.
        guard_segment = guard_set.rollout.segment_name if guard_set is not None else ""
        rows_of = _rows_by_segment(
            fleet_id,
            {rule.segment for rule in rules} | {guard_segment},
            since=floor - max(spans),
            until=now,
            latency_since=floor - max(latency_spans) if latency_spans else None,
        )
        budgets = (
            alert_selectors.cell_budgets(
                fleet_id=fleet_id,
                versions={row.policy_version for rows in rows_of.values() for row in rows or ()},
            )
            if latency_spans
            else {}
        )
        for rule in rules:
            rows = rows_of[rule.segment]
            judgement = (
                _judge(rule, rows, budgets, now) if rows is not None else _gone(rule.segment)
            )
            events = _apply(rule, judgement, now)
            result.events.extend(events)
            notifications.extend(e for e in events if e.kind in ("firing", "resolved"))
        AlertRule.objects.bulk_update(rules, STATE_FIELDS)
        result.rules = len(rules)
        if guard_set is not None:
            guard_event = guards_evaluate(
                guard_set=guard_set, rows=rows_of[guard_segment] or [], budgets=budgets, now=now
            )
            if guard_event is not None:
                result.events.append(guard_event)
                result.guard_action = guard_event.kind
                notifications.append(guard_event)
        deliveries = webhook_deliveries_create(events=notifications)
        if result.events:
            last = result.events[-1]
            summary = {"kind": last.kind, "rule": last.rule_name, "message": last.message}
            transaction.on_commit(lambda: broadcast_alerts(fleet_id=fleet_id, event=summary))
        deliveries_start_on_commit(deliveries)
    return result


def _rows_by_segment(
    fleet_id: int,
    names: set[str],
    *,
    since: datetime,
    until: datetime,
    latency_since: datetime | None,
) -> dict[str, list[Any] | None]:
    """The minute rows each segment name needs ("": every device), one query per segment;
    None for a name that is no longer one of the fleet's segments (renamed or deleted)."""
    ids = alert_selectors.segment_ids(fleet_id=fleet_id, names=names - {""})
    out: dict[str, list[Any] | None] = {}
    for name in sorted(names):
        if name and name not in ids:
            out[name] = None
            continue
        out[name] = alert_selectors.recent_rows(
            fleet_id=fleet_id,
            since=since,
            until=until,
            latency_since=latency_since,
            segment=ids.get(name, ALL_DEVICES),
        )
    return out


def _gone(segment: str) -> Judgement:
    """A rule on a segment the fleet no longer has (renamed or deleted): no data, and why."""
    return Judgement(
        "no_data",
        None,
        None,
        0,
        f"segment {segment!r} is no longer one of the fleet's segments (renamed or deleted): "
        "nothing to judge; point the rule at a segment, or at every device",
    )


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
        rule, current=current, previous=previous, budgets=budgets, reported_before=reported
    )
