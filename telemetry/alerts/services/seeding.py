"""Starting rules: the sensible set a fleet gets, each by name (the demo seed, benchmarks)."""

from __future__ import annotations

from typing import Any

from routing_policies.models import Fleet
from routing_policies.services import Actor

from ..models import AlertRule
from .rules import alert_rule_create

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
