"""Routing figures for any window and grouping, read from rollups only (never raw events).

The window's buckets and table come from `telemetry.rollups.plan_window` (minute buckets up to
6 hours, hour buckets beyond; long windows not grouped or filtered by cell read the fleet-hour
rollups, which have no cell dimension and so far fewer rows); the rows from `read_rows`, folded
per group into `Figures`. Also: the Prometheus counters per fleet and route.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from operator import attrgetter
from typing import Any, Final

from django.utils import timezone

from controlplane.exceptions import ValidationFailed
from routing_policies.models import Fleet
from routing_policies.selectors import compared_rollout

from ..models import RouteCounter
from ..rollups import CELL_DIMENSIONS, Figures, RollupRow, figures_at, plan_window, read_rows
from ..rollups.cohorts import CohortArms
from ..rollups.prometheus import RouteTotals, stored_latency_bins
from ..rollups.segments import segment_named
from ..rollups.sketch import SCORE_BINS

# What a caller may group and filter by, and the column each name reads.
GROUPS: Final = {
    "version": "policy_version",
    "cohort": "cohort",
    "route": "route",
    "task_type": "task_type",
    "latency_budget": "latency_budget",
    "privacy_tier": "privacy_tier",
}


def _group_out(
    key: tuple[Any, ...], figures: Figures, group_by: Sequence[str], with_scores: bool
) -> dict[str, Any]:
    out: dict[str, Any] = dict(zip(group_by, key, strict=True))
    headline = figures.headline()
    headline["latency_ms"] = {"mean": figures.latency_mean(), **headline["latency_ms"]}
    out.update(headline)
    out["score_mean"] = figures.score_mean()
    out["tokens_per_task"] = figures.tokens_per_task()
    if with_scores:
        out["score_histogram"] = {
            "bin_width": 1 / SCORE_BINS,
            "counts": figures.score_distribution(),
        }
    return out


def fleet_metrics(
    *,
    fleet_id: int,
    window: timedelta,
    group_by: Sequence[str] = (),
    filters: Mapping[str, Any] | None = None,
    with_latency: bool = True,
    with_scores: bool = False,
    now: datetime | None = None,
    segment: str | None = None,
) -> dict[str, Any]:
    """α, shares, fallback, cache, error and privacy figures, latency percentiles and tokens
    per task per group; of one named segment's devices when `segment` names one of the
    fleet's (refused, naming the field, otherwise).

    One query, over one rollup table (and, grouped or filtered by cohort, one for the rollout
    whose arms the cohorts are); the histograms of a group's rows are merged in Python.
    """
    filters = {name: value for name, value in (filters or {}).items() if value is not None}
    for name in filters:
        if name not in GROUPS:
            raise ValidationFailed(f"Cannot filter by {name!r}.", details=[{"field": name}])
    segment_id = segment_named(fleet_id, segment)
    cell_level = any(name in CELL_DIMENSIONS for name in [*group_by, *filters])
    plan = plan_window(window, now=now or timezone.now())
    where = {GROUPS[name]: value for name, value in filters.items()}
    # A cohort is an arm of the rollout the window compares (rollups/cohorts.py), as on the
    # dashboard: its attribution and, with a rollout, that arm's version.
    arms: CohortArms | None = None
    if "cohort" in group_by or "cohort" in filters:
        arms = CohortArms.of_rollout(compared_rollout(fleet_id, plan.start))
    wanted = arms.version(filters["cohort"]) if arms and "cohort" in filters else None
    if wanted is not None and where.setdefault("policy_version", wanted) != wanted:
        rows: Iterable[RollupRow] = ()  # a version outside the cohort: nothing to read
    else:
        rows = read_rows(
            plan.level(cell_level=cell_level),
            fleet_id=fleet_id,
            since=plan.start,
            where=where,
            latency=with_latency,
            scores=with_scores,
            segment=segment_id,
        )
    key_of = _group_key(group_by, arms)
    groups: dict[tuple[Any, ...], Figures] = {}
    for row in rows:
        figures_at(groups, key_of(row)).add(row)
    ordered = sorted(groups.items(), key=lambda item: tuple(str(v) for v in item[0]))
    return {
        "window": {"from": plan.start, "to": plan.end, "resolution": plan.resolution},
        "group_by": list(group_by),
        "filters": filters | ({} if segment is None else {"segment": segment}),
        **(
            {}
            if arms is None
            else {"cohorts": {"stable": arms.stable, "candidate": arms.candidate}}
        ),
        "groups": [_group_out(key, g, group_by, with_scores) for key, g in ordered],
    }


def _group_key(
    group_by: Sequence[str], arms: CohortArms | None
) -> Callable[[RollupRow], tuple[Any, ...]]:
    """A row's group: its value of each `group_by` name (a cohort as `arms` say)."""
    getters = [attrgetter(GROUPS[name]) for name in group_by if name != "cohort"]

    def key_of(row: RollupRow) -> tuple[Any, ...]:
        values = [get(row) for get in getters]
        if "cohort" in group_by and arms is not None:
            values.insert(group_by.index("cohort"), arms.cohort_of(row.cohort, row.policy_version))
        return tuple(values)

    return key_of


# --- Prometheus ---------------------------------------------------------------------------------


def route_totals() -> list[RouteTotals]:
    """Every fleet × route × deciding step's totals since the start."""
    return [
        RouteTotals(
            fleet=slug,
            route=counter.route,
            decided_by=counter.decided_by,
            events=counter.events,
            errors=counter.errors,
            fallbacks=counter.fallbacks,
            cache_hits=counter.cache_hits,
            privacy_violations=counter.privacy_violations,
            latency_sum_ms=counter.latency_sum_ms,
            latency_bins=stored_latency_bins(counter.latency_le),
        )
        for counter, slug in _counters_with_slugs()
    ]


def _counters_with_slugs() -> list[tuple[RouteCounter, str]]:
    counters = list(RouteCounter.objects.order_by("fleet_id", "route", "decided_by"))
    slugs = dict(
        Fleet.objects.filter(pk__in={c.fleet_id for c in counters}).values_list("pk", "slug")
    )
    return [(c, slugs.get(c.fleet_id, str(c.fleet_id))) for c in counters]
