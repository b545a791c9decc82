"""Routing figures for any window and grouping, read from rollups only (never raw events).

A window is a number of whole buckets ending with the current (partial) one: minute buckets for
windows up to 6 hours, hour buckets beyond. "1h" is the current minute and the 59 before it;
"24h" the current hour and the 23 before it. Long windows not grouped or filtered by cell read
the fleet-hour rollups, which have no cell dimension and so far fewer rows.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Final

import msgspec
from django.db import connection
from django.utils import timezone

from controlplane.exceptions import ValidationFailed

from ..models import FleetHourRollup, HourRollup, LandedBatch, MinuteRollup, RouteCounter
from ..prometheus import LATENCY_BUCKETS_MS, IngestGauges, RouteTotals
from ..sketch import SCORE_BINS, LatencySketch, merge_counts

MINUTE_RESOLUTION_UP_TO: Final = timedelta(hours=6)
MAX_WINDOW: Final = timedelta(days=400)
CELL_DIMENSIONS: Final = ("task_type", "latency_budget", "privacy_tier")
# What a caller may group and filter by, and the column each name reads.
GROUPS: Final = {
    "version": "policy_version",
    "cohort": "cohort",
    "route": "route",
    "task_type": "task_type",
    "latency_budget": "latency_budget",
    "privacy_tier": "privacy_tier",
}
_WINDOW_RE = re.compile(r"\A(\d{1,5})(m|h|d)\Z")
_UNITS = {"m": timedelta(minutes=1), "h": timedelta(hours=1), "d": timedelta(days=1)}
_DECODE = msgspec.json.Decoder(dict[str, Annotated[int, msgspec.Meta(ge=0)]])


def parse_window(text: str) -> timedelta:
    """`15m`, `1h`, `24h`, `7d`, …; raises ValidationFailed."""
    match = _WINDOW_RE.match(text.strip())
    if not match or int(match.group(1)) == 0:
        raise ValidationFailed(
            "`window` must look like 15m, 1h, 24h or 7d.", details=[{"field": "window"}]
        )
    window = int(match.group(1)) * _UNITS[match.group(2)]
    if window > MAX_WINDOW:
        raise ValidationFailed("`window` is at most 400d.", details=[{"field": "window"}])
    return window


def parse_group_by(text: str) -> list[str]:
    """`version,cohort,cell,route` → the grouping names (`cell` is the three cell dimensions)."""
    names: list[str] = []
    for raw in (part.strip() for part in text.split(",")):
        if not raw:
            continue
        expanded = list(CELL_DIMENSIONS) if raw == "cell" else [raw]
        for name in expanded:
            if name not in GROUPS:
                raise ValidationFailed(
                    f"Cannot group by {raw!r}; use version, cohort, cell, route, task_type, "
                    "latency_budget or privacy_tier.",
                    details=[{"field": "group_by"}],
                )
            if name not in names:
                names.append(name)
    return names


@dataclass(frozen=True, slots=True)
class WindowPlan:
    """Which rollup table and buckets answer a window."""

    table: str
    time_column: str
    start: datetime
    end: datetime
    resolution: str


def plan_window(window: timedelta, *, cell_level: bool, now: datetime) -> WindowPlan:
    """The table and first bucket for `window` ending now."""
    now = now.astimezone(UTC)
    if window <= MINUTE_RESOLUTION_UP_TO:
        current = now.replace(second=0, microsecond=0)
        start = current - (window - timedelta(minutes=1))
        return WindowPlan(MinuteRollup._meta.db_table, "minute", start, now, "minute")
    current = now.replace(minute=0, second=0, microsecond=0)
    hours = max(1, -(-window // timedelta(hours=1)))
    start = current - timedelta(hours=hours - 1)
    model = HourRollup if cell_level else FleetHourRollup
    return WindowPlan(model._meta.db_table, "hour", start, now, "hour")


@dataclass(slots=True)
class GroupFigures:
    """Summed figures of one group, with merged histograms."""

    key: tuple[Any, ...]
    events: int = 0
    device: int = 0
    cloud: int = 0
    draft_refine: int = 0
    fallback_cloud_to_device: int = 0
    fallback_device_to_cloud: int = 0
    cache_hits: int = 0
    errors: int = 0
    privacy_violations: int = 0
    latency_sum_ms: float = 0.0
    score_count: int = 0
    score_sum: float = 0.0
    latency_hist: dict[str, int] | None = None
    score_hist: dict[str, int] | None = None


def _ratio(part: float, whole: float) -> float | None:
    """part / whole; None when unknown: no whole, or a sum made infinite or NaN by a row stored
    before telemetry numbers had ranges (JSON has no infinity: the answer would be a 500)."""
    if not whole:
        return None
    value = part / whole
    return value if math.isfinite(value) else None


def _figures_out(
    figures: GroupFigures, group_by: Sequence[str], with_scores: bool
) -> dict[str, Any]:
    out: dict[str, Any] = dict(zip(group_by, figures.key, strict=True))
    events = figures.events
    fallbacks = figures.fallback_cloud_to_device + figures.fallback_device_to_cloud
    latency = {
        "mean": _ratio(figures.latency_sum_ms, events),
        "p50": None,
        "p95": None,
        "p99": None,
    }
    if figures.latency_hist:
        p50, p95, p99 = LatencySketch.from_json(figures.latency_hist).quantiles([0.5, 0.95, 0.99])
        latency.update({"p50": p50, "p95": p95, "p99": p99})
    out.update(
        {
            "events": events,
            "alpha": _ratio(figures.device, events),
            "cloud_share": _ratio(figures.cloud, events),
            "draft_refine_share": _ratio(figures.draft_refine, events),
            "fallback_rate": _ratio(fallbacks, events),
            "fallback_rates": {
                "cloud_to_device": _ratio(figures.fallback_cloud_to_device, events),
                "device_to_cloud": _ratio(figures.fallback_device_to_cloud, events),
            },
            "cache_hit_rate": _ratio(figures.cache_hits, events),
            "error_rate": _ratio(figures.errors, events),
            "privacy_violations": figures.privacy_violations,
            "latency_ms": latency,
            "score_mean": _ratio(figures.score_sum, figures.score_count),
        }
    )
    if with_scores:
        counts = [0] * SCORE_BINS
        for key, count in (figures.score_hist or {}).items():
            if key.isdigit() and int(key) < SCORE_BINS:  # a bad stored key is left out
                counts[int(key)] += count
        out["score_histogram"] = {"bin_width": 1 / SCORE_BINS, "counts": counts}
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
) -> dict[str, Any]:
    """α, shares, fallback, cache, error and privacy figures and latency percentiles per group.

    One query, over one rollup table; the histograms of a group's rows are merged in Python.
    """
    filters = {name: value for name, value in (filters or {}).items() if value is not None}
    for name in filters:
        if name not in GROUPS:
            raise ValidationFailed(f"Cannot filter by {name!r}.", details=[{"field": name}])
    cell_level = any(name in CELL_DIMENSIONS for name in [*group_by, *filters])
    plan = plan_window(window, cell_level=cell_level, now=now or timezone.now())
    group_columns = [GROUPS[name] for name in group_by]
    where = ["fleet_id = %s", f"{plan.time_column} >= %s"]
    params: list[Any] = [fleet_id, connection.ops.adapt_datetimefield_value(plan.start)]
    for name, value in filters.items():
        where.append(f"{GROUPS[name]} = %s")
        params.append(value)
    wanted_hist = ["latency_hist"] if with_latency else []
    if with_scores:
        wanted_hist.append("score_hist")
    columns = [
        *group_columns,
        "route",
        "events",
        "fallback_cloud_to_device",
        "fallback_device_to_cloud",
        "cache_hits",
        "errors",
        "privacy_violations",
        "latency_sum_ms",
        "score_count",
        "score_sum",
        *wanted_hist,
    ]
    sql = (
        f"SELECT {', '.join(columns)} FROM {plan.table} "  # noqa: S608  # names are ours
        f"WHERE {' AND '.join(where)}"
    )
    groups: dict[tuple[Any, ...], GroupFigures] = {}
    width = len(group_columns)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        for row in cursor.fetchall():
            key = tuple(row[:width])
            figures = groups.get(key)
            if figures is None:
                figures = groups[key] = GroupFigures(
                    key=key,
                    latency_hist={} if with_latency else None,
                    score_hist={} if with_scores else None,
                )
            (route, events, c2d, d2c, hits, errors, violations, lat_sum, s_count, s_sum) = row[
                width : width + 10
            ]
            figures.events += events
            if route == "device":
                figures.device += events
            elif route == "cloud":
                figures.cloud += events
            else:
                figures.draft_refine += events
            figures.fallback_cloud_to_device += c2d
            figures.fallback_device_to_cloud += d2c
            figures.cache_hits += hits
            figures.errors += errors
            figures.privacy_violations += violations
            figures.latency_sum_ms += lat_sum
            figures.score_count += s_count
            figures.score_sum += s_sum
            rest = row[width + 10 :]
            if with_latency and figures.latency_hist is not None:
                merge_counts(figures.latency_hist, _hist(rest[0]))
            if with_scores and figures.score_hist is not None:
                merge_counts(figures.score_hist, _hist(rest[-1]))
    ordered = sorted(groups.values(), key=lambda g: tuple(str(v) for v in g.key))
    return {
        "window": {"from": plan.start, "to": plan.end, "resolution": plan.resolution},
        "group_by": list(group_by),
        "filters": filters,
        "groups": [_figures_out(g, group_by, with_scores) for g in ordered],
    }


def _hist(value: Any) -> dict[str, int]:
    """A stored histogram column as `{"<bucket>": count}`, whatever the row holds.

    Counts are whole numbers >= 0; anything else (a row written by hand or by an older
    version) is left out, so one bad row never fails a read of the fleet, or of every fleet.
    Keys are checked where they are read as numbers (LatencySketch.from_json).
    """
    if isinstance(value, str | bytes):
        try:
            return _DECODE.decode(value)
        except msgspec.DecodeError:
            try:
                value = msgspec.json.decode(value)
            except msgspec.DecodeError:
                return {}
    if not isinstance(value, Mapping):
        return {}
    return {
        str(key): count
        for key, count in value.items()
        if isinstance(count, int) and not isinstance(count, bool) and count >= 0
    }


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


def stored_latency_bins(value: Any) -> list[int]:
    """A counter's stored `latency_le`, one whole count >= 0 per bound (a bad stored row reads
    as zeros, so that it cannot break the scrape of every fleet)."""
    width = len(LATENCY_BUCKETS_MS)
    if not isinstance(value, list) or len(value) != width:
        return [0] * width
    return [c if isinstance(c, int) and not isinstance(c, bool) and c >= 0 else 0 for c in value]


def _counters_with_slugs() -> list[tuple[RouteCounter, str]]:
    from routing_policies.models import Fleet

    counters = list(RouteCounter.objects.order_by("fleet_id", "route", "decided_by"))
    slugs = dict(
        Fleet.objects.filter(pk__in={c.fleet_id for c in counters}).values_list("pk", "slug")
    )
    return [(c, slugs.get(c.fleet_id, str(c.fleet_id))) for c in counters]


def ingest_gauges(now: datetime | None = None) -> IngestGauges:
    """Landed (accepted, unprocessed) batches and events, and the age of the oldest."""
    from django.db.models import Count, Min, Sum

    now = now or timezone.now()
    summary = LandedBatch.objects.aggregate(
        batches=Count("id"), events=Sum("event_count"), oldest=Min("received_at")
    )
    oldest = summary["oldest"]
    return IngestGauges(
        landed_batches=summary["batches"] or 0,
        landed_events=summary["events"] or 0,
        lag_seconds=max(0.0, (now - oldest).total_seconds()) if oldest else 0.0,
    )
