"""Everything a fleet's dashboard draws, for one view (window and filters), from rollups only.

The minute rollups answer 15 minutes and an hour, in one scan; 24 hours and 7 days read the
fleet-hour rollups for the series and the hour rollups (which keep the cell) for the grid, or
the hour rollups alone when filtered by task type. Each row (telemetry.rollups.read_rows) is
folded once into the few `Figures` the charts need, per time bucket × route × cohort and per
cell; the summary, per-route and per-cohort figures are merged from those afterwards.
The policy cells' budgets, the time-axis markers (publishes, switches, rollout stages) and fleet
convergence add a handful of small indexed queries; the number is pinned in the tests.

The payload is plain JSON (ISO times, lists aligned with `buckets`), so the same dict is the
API's answer, the page's first paint and the live feed's message.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final
from urllib.parse import urlencode

from django.db import connection
from django.db.models import Max, Min
from django.utils import timezone

from routing_policies.assignment import FleetAssignment
from routing_policies.models import AuditEntry, Fleet, FleetRouting, PolicyCell
from routing_policies.pricing import CloudPrice
from routing_policies.selectors import (
    compared_rollout,
    rollout_assignment,
    rollout_out,
    version_convergence,
)

from ..models import Cohort, Event
from ..rollups import (
    ALL_DEVICES,
    Figures,
    RollupRow,
    WindowPlan,
    as_utc,
    figures_at,
    merged,
    plan_window,
    read_rows,
)
from ..rollups import ROUTES as ROUTES  # the routes the dashboard draws, for its views
from ..rollups.cohorts import CohortArms
from ..rollups.schema import FIELD_INDEX
from ..rollups.segments import segment_and_rule
from ..rollups.sketch import merge_counts
from .cost import CohortCost, cost_figures
from .metrics import fleet_metrics as fleet_metrics  # the metrics API's read, for the lab

WINDOWS: Final = {
    "15m": timedelta(minutes=15),
    "1h": timedelta(hours=1),
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
}
DEFAULT_WINDOW: Final = "1h"
FILTERS: Final = ("version", "cohort", "task_type", "route", "segment")
# The filters that are rollup key columns (`segment` picks the rows of a segment instead).
_ROW_FILTERS: Final = FILTERS[:4]
# The rollup column each filter reads (the others read the column of their name).
FILTER_COLUMNS: Final = {"version": "policy_version"}
COHORTS: Final = (Cohort.STABLE.value, Cohort.CANDIDATE.value)
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
# The time axis of a young fleet's charts spans at least this many buckets.
MIN_SHOWN_BUCKETS: Final = 5


@dataclass(frozen=True, slots=True)
class DashboardView:
    """What one dashboard shows: a window and optional filters. Hashable; `key` names it."""

    window: str = DEFAULT_WINDOW
    version: int | None = None
    cohort: str | None = None
    task_type: str | None = None
    route: str | None = None
    # A named segment of the fleet: only its devices' events (telemetry.rollups.segments).
    segment: str | None = None

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

    @property
    def where(self) -> dict[str, Any]:
        """The filters on rollup key columns, by column."""
        return {
            FILTER_COLUMNS.get(name, name): value
            for name, value in self.filters.items()
            if name in _ROW_FILTERS
        }


# --- the rollup scan ---------------------------------------------------------------------------


@dataclass(slots=True)
class Scan:
    """Rollup rows folded per bucket × route × cohort × version and per cell (what every chart
    needs). The version is kept so the cohort charts compare one rollout's two versions, not
    every version a cohort ran in the window."""

    by_bucket: dict[tuple[int, str, str, int], Figures] = field(default_factory=dict)
    by_cell: dict[tuple[str, str, str], Figures] = field(default_factory=dict)
    versions_by_cohort: dict[str, set[int]] = field(default_factory=dict)


def _scan(
    fleet_id: int, view: DashboardView, plan: WindowPlan, arms: CohortArms, segment: int
) -> Scan:
    """The window's rollup rows folded per bucket × route × cohort and per cell.

    Minute windows, or any window filtered by task type: one query over the cell-level table,
    each row folded into both. Hour windows otherwise: the series from the fleet-hour rollups
    (no cell, about a sixth of the rows) and the grid from the hour rollups, so each row's
    histogram is merged once; merging histograms is most of the selector's time.
    """
    where = view.where
    scan = Scan()
    # `?cohort=` counts what the cohort's line counts: its arm of the compared rollout.
    wanted = arms.version(view.cohort) if view.cohort is not None else None
    if wanted is not None and where.setdefault("policy_version", wanted) != wanted:
        return scan  # a version outside the cohort: nothing to read

    def rows(*, cell_level: bool) -> Iterator[RollupRow]:
        level = plan.level(cell_level=cell_level)
        return read_rows(
            level,
            fleet_id=fleet_id,
            since=plan.start,
            where=where,
            latency=True,
            segment=segment,
        )

    if plan.resolution == "hour" and view.task_type is None:
        _fold_rows(scan, plan, rows(cell_level=False), cells=False)
        _fold_rows(scan, plan, rows(cell_level=True), buckets=False)
    else:
        _fold_rows(scan, plan, rows(cell_level=True))
    return scan


_QUALITY_COUNT: Final = FIELD_INDEX["quality_count"]


def _fold_rows(
    scan: Scan,
    plan: WindowPlan,
    rows: Iterable[RollupRow],
    *,
    buckets: bool = True,
    cells: bool = True,
) -> None:
    """Each row into its bucket × route × cohort figures and/or its cell's figures."""
    by_bucket, by_cell, versions = scan.by_bucket, scan.by_cell, scan.versions_by_cohort
    for row in rows:
        # A row of no events is skipped, unless it carries late feedback: the feedback join
        # stores its quality as a partial row without events, merged into the event's row only
        # at the next compaction, and the dashboard shows it from the join on.
        if not row.events and not row.sums[_QUALITY_COUNT]:
            continue
        if buckets:
            key = (plan.bucket_index(row.bucket), row.route, row.cohort, row.policy_version)
            figures_at(by_bucket, key).add(row, scores=False)
            versions.setdefault(row.cohort, set()).add(row.policy_version)
        if cells:
            cell = (row.task_type, row.latency_budget, row.privacy_tier)
            figures_at(by_cell, cell).add(row, scores=False)


def _series(
    tallies: dict[int, Figures], buckets: int, *, with_latency: bool = True
) -> dict[str, list[Any]]:
    """Per-bucket lists aligned with `buckets`: None where a bucket has no events, its event
    and violation counts too (a bucket nothing reported is a gap on the chart, never a 0 a
    line would run down to and back up from)."""
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
        # The quality signals (issue #15): None where no event of the bucket reported one,
        # never 0 (no report is not "the cloud changed every draft").
        "draft_kept_rate",
        "refine_reported",
        "mean_quality",
        "quality_count",
    )
    out: dict[str, list[Any]] = {name: [None] * buckets for name in names}
    # Reports per bucket stay counts (0: nothing reported); the drawn rates beside them are None.
    out["refine_reported"] = [0] * buckets
    out["quality_count"] = [0] * buckets
    for index, figures in tallies.items():
        events = figures.events
        if not events:
            continue
        out["events"][index] = events
        out["alpha"][index] = figures.share("device")
        out["cloud_share"][index] = figures.share("cloud")
        out["draft_refine_share"][index] = figures.share("draft_refine")
        out["fallback_rate"][index] = figures.fallback_rate()
        out["fallback_cloud_to_device"][index] = figures.rate("fallback_cloud_to_device")
        out["fallback_device_to_cloud"][index] = figures.rate("fallback_device_to_cloud")
        out["cache_hit_rate"][index] = figures.rate("cache_hits")
        out["error_rate"][index] = figures.rate("errors")
        out["privacy_violations"][index] = figures.privacy_violations
        out["draft_kept_rate"][index] = figures.draft_kept_rate()
        out["refine_reported"][index] = int(figures.total("refine_reported"))
        out["mean_quality"][index] = figures.mean_quality()
        out["quality_count"][index] = int(figures.total("quality_count"))
        if with_latency:
            p50, p95, p99 = figures.latency_quantiles()
            out["p50_ms"][index], out["p95_ms"][index], out["p99_ms"][index] = p50, p95, p99
    if not with_latency:
        for name in ("p50_ms", "p95_ms", "p99_ms"):
            del out[name]
    return out


def _fold(
    scan: Scan, buckets: int, compared: Mapping[str, int | None]
) -> tuple[dict[str, Any], Figures, dict[str, Figures]]:
    """Series for the fleet, per route and per cohort; the summary, and its figures and each
    cohort's (the cost is priced from them).

    Each cohort's series counts only the version `compared` names for it (the rollout's
    candidate and stable), so a past rollout in the window is not mixed in; a cohort whose
    version is None counts every version it ran.
    Histograms are merged only where a percentile is shown: per bucket × route and per
    bucket × cohort; the fleet's own series carry no latency, and its headline percentiles
    come from the three route totals.
    """
    fleet: dict[int, Figures] = {}
    per_route: dict[str, dict[int, Figures]] = {route: {} for route in ROUTES}
    per_cohort: dict[str, dict[int, Figures]] = {cohort: {} for cohort in COHORTS}
    cohort_versions: dict[str, set[int]] = {}
    for (index, route, cohort, version), figures in scan.by_bucket.items():
        targets: list[tuple[dict[int, Figures], bool]] = [
            (fleet, False),
            (per_route.setdefault(route, {}), True),
        ]
        wanted = compared.get(cohort)
        if wanted is None or wanted == version:
            targets.append((per_cohort.setdefault(cohort, {}), True))
            cohort_versions.setdefault(cohort, set()).add(version)
        for target, with_latency in targets:
            figures_at(target, index).merge(figures, latency=with_latency, scores=False)
    summary = merged(fleet.values(), latency=False, scores=False)
    routes = {}
    for route in ROUTES:
        by_index = per_route[route]
        total = merged(by_index.values(), scores=False)
        merge_counts(summary.latency_hist, total.latency_hist)
        p50, p95, p99 = total.latency_quantiles()
        series = _series(by_index, buckets)
        routes[route] = {
            "events": total.events,
            "latency_ms": {"p50": p50, "p95": p95, "p99": p99},
            "p50_ms": series["p50_ms"],
            "p95_ms": series["p95_ms"],
            "p99_ms": series["p99_ms"],
        }
    cohorts = {}
    cohort_figures: dict[str, Figures] = {}
    for cohort in COHORTS:
        by_index = per_cohort[cohort]
        versions = sorted(cohort_versions.get(cohort, ()))
        cohort_figures[cohort] = merged(by_index.values(), scores=False)
        cohorts[cohort] = {
            "versions": versions,
            "label": _cohort_label(cohort, versions, compared.get(cohort)),
            "summary": _headline(cohort_figures[cohort]),
            "series": _series(by_index, buckets),
        }
    folded = {
        "summary": _headline(summary),
        "series": _series(fleet, buckets, with_latency=False),
        "routes": routes,
        "cohorts": cohorts,
    }
    return folded, summary, cohort_figures


def _headline(figures: Figures) -> dict[str, Any]:
    """The headline figures, with the device's own draft-kept rate beside the pooled one."""
    rate, reported = figures.device_kept()
    return {**figures.headline(), "device_kept_rate": rate, "device_refine_reported": reported}


def _cohort_label(cohort: str, versions: list[int], compared: int | None) -> str:
    """The legend name of a cohort's line: `candidate v4`, `stable v3` (one version)."""
    if compared is not None:
        return f"{cohort} v{compared}"
    if not versions:
        return cohort
    return f"{cohort} {', '.join(f'v{v}' for v in versions)}"


def _captions(plan: WindowPlan, shown_from: datetime) -> dict[str, str]:
    """The words under the chart titles that depend on the window (bucket size, start)."""
    per = f"per {plan.resolution}"
    since = shown_from.astimezone(UTC)
    when = since.strftime("%H:%M") if plan.resolution == "minute" else since.strftime("%d %b %H:%M")
    return {
        "shares": f"share of events {per}, with versions and rollout stages",
        "events_axis": f"events {per}",
        "window": f"{plan.resolution} buckets from {when} UTC",
        "partial": f"the {plan.resolution} in progress (shaded) is drawn once it ends",
    }


def _shown_from(fleet: Fleet, plan: WindowPlan, scan: Scan) -> datetime:
    """Where the charts' time axis starts: the window's start, or later for a young fleet.

    A fleet five minutes old would otherwise draw an hour, 90% of it empty. The axis starts at
    the fleet's creation or its first reported bucket, whichever is earlier (events may predate
    the fleet's record), and spans at least MIN_SHOWN_BUCKETS buckets.
    """
    first_reported = min((key[0] for key in scan.by_bucket), default=None)
    created_index = plan.bucket_index(as_utc(fleet.created_at))
    index = created_index if first_reported is None else min(created_index, first_reported)
    index = max(0, min(index, plan.buckets - MIN_SHOWN_BUCKETS))
    return plan.start + plan.step * index


def _data_span(
    fleet_id: int, view: DashboardView, plan: WindowPlan, now: datetime, scan: Scan, segment: int
) -> tuple[datetime | None, datetime | None]:
    """The first and the last event of the view (window and filters): the span its cost per
    day is figured over (routing_policies.pricing.data_span_hours).

    Read from the raw events (one aggregate on the fleet-and-time index): the rollups know
    an event's minute or hour only, and a span counted in whole buckets would take a minute
    in progress, or the first hour of a 7-day window, as full. Where the raw events are gone
    (past their retention) the rollup buckets bound the span, the last one up to now.
    """
    where = view.where
    if segment != ALL_DEVICES:
        # The events counted in the segment's rows (Event.segments, as processed); SQLite
        # has no JSON containment: the rollup buckets bound the span there.
        where["segments__contains"] = [segment]
    span: dict[str, Any] = {"first": None}
    if segment == ALL_DEVICES or connection.vendor == "postgresql":
        span = Event.objects.filter(
            fleet_id=fleet_id, ts__gte=plan.start, ts__lte=now, **where
        ).aggregate(first=Min("ts"), last=Max("ts"))
    if span["first"] is not None:
        return as_utc(span["first"]), as_utc(span["last"])
    indexes = sorted({key[0] for key, figures in scan.by_bucket.items() if figures.events})
    if not indexes:
        return None, None
    first = plan.start + plan.step * indexes[0]
    return first, min(plan.start + plan.step * (indexes[-1] + 1), now)


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
    """The latency–privacy matrix: each cell's cloud share and P95 against its budget, and its
    device quality: the draft-kept rate and the mean app quality, with the reports behind each
    (a rate without reports is None: "no reports", never 0%)."""
    keys = set(scan.by_cell) | {key for key in cells if task_type is None or key[0] == task_type}

    def ordered(position: int) -> list[str]:
        return sorted({key[position] for key in keys})

    out_cells = []
    for key in sorted(keys):
        figures = scan.by_cell.get(key) or Figures()
        _, p95, _ = figures.latency_quantiles()
        policy = cells.get(key, {})
        device_rate, device_reported = figures.device_kept()
        out_cells.append(
            {
                "task_type": key[0],
                "latency_budget": key[1],
                "privacy_tier": key[2],
                "events": figures.events,
                "alpha": figures.share("device"),
                "cloud_share": figures.share("cloud"),
                "p95_ms": p95,
                "budget_ms": policy.get("budget_ms"),
                "mode": policy.get("mode"),
                "privacy_violations": figures.privacy_violations,
                "draft_kept_rate": figures.draft_kept_rate(),
                "refine_reported": int(figures.total("refine_reported")),
                "mean_quality": figures.mean_quality(),
                "quality_count": int(figures.total("quality_count")),
                "device_kept_rate": device_rate,
                "device_refine_reported": device_reported,
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
    tasks: dict[tuple[str, int], set[str]] = {}
    for (task, budget, _tier), policy in cells.items():
        if task_type is not None and task != task_type:
            continue
        key = (budget, policy["budget_ms"])
        limits[key] = limits.get(key, 0) + 1
        tasks.setdefault(key, set()).add(task)
    return [
        {
            "latency_budget": budget,
            "budget_ms": ms,
            "cells": count,
            # Which task types have this limit: the chart's label says whose line it is.
            "task_types": sorted(tasks[(budget, ms)]),
        }
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


def _convergence(
    fleet: Fleet,
    assignment: FleetAssignment,
    now: datetime,
    segment: str | None,
    rule: dict[str, Any] | None,
) -> dict[str, Any]:
    """Devices per version (assigned, acked, acked and online now): the devices' own count,
    with the dashboard's name for the acked-and-online figure; with a segment filter, of the
    devices its rule matches now (as the device page and the segment editor count them), and
    the segment named."""
    convergence = version_convergence(fleet, assignment, now, rule=rule)
    versions = [
        {**{k: v for k, v in row.items() if k != "acked_online"}, "online": row["acked_online"]}
        for row in convergence["versions"]
    ]
    return {**convergence, "versions": versions, "segment": segment}


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def fleet_dashboard(
    *, fleet: Fleet, view: DashboardView, now: datetime | None = None
) -> dict[str, Any]:
    """The dashboard of `fleet` for `view`: figures, series, grid, markers, convergence.

    Reads rollups, and the first and last time of the raw events. Queries: the rollup scan
    (two for hour windows without a task-type filter), the fleet's routing, its open rollout,
    the cells of its stable and candidate versions, the audit markers, convergence (one
    aggregate, plus the candidate's share of devices during a partial rollout), and the span
    of the view's events for its cost per day (one aggregate of the raw events).
    """
    now = now or timezone.now()
    plan = plan_window(WINDOWS[view.window], now=now)
    # The rollout the cohorts are the arms of (the open one, else the latest open in the
    # window): one definition for the cohort lines, `?cohort=` and the metrics API.
    compared = compared_rollout(fleet.pk, plan.start)
    rollout = compared if compared is not None and compared.is_open else None
    arms = CohortArms.of_rollout(compared)
    segment, rule = segment_and_rule(fleet.pk, view.segment)
    scan = _scan(fleet.pk, view, plan, arms, segment)

    stable_id, stable_number = (
        FleetRouting.objects.filter(fleet=fleet)
        .values_list("stable_version_id", "stable_version__number")
        .first()
    ) or (None, None)
    folded, summary, cohort_figures = _fold(
        scan,
        plan.buckets,
        {Cohort.STABLE.value: arms.stable, Cohort.CANDIDATE.value: arms.candidate},
    )
    version_ids = [stable_id] if stable_id is not None else []
    if rollout is not None:
        version_ids = [rollout.stable_id, rollout.candidate_id]
    cells_by_version = _cells(version_ids)
    current_id = rollout.stable_id if rollout is not None else stable_id
    stable_cells = cells_by_version.get(current_id, {}) if current_id is not None else {}
    assignment = _assignment(rollout, stable_number)
    stable_number = assignment.stable

    buckets = [_iso(plan.start + plan.step * i) for i in range(plan.buckets)]
    markers = _markers(fleet.pk, plan.start)
    shown_from = _shown_from(fleet, plan, scan)
    first_event, last_event = _data_span(fleet.pk, view, plan, now, scan, segment)
    return {
        "fleet": fleet.slug,
        "view": view.as_json(),
        "view_key": view.key,
        "generated_at": _iso(now),
        "window": _window_json(plan, now, shown_from),
        "captions": _captions(plan, shown_from),
        "buckets": buckets,
        **folded,
        "cost": cost_figures(
            figures=summary,
            price=CloudPrice.of_fleet(fleet),
            first=first_event,
            last=last_event,
            cohorts=_cohort_cost(compared, rollout, cohort_figures),
        ),
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
        # The rollout the cohort charts compare (the open one, or the latest finished one).
        "compared_rollout": _rollout_json(compared),
        "convergence": _convergence(fleet, assignment, now, view.segment, rule),
        # The page's Firing-alerts figure is kept live by the alert feed (alerts_banner.js);
        # a dict here ({"firing": n, "summary": text}) would be drawn by dashboard.js too.
        "alerts": None,
    }


def _assignment(rollout: Any, stable_number: int | None) -> FleetAssignment:
    """What the fleet runs: the open rollout's versions and split (its scope included, as
    the devices are told), else its stable version."""
    if rollout is not None:
        return rollout_assignment(rollout)
    return FleetAssignment(stable=stable_number)


def _window_json(plan: WindowPlan, now: datetime, shown_from: datetime) -> dict[str, Any]:
    return {
        "from": _iso(plan.start),
        "to": _iso(now),
        "resolution": plan.resolution,
        "bucket_seconds": int(plan.step.total_seconds()),
        "shown_from": _iso(shown_from),
        # The last bucket is still filling: a minute 10 s old holds a sixth of a minute's
        # events, and its rates rest on a handful of them.
        "partial_bucket": plan.buckets - 1,
        "partial_from": _iso(plan.current),
    }


def _cohort_cost(
    compared: Any, rollout: Any, cohort_figures: dict[str, Figures]
) -> CohortCost | None:
    """Candidate against stable only for the rollout in progress: a finished rollout's
    candidate was promoted or rolled back, and its cost says nothing now."""
    if compared is not None and rollout is not None and compared.pk == rollout.pk:
        return CohortCost(
            stable=cohort_figures[Cohort.STABLE.value],
            candidate=cohort_figures[Cohort.CANDIDATE.value],
            stable_version=compared.stable.number,
            candidate_version=compared.candidate.number,
        )
    return None


def _rollout_json(rollout: Any) -> dict[str, Any] | None:
    if rollout is None:
        return None
    out = rollout_out(rollout)
    for name in ("started_at", "stage_changed_at", "finished_at"):
        if out[name] is not None:
            out[name] = _iso(out[name])
    return out
