"""Everything a fleet's dashboard draws, for one view (window and filters), from rollups only.

The minute rollups answer 15 minutes and an hour, in one scan; 24 hours and 7 days read the
fleet-hour rollups for the series and the hour rollups (which keep the cell) for the grid, or
the hour rollups alone when filtered by task type. Each row is folded once into the few
accumulators the charts need, per time bucket × route × cohort and per cell; the summary,
per-route and per-cohort figures are merged from those small accumulators afterwards.
The policy cells' budgets, the time-axis markers (publishes, switches, rollout stages) and fleet
convergence add a handful of small indexed queries; the number is pinned in the tests.

The payload is plain JSON (ISO times, lists aligned with `buckets`), so the same dict is the
API's answer, the page's first paint and the live feed's message.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final
from urllib.parse import urlencode

from django.db import connection
from django.db.models import Count
from django.utils import timezone

from controlplane.exceptions import ValidationFailed
from routing_policies.assignment import FleetAssignment
from routing_policies.models import AuditEntry, Device, Fleet, FleetRouting, PolicyCell
from routing_policies.selectors.rollout import (
    candidate_cohort_count,
    online_q,
    open_rollout,
    rollout_out,
)

from ..models import Cohort, FleetHourRollup, HourRollup, MinuteRollup
from ..sketch import LatencySketch, merge_counts
from .metrics import _hist

WINDOWS: Final = {
    "15m": timedelta(minutes=15),
    "1h": timedelta(hours=1),
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
}
DEFAULT_WINDOW: Final = "1h"
FILTERS: Final = ("version", "cohort", "task_type", "route")
ROUTES: Final = ("device", "cloud", "draft_refine")
COHORTS: Final = (Cohort.STABLE.value, Cohort.CANDIDATE.value)
MAX_VERSION: Final = 2**31 - 1
_NAME_RE = re.compile(r"\A[a-z0-9][a-z0-9_-]{0,31}\Z")
# Audit actions drawn on the time axis, and the marker kind each becomes.
MARKER_ACTIONS: Final = {
    "policy_version.published": "published",
    "fleet.switched": "switched",
    "rollout.started": "rollout",
    "rollout.advanced": "rollout",
    "rollout.paused": "rollout",
    "rollout.resumed": "rollout",
    "rollout.completed": "rollout",
    "rollout.rolled_back": "rolled_back",
}
MAX_MARKERS: Final = 200


@dataclass(frozen=True, slots=True)
class DashboardView:
    """What one dashboard shows: a window and optional filters. Hashable; `key` names it."""

    window: str = DEFAULT_WINDOW
    version: int | None = None
    cohort: str | None = None
    task_type: str | None = None
    route: str | None = None

    @property
    def key(self) -> str:
        """A canonical text for this view (the same view always gives the same key)."""
        return urlencode({"window": self.window, **self.filters})

    @property
    def filters(self) -> dict[str, Any]:
        """The filters that are set, by name."""
        return {name: getattr(self, name) for name in FILTERS if getattr(self, name) is not None}

    def as_json(self) -> dict[str, Any]:
        """The view as the API and the feed echo it."""
        return {"window": self.window, **{name: getattr(self, name) for name in FILTERS}}


def _field_error(name: str, message: str) -> ValidationFailed:
    return ValidationFailed(message, details=[{"field": name, "message": message}])


def parse_view(params: Mapping[str, Any], *, strict: bool = True) -> DashboardView:
    """A view from query parameters or a feed message; a clear ValidationFailed otherwise.

    With `strict`, a parameter that is not a window or a filter is refused too (a typo such as
    `?tasktype=voice` must not silently show the unfiltered fleet).
    """
    if strict:
        unknown = sorted(str(name) for name in params if name not in ("window", *FILTERS))
        if unknown:
            raise ValidationFailed(
                f"Unknown parameter {unknown[0]!r}; use window, {', '.join(FILTERS)}.",
                details=[{"field": name, "message": "unknown parameter"} for name in unknown],
            )
    raw_window = params.get("window")
    window = DEFAULT_WINDOW if raw_window in (None, "") else raw_window
    if not isinstance(window, str) or window not in WINDOWS:
        raise _field_error("window", f"`window` must be one of {', '.join(WINDOWS)}.")
    values: dict[str, Any] = {}
    for name in FILTERS:
        raw = params.get(name)
        if raw is None or raw == "":
            continue
        if isinstance(raw, bool) or not isinstance(raw, str | int):
            raise _field_error(name, f"`{name}` must be a string.")
        text = str(raw).strip()
        if name == "version":
            number = text.removeprefix("v")
            if not number.isascii() or not number.isdigit() or not 1 <= int(number) <= MAX_VERSION:
                raise _field_error("version", "`version` must be a version number such as 3.")
            values[name] = int(number)
        elif name == "cohort":
            if text not in COHORTS:
                raise _field_error("cohort", "`cohort` must be stable or candidate.")
            values[name] = text
        elif name == "route":
            if text not in ROUTES:
                raise _field_error("route", f"`route` must be one of {', '.join(ROUTES)}.")
            values[name] = text
        else:
            if not _NAME_RE.match(text):
                raise _field_error(
                    name, f"`{name}` must be a task type name (a-z, 0-9, _ or -, ≤ 32)."
                )
            values[name] = text
    return DashboardView(window=window, **values)


# --- the rollup scan ---------------------------------------------------------------------------


@dataclass(slots=True)
class Tally:
    """Summed counts of some rollup rows, with their merged latency histogram."""

    events: int = 0
    device: int = 0
    cloud: int = 0
    draft_refine: int = 0
    fallback_cloud_to_device: int = 0
    fallback_device_to_cloud: int = 0
    cache_hits: int = 0
    errors: int = 0
    privacy_violations: int = 0
    latency_hist: dict[str, int] = field(default_factory=dict)

    def add(self, other: Tally, *, with_latency: bool = True) -> None:
        """Fold `other` into this tally (its histogram too, unless told otherwise)."""
        self.events += other.events
        self.device += other.device
        self.cloud += other.cloud
        self.draft_refine += other.draft_refine
        self.fallback_cloud_to_device += other.fallback_cloud_to_device
        self.fallback_device_to_cloud += other.fallback_device_to_cloud
        self.cache_hits += other.cache_hits
        self.errors += other.errors
        self.privacy_violations += other.privacy_violations
        if with_latency:
            merge_counts(self.latency_hist, other.latency_hist)

    def add_row(
        self, route: str, events: int, c2d: int, d2c: int, hits: int, errors: int, privacy: int
    ) -> None:
        """Fold one rollup row's counts (its histogram is merged by the caller)."""
        self.events += events
        if route == "device":
            self.device += events
        elif route == "cloud":
            self.cloud += events
        else:
            self.draft_refine += events
        self.fallback_cloud_to_device += c2d
        self.fallback_device_to_cloud += d2c
        self.cache_hits += hits
        self.errors += errors
        self.privacy_violations += privacy

    def quantiles(self) -> list[float | None]:
        """P50, P95, P99 in ms (None without events)."""
        if not self.latency_hist:
            return [None, None, None]
        return LatencySketch.from_json(self.latency_hist).quantiles([0.5, 0.95, 0.99])


def _ratio(part: float, whole: float) -> float | None:
    if not whole:
        return None
    value = part / whole
    return value if math.isfinite(value) else None


def _figures(tally: Tally) -> dict[str, Any]:
    """The headline figures of a tally."""
    events = tally.events
    p50, p95, p99 = tally.quantiles()
    c2d, d2c = tally.fallback_cloud_to_device, tally.fallback_device_to_cloud
    return {
        "events": events,
        "alpha": _ratio(tally.device, events),
        "cloud_share": _ratio(tally.cloud, events),
        "draft_refine_share": _ratio(tally.draft_refine, events),
        "fallback_rate": _ratio(c2d + d2c, events),
        "fallback_rates": {
            "cloud_to_device": _ratio(c2d, events),
            "device_to_cloud": _ratio(d2c, events),
        },
        "cache_hit_rate": _ratio(tally.cache_hits, events),
        "error_rate": _ratio(tally.errors, events),
        "privacy_violations": tally.privacy_violations,
        "latency_ms": {"p50": p50, "p95": p95, "p99": p99},
    }


@dataclass(frozen=True, slots=True)
class Plan:
    """The rollup table, time column and buckets that answer a window."""

    table: str
    time_column: str
    start: datetime
    end: datetime
    step: timedelta

    @property
    def buckets(self) -> int:
        """How many buckets the window has (the last one is the current, partial one)."""
        return (self.end - self.start) // self.step + 1

    @property
    def resolution(self) -> str:
        """`minute` or `hour`."""
        return "minute" if self.step == timedelta(minutes=1) else "hour"


def plan_view(view: DashboardView, now: datetime) -> Plan:
    """Minute rollups up to an hour, hour rollups (with the cell) beyond."""
    window = WINDOWS[view.window]
    now = now.astimezone(UTC)
    if window <= timedelta(hours=1):
        step = timedelta(minutes=1)
        current = now.replace(second=0, microsecond=0)
        table, column = MinuteRollup._meta.db_table, "minute"
    else:
        step = timedelta(hours=1)
        current = now.replace(minute=0, second=0, microsecond=0)
        table, column = HourRollup._meta.db_table, "hour"
    return Plan(table, column, current - (window - step), current, step)


def _as_utc(value: Any) -> datetime:
    """A bucket time as an aware UTC datetime (SQLite hands back text or naive values)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)  # type: ignore[no-any-return]
    return value.astimezone(UTC)  # type: ignore[no-any-return]


@dataclass(slots=True)
class Scan:
    """Rollup rows folded per bucket × route × cohort and per cell (what every chart needs)."""

    by_bucket: dict[tuple[int, str, str], Tally] = field(default_factory=dict)
    by_cell: dict[tuple[str, str, str], Tally] = field(default_factory=dict)
    versions_by_cohort: dict[str, set[int]] = field(default_factory=dict)


_ROW_COLUMNS = (
    "policy_version, cohort, {cell}, route, events, fallback_cloud_to_device, "
    "fallback_device_to_cloud, cache_hits, errors, privacy_violations, latency_hist"
)
_CELL_COLUMNS = "task_type, latency_budget, privacy_tier"
_NO_CELL = "'', '', ''"


def _scan(fleet_id: int, view: DashboardView, plan: Plan) -> Scan:
    """The window's rollup rows folded per bucket × route × cohort and per cell.

    Minute windows, or any window filtered by task type: one query over the cell-level table,
    each row folded into both. Hour windows otherwise: the series from the fleet-hour rollups
    (no cell, about a sixth of the rows) and the grid from the hour rollups, so each row's
    histogram is merged once; merging histograms is most of the selector's time.
    """
    where = ["fleet_id = %s", f"{plan.time_column} >= %s"]
    params: list[Any] = [fleet_id, connection.ops.adapt_datetimefield_value(plan.start)]
    columns = {"version": "policy_version", "cohort": "cohort"}
    for name, value in view.filters.items():
        where.append(f"{columns.get(name, name)} = %s")
        params.append(value)
    condition = " AND ".join(where)
    scan = Scan()
    if plan.resolution == "hour" and view.task_type is None:
        fleet_table = FleetHourRollup._meta.db_table
        _fold_rows(scan, plan, fleet_table, _NO_CELL, condition, params, buckets=True, cells=False)
        _fold_rows(scan, plan, plan.table, _CELL_COLUMNS, condition, params, buckets=False)
    else:
        _fold_rows(scan, plan, plan.table, _CELL_COLUMNS, condition, params)
    return scan


def _fold_rows(
    scan: Scan,
    plan: Plan,
    table: str,
    cell_columns: str,
    condition: str,
    params: list[Any],
    *,
    buckets: bool = True,
    cells: bool = True,
) -> None:
    """One query; each row into its bucket × route × cohort tally and/or its cell's tally."""
    sql = (
        f"SELECT {plan.time_column}, {_ROW_COLUMNS.format(cell=cell_columns)} "  # noqa: S608
        f"FROM {table} WHERE {condition}"
    )
    by_bucket, by_cell = scan.by_bucket, scan.by_cell
    step_s = plan.step.total_seconds()
    last = plan.buckets - 1
    spare: dict[str, int] = {}
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        for row in cursor.fetchall():
            (moment, version, cohort, task, budget, tier, route, events, c2d, d2c) = row[:10]
            hits, errors, privacy, hist_value = row[10:]
            if not events:
                continue
            into_bucket = into_cell = spare
            if buckets:
                index = int((_as_utc(moment) - plan.start).total_seconds() // step_s)
                bucket_key = (min(max(index, 0), last), route, cohort)
                tally = by_bucket.get(bucket_key)
                if tally is None:
                    tally = by_bucket[bucket_key] = Tally()
                tally.add_row(route, events, c2d, d2c, hits, errors, privacy)
                into_bucket = tally.latency_hist
                scan.versions_by_cohort.setdefault(cohort, set()).add(version)
            if cells:
                cell_key = (task, budget, tier)
                cell = by_cell.get(cell_key)
                if cell is None:
                    cell = by_cell[cell_key] = Tally()
                cell.add_row(route, events, c2d, d2c, hits, errors, privacy)
                into_cell = cell.latency_hist
            hist = _hist(hist_value)
            if buckets and cells:
                # Both at once: this loop is most of the selector's time.
                bucket_get, cell_get = into_bucket.get, into_cell.get
                for key, count in hist.items():
                    into_bucket[key] = bucket_get(key, 0) + count
                    into_cell[key] = cell_get(key, 0) + count
            else:
                merge_counts(into_bucket if buckets else into_cell, hist)


def _series(
    tallies: dict[int, Tally], buckets: int, *, with_latency: bool = True
) -> dict[str, list[Any]]:
    """Per-bucket lists (None where a bucket has no events), aligned with `buckets`."""
    names = (
        "events",
        "alpha",
        "cloud_share",
        "draft_refine_share",
        "fallback_rate",
        "fallback_cloud_to_device",
        "fallback_device_to_cloud",
        "cache_hit_rate",
        "error_rate",
        "privacy_violations",
        "p50_ms",
        "p95_ms",
        "p99_ms",
    )
    out: dict[str, list[Any]] = {name: [None] * buckets for name in names}
    out["events"] = [0] * buckets
    out["privacy_violations"] = [0] * buckets
    for index, tally in tallies.items():
        events = tally.events
        if not events:
            continue
        out["events"][index] = events
        out["alpha"][index] = tally.device / events
        out["cloud_share"][index] = tally.cloud / events
        out["draft_refine_share"][index] = tally.draft_refine / events
        c2d, d2c = tally.fallback_cloud_to_device, tally.fallback_device_to_cloud
        out["fallback_rate"][index] = (c2d + d2c) / events
        out["fallback_cloud_to_device"][index] = c2d / events
        out["fallback_device_to_cloud"][index] = d2c / events
        out["cache_hit_rate"][index] = tally.cache_hits / events
        out["error_rate"][index] = tally.errors / events
        out["privacy_violations"][index] = tally.privacy_violations
        if with_latency:
            p50, p95, p99 = tally.quantiles()
            out["p50_ms"][index], out["p95_ms"][index], out["p99_ms"][index] = p50, p95, p99
    if not with_latency:
        for name in ("p50_ms", "p95_ms", "p99_ms"):
            del out[name]
    return out


def _merged(tallies: dict[int, Tally]) -> Tally:
    total = Tally()
    for tally in tallies.values():
        total.add(tally)
    return total


def _fold(scan: Scan, buckets: int) -> dict[str, Any]:
    """Series for the fleet, per route and per cohort; the summary.

    Histograms are merged only where a percentile is shown: per bucket × route and per
    bucket × cohort; the fleet's own series carry no latency, and its headline percentiles
    come from the three route totals.
    """
    fleet: dict[int, Tally] = {}
    per_route: dict[str, dict[int, Tally]] = {route: {} for route in ROUTES}
    per_cohort: dict[str, dict[int, Tally]] = {cohort: {} for cohort in COHORTS}
    for (index, route, cohort), tally in scan.by_bucket.items():
        for target, with_latency in (
            (fleet, False),
            (per_route.setdefault(route, {}), True),
            (per_cohort.setdefault(cohort, {}), True),
        ):
            existing = target.get(index)
            if existing is None:
                existing = target[index] = Tally()
            existing.add(tally, with_latency=with_latency)
    summary = Tally()
    for tally in fleet.values():
        summary.add(tally, with_latency=False)
    routes = {}
    for route in ROUTES:
        tallies = per_route[route]
        total = _merged(tallies)
        merge_counts(summary.latency_hist, total.latency_hist)
        p50, p95, p99 = total.quantiles()
        series = _series(tallies, buckets)
        routes[route] = {
            "events": total.events,
            "latency_ms": {"p50": p50, "p95": p95, "p99": p99},
            "p50_ms": series["p50_ms"],
            "p95_ms": series["p95_ms"],
            "p99_ms": series["p99_ms"],
        }
    cohorts = {}
    for cohort in COHORTS:
        tallies = per_cohort[cohort]
        cohorts[cohort] = {
            "versions": sorted(scan.versions_by_cohort.get(cohort, ())),
            "summary": _figures(_merged(tallies)),
            "series": _series(tallies, buckets),
        }
    return {
        "summary": _figures(summary),
        "series": _series(fleet, buckets, with_latency=False),
        "routes": routes,
        "cohorts": cohorts,
    }


# --- policy, markers, convergence --------------------------------------------------------------


def _cells(version_ids: list[int]) -> dict[int, dict[tuple[str, str, str], dict[str, Any]]]:
    """The cells of these versions: mode and latency budget, per version id."""
    out: dict[int, dict[tuple[str, str, str], dict[str, Any]]] = {}
    rows = PolicyCell.objects.filter(version_id__in=version_ids).values_list(
        "version_id", "task_type", "latency_budget", "privacy_tier", "mode", "latency_budget_ms"
    )
    for version_id, task, budget, tier, mode, budget_ms in rows:
        out.setdefault(version_id, {})[(task, budget, tier)] = {
            "mode": mode,
            "budget_ms": budget_ms,
        }
    return out


def _grid(
    scan: Scan, cells: dict[tuple[str, str, str], dict[str, Any]], task_type: str | None
) -> dict[str, Any]:
    """The latency–privacy matrix: each cell's cloud share and P95 against its budget."""
    keys = set(scan.by_cell) | {key for key in cells if task_type is None or key[0] == task_type}

    def ordered(position: int) -> list[str]:
        return sorted({key[position] for key in keys})

    out_cells = []
    for key in sorted(keys):
        tally = scan.by_cell.get(key, Tally())
        _, p95, _ = tally.quantiles()
        policy = cells.get(key, {})
        out_cells.append(
            {
                "task_type": key[0],
                "latency_budget": key[1],
                "privacy_tier": key[2],
                "events": tally.events,
                "alpha": _ratio(tally.device, tally.events),
                "cloud_share": _ratio(tally.cloud, tally.events),
                "p95_ms": p95,
                "budget_ms": policy.get("budget_ms"),
                "mode": policy.get("mode"),
                "privacy_violations": tally.privacy_violations,
            }
        )
    return {
        "task_types": ordered(0),
        "latency_budgets": ordered(1),
        "privacy_tiers": ordered(2),
        "cells": out_cells,
    }


def _budgets(
    cells: dict[tuple[str, str, str], dict[str, Any]], task_type: str | None
) -> list[dict[str, Any]]:
    """Each latency budget's millisecond limits in the current policy (lines on the chart)."""
    limits: dict[tuple[str, int], int] = {}
    for (task, budget, _tier), policy in cells.items():
        if task_type is not None and task != task_type:
            continue
        key = (budget, policy["budget_ms"])
        limits[key] = limits.get(key, 0) + 1
    return [
        {"latency_budget": budget, "budget_ms": ms, "cells": count}
        for (budget, ms), count in sorted(limits.items(), key=lambda item: item[0][1])
    ]


def _markers(fleet_id: int, start: datetime) -> list[dict[str, Any]]:
    """Publishes, switches and rollout transitions since `start`, oldest first."""
    entries = (
        AuditEntry.objects.filter(
            fleet_id=fleet_id, action__in=list(MARKER_ACTIONS), created_at__gte=start
        )
        .order_by("-created_at", "-id")
        .values_list("created_at", "action", "summary", "after")[:MAX_MARKERS]
    )
    markers = []
    for at, action, summary, after in reversed(list(entries)):
        after = after if isinstance(after, dict) else {}
        if action == "policy_version.published":
            label = f"v{after.get('version')} published"
        elif action == "fleet.switched":
            label = f"switch to v{after.get('stable')}"
        elif action == "rollout.rolled_back":
            label = "rolled back"
        elif action in ("rollout.started", "rollout.advanced"):
            label = f"{after.get('stage', '?')}%"
        else:
            label = action.removeprefix("rollout.").replace("_", " ")
        markers.append(
            {"at": at, "kind": MARKER_ACTIONS[action], "label": label, "summary": summary}
        )
    return markers


def _convergence(fleet: Fleet, assignment: FleetAssignment, now: datetime) -> dict[str, Any]:
    """Devices per version (assigned, acked, acked and online now) in one aggregate query."""
    devices = Device.objects.filter(fleet=fleet, revoked_at__isnull=True)
    on_candidate = candidate_cohort_count(fleet, assignment)
    online = online_q(now)
    rows = list(
        devices.values("acked_version")
        .annotate(n=Count("id"), online=Count("id", filter=online))
        .order_by()
    )
    total = sum(row["n"] for row in rows)
    assigned: dict[int, int] = {}
    if assignment.stable is not None:
        assigned[assignment.stable] = total - on_candidate
    if assignment.candidate is not None:
        assigned[assignment.candidate] = on_candidate
    acked = {row["acked_version"]: row for row in rows if row["acked_version"] is not None}
    versions = sorted(set(assigned) | set(acked), reverse=True)
    return {
        "devices": total,
        "online": sum(row["online"] for row in rows),
        "versions": [
            {
                "version": number,
                "role": "candidate"
                if number == assignment.candidate
                else ("stable" if number == assignment.stable else "other"),
                "assigned": assigned.get(number, 0),
                "acked": acked[number]["n"] if number in acked else 0,
                "online": acked[number]["online"] if number in acked else 0,
            }
            for number in versions
        ],
    }


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def fleet_dashboard(
    *, fleet: Fleet, view: DashboardView, now: datetime | None = None
) -> dict[str, Any]:
    """The dashboard of `fleet` for `view`: figures, series, grid, markers, convergence.

    Reads rollups only. Queries: the rollup scan (two for hour windows without a task-type
    filter), the fleet's routing, its open rollout, the
    cells of its stable and candidate versions, the audit markers, and convergence (one
    aggregate, plus the candidate's share of devices during a partial rollout).
    """
    now = now or timezone.now()
    plan = plan_view(view, now)
    scan = _scan(fleet.pk, view, plan)
    folded = _fold(scan, plan.buckets)

    stable_id, stable_number = (
        FleetRouting.objects.filter(fleet=fleet)
        .values_list("stable_version_id", "stable_version__number")
        .first()
    ) or (None, None)
    rollout = open_rollout(fleet.pk)
    version_ids = [stable_id] if stable_id is not None else []
    if rollout is not None:
        version_ids = [rollout.stable_id, rollout.candidate_id]
    cells_by_version = _cells(version_ids)
    current_id = rollout.stable_id if rollout is not None else stable_id
    stable_cells = cells_by_version.get(current_id, {}) if current_id is not None else {}
    if rollout is not None:
        stable_number = rollout.stable.number
        assignment = FleetAssignment(
            stable=stable_number,
            candidate=rollout.candidate.number,
            salt=rollout.salt,
            percent=rollout.stage,
            rollout_id=rollout.pk,
        )
    else:
        assignment = FleetAssignment(stable=stable_number)

    buckets = [_iso(plan.start + plan.step * i) for i in range(plan.buckets)]
    markers = _markers(fleet.pk, plan.start)
    return {
        "fleet": fleet.slug,
        "view": view.as_json(),
        "view_key": view.key,
        "generated_at": _iso(now),
        "window": {
            "from": _iso(plan.start),
            "to": _iso(now),
            "resolution": plan.resolution,
            "bucket_seconds": int(plan.step.total_seconds()),
        },
        "buckets": buckets,
        **folded,
        "budgets": _budgets(stable_cells, view.task_type),
        "grid": _grid(scan, stable_cells, view.task_type),
        "markers": [{**marker, "at": _iso(marker["at"])} for marker in markers],
        "options": {
            "versions": sorted(
                {v for versions in scan.versions_by_cohort.values() for v in versions}
                | {v for v in (assignment.stable, assignment.candidate) if v is not None}
            ),
            "task_types": sorted({key[0] for key in stable_cells} | {k[0] for k in scan.by_cell}),
        },
        "stable_version": stable_number,
        "rollout": _rollout_json(rollout),
        "convergence": _convergence(fleet, assignment, now),
        # The page's Firing-alerts figure is kept live by the alert feed (alerts_banner.js);
        # a dict here ({"firing": n, "summary": text}) would be drawn by dashboard.js too.
        "alerts": None,
    }


def _rollout_json(rollout: Any) -> dict[str, Any] | None:
    if rollout is None:
        return None
    out = rollout_out(rollout)
    for name in ("started_at", "stage_changed_at", "finished_at"):
        if out[name] is not None:
            out[name] = _iso(out[name])
    return out
