"""Reads for alerting: a fleet's recent minute rollups in one query, budgets, rules, history."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from routing_policies.models import PolicyCell, Segment

from ..models import MinuteRollup
from ..rollups import ALL_DEVICES, MINUTE, RollupRow, read_rows
from .judging import RATE_METRICS, format_value
from .models import (
    AlertEvent,
    AlertRule,
    AlertWebhook,
    RolloutGuard,
    RolloutGuardSet,
    WebhookDelivery,
)
from .sequential import QUANTILE_LABELS, format_amount

HISTORY_LIMIT = 100
# A guard's series point (sequential.series_point), as the API names its parts.
SERIES_FIELDS = ("at", "stage", "estimate", "lower", "upper", "state", "scope")
DELIVERY_LIMIT = 50
# The fields of a rule a person edits (`alerts.schemas`' rule input).
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
    "segment",
    "enabled",
)


def minute_floor(moment: datetime) -> datetime:
    """The start of `moment`'s minute bucket."""
    return moment.replace(second=0, microsecond=0)


def window_bounds(now: datetime, minutes: int) -> tuple[datetime, datetime]:
    """[first bucket, now] of a window of `minutes` whole buckets ending with the current one."""
    return minute_floor(now) - timedelta(minutes=minutes - 1), now


def recent_rows(
    *,
    fleet_id: int,
    since: datetime,
    until: datetime,
    latency_since: datetime | None = None,
    segment: int = ALL_DEVICES,
) -> list[RollupRow]:
    """The fleet's minute-rollup rows with `since <= minute <= until`, by minute, in one query;
    with their latency histograms from `latency_since` on (None: none); of one named segment
    (its id), or by default of every device."""
    rows = read_rows(
        MINUTE,
        fleet_id=fleet_id,
        since=since,
        until=until,
        latency=latency_since is not None,
        latency_since=latency_since,
        ordered=True,
        segment=segment,
    )
    return list(rows)


def segment_ids(*, fleet_id: int, names: set[str]) -> dict[str, int]:
    """The ids of the fleet's segments of these names (a name it has no segment of is left
    out); no query without names."""
    if not names:
        return {}
    return dict(
        Segment.objects.filter(fleet_id=fleet_id, name__in=sorted(names)).values_list("name", "pk")
    )


def cell_known(*, fleet_id: int, task_type: str, latency_budget: str, privacy_tier: str) -> bool:
    """True when some version of the fleet (published or the draft) has this cell."""
    return PolicyCell.objects.filter(
        version__fleet_id=fleet_id,
        task_type=task_type,
        latency_budget=latency_budget,
        privacy_tier=privacy_tier,
    ).exists()


def reported_before(*, fleet_id: int, before: datetime) -> bool:
    """True when the fleet has any minute rollup older than `before` (it reported once)."""
    return MinuteRollup.objects.filter(fleet_id=fleet_id, minute__lt=before).exists()


def cell_budgets(*, fleet_id: int, versions: set[int]) -> dict[tuple[int, str, str, str], int]:
    """(version, task type, latency budget, privacy tier) → the cell's latency budget in ms."""
    if not versions:
        return {}
    rows = PolicyCell.objects.filter(
        version__fleet_id=fleet_id, version__number__in=sorted(versions)
    ).values_list(
        "version__number", "task_type", "latency_budget", "privacy_tier", "latency_budget_ms"
    )
    return {(number, t, lb, p): budget for number, t, lb, p, budget in rows if number}


def fleets_to_evaluate() -> list[int]:
    """Fleets with an enabled rule or an open rollout carrying guards."""
    with_rules = set(
        AlertRule.objects.filter(enabled=True).values_list("fleet_id", flat=True).distinct()
    )
    with_guards = set(
        RolloutGuardSet.objects.filter(rollout__state__in=["active", "paused"]).values_list(
            "rollout__fleet_id", flat=True
        )
    )
    return sorted(with_rules | with_guards)


# --- pages and API ------------------------------------------------------------------------------


def rule_snapshot(rule: AlertRule) -> dict[str, Any]:
    """The fields a person edits, as the audit log and webhook bodies show them."""
    return {name: getattr(rule, name) for name in RULE_FIELDS}


def rule_list(*, fleet_id: int) -> list[AlertRule]:
    """The fleet's rules by name (one query)."""
    return list(AlertRule.objects.filter(fleet_id=fleet_id).order_by("name"))


def alert_history(*, fleet_id: int, limit: int = HISTORY_LIMIT) -> list[AlertEvent]:
    """The fleet's latest state changes and guard actions, newest first (one query)."""
    return list(AlertEvent.objects.filter(fleet_id=fleet_id).order_by("-at", "-id")[:limit])


def webhook_list(*, fleet_id: int) -> list[AlertWebhook]:
    """The fleet's webhooks (one query)."""
    return list(AlertWebhook.objects.filter(fleet_id=fleet_id).order_by("id"))


def delivery_list(*, fleet_id: int, limit: int = DELIVERY_LIMIT) -> list[WebhookDelivery]:
    """The latest deliveries with every attempt, newest first (one query)."""
    return list(
        WebhookDelivery.objects.filter(fleet_id=fleet_id).order_by("-created_at", "-id")[:limit]
    )


def firing_alerts(*, fleet_ids: list[int] | None = None) -> list[dict[str, Any]]:
    """Firing rules (all fleets, or these), for the banner: one query."""
    rules = AlertRule.objects.filter(state="firing", enabled=True).select_related("fleet")
    if fleet_ids is not None:
        rules = rules.filter(fleet_id__in=fleet_ids)
    return [
        {
            "rule_id": rule.pk,
            "fleet": rule.fleet.slug,
            "name": rule.name,
            "message": rule.last_message,
            "since": rule.state_since.isoformat() if rule.state_since else None,
        }
        for rule in rules.order_by("-state_since", "id")
    ]


def firing_count(*, fleet_id: int) -> int:
    """How many of the fleet's rules fire now (for the dashboard's big figure)."""
    return AlertRule.objects.filter(fleet_id=fleet_id, state="firing", enabled=True).count()


def guard_status(*, rollout_id: int) -> dict[str, Any] | None:
    """A rollout's guards and their last verdicts, or None when it has none (two queries)."""
    guard_set = (
        RolloutGuardSet.objects.select_related("rollout").filter(rollout_id=rollout_id).first()
    )
    if guard_set is None:
        return None
    verdict = guard_set.verdict
    if not guard_set.rollout.is_open and verdict != RolloutGuardSet.Verdict.ROLLED_BACK:
        # Ended by a person (or completed): the last judgement no longer stands.
        verdict = RolloutGuardSet.Verdict.FINISHED
    return {
        "window_minutes": guard_set.window_minutes,
        "bake_minutes": {int(k): v for k, v in guard_set.bake_minutes.items()},
        "auto_advance": guard_set.auto_advance,
        "verdict": verdict,
        "verdict_label": RolloutGuardSet.Verdict(verdict).label,
        "reason": guard_set.verdict_reason,
        "quiet_since": guard_set.quiet_since,
        "evaluated_at": guard_set.evaluated_at,
        "min_devices": guard_set.min_devices,
        "min_events": guard_set.min_events,
        "stage_limit_minutes": guard_set.stage_limit_minutes,
        "max_extensions": guard_set.max_extensions,
        "extensions_used": guard_set.extensions_used,
        "on_expiry": guard_set.on_expiry,
        "sample_ratios": guard_set.sample_ratios,
        "guards": [
            {
                "kind": guard.kind,
                "metric": guard.metric,
                "metric_label": guard.get_metric_display(),
                "comparison": guard.comparison,
                "comparison_label": guard.get_comparison_display(),
                "threshold": guard.threshold,
                "threshold_text": _guard_threshold_text(guard),
                "min_samples": guard.min_samples,
                "state": guard.state,
                "candidate_value": guard.candidate_value,
                "stable_value": guard.stable_value,
                "candidate_samples": guard.candidate_samples,
                "stable_samples": guard.stable_samples,
                "message": guard.message,
                **_sequential_out(guard),
            }
            for guard in guard_set.guards.all()
        ],
    }


def _sequential_out(guard: RolloutGuard) -> dict[str, Any]:
    """A statistical guard's interval and its series (null and empty for a fixed guard); its
    latency metric compares the cohorts' quantiles, not a budget."""
    label = (
        {"metric_label": QUANTILE_LABELS[guard.metric]}
        if (guard.kind == "sequential" and guard.metric in QUANTILE_LABELS)
        else {}
    )
    return {
        **label,
        "confidence": guard.confidence if guard.kind == "sequential" else None,
        "per_cell": guard.per_cell if guard.kind == "sequential" else None,
        "estimate": guard.estimate,
        "lower": guard.lower,
        "upper": guard.upper,
        "scope": guard.scope,
        "series": [dict(zip(SERIES_FIELDS, point, strict=False)) for point in guard.series],
        # When it can decide at the current rate and what would shorten it (null: decided).
        "decide": (guard.decide or None) if guard.kind == "sequential" else None,
    }


def _guard_threshold_text(guard: RolloutGuard) -> str:
    """`2.0 pts`, `1.00× budget`, `0`, `+5.0 pts tolerated` as people read a guard's limit."""
    metric, comparison, threshold = guard.metric, guard.comparison, guard.threshold
    if guard.kind == "sequential":
        return f"{format_amount(metric, threshold)} tolerated at {guard.confidence * 100:g}%"
    if comparison == "above_stable_by" and metric in RATE_METRICS:
        return f"{threshold * 100:.1f} pts"
    return format_value(metric, threshold)
