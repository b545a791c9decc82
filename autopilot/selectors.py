"""The autopilot's reads: its objective, its cycles, what a fleet's cells realized, and how
much quality data each cell has for the bound (docs/lab.md, "The autopilot")."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import QuerySet

from lab.calibration.quality import groups_of_cells, kept_figures
from lab.calibration.selectors import why_fixed
from lab.segments import segment_table
from routing_policies.cell_schema import CellKey, cell_key_label
from routing_policies.models import Fleet, FleetRouting, PolicyVersion
from routing_policies.pricing import CloudPrice
from routing_policies.selectors import shadow_refine_rates, table_cells, version_table
from telemetry.rollups import ALL_DEVICES, Figures, figures_at, plan_window, read_rows
from telemetry.rollups.segments import segment_named

from .core import Realized, reports_needed
from .models import AutopilotCycle, AutopilotObjective

__all__ = [
    "QualityReadiness",
    "autopilot_out",
    "cells_in_scope",
    "cycle_out",
    "cycles_list",
    "objective_get",
    "quality_readiness",
    "realized_of_cells",
    "segment_rows",
    "stable_version",
]

_CLOUD_ROUTES = ("cloud", "draft_refine")


def objective_get(*, fleet: Fleet) -> AutopilotObjective:
    """The fleet's objective (the defaults, unsaved and off, when it has none)."""
    return AutopilotObjective.objects.filter(fleet=fleet).first() or AutopilotObjective(fleet=fleet)


def cycles_list(*, fleet: Fleet, limit: int = 50) -> QuerySet[AutopilotCycle]:
    """The fleet's cycles, newest first."""
    return AutopilotCycle.objects.filter(fleet=fleet).order_by("-number")[:limit]


def stable_version(*, fleet: Fleet) -> PolicyVersion | None:
    """What the fleet's devices run outside a rollout."""
    routing = FleetRouting.objects.select_related("stable_version").filter(fleet=fleet).first()
    return routing.stable_version if routing is not None else None


def segment_rows(*, fleet: Fleet, segment: str) -> int:
    """The id the rollups key a segment's rows by (ALL_DEVICES for the whole fleet, blank); a
    name the fleet has no segment of is a ValidationFailed naming `segment`."""
    return segment_named(fleet.pk, segment or None)


def scope_table(
    objective: AutopilotObjective, version: PolicyVersion
) -> dict[CellKey, dict[str, Any]]:
    """The table of `version` as the objective's scope runs it: its segment's (the base cells
    with the segment's override on them), or the base table for the whole fleet."""
    table = version_table(version=version)
    if objective.segment:
        table, _ = segment_table(version=version, table=table, segment=objective.segment)
    return table


def cells_in_scope(objective: AutopilotObjective, version: PolicyVersion) -> list[CellKey]:
    """The cells of `version` the objective may move: in its scope (every cell when it names
    none), not excluded, and ones θ plays a part in (as its segment's devices run them)."""
    table = table_cells(scope_table(objective, version))
    wanted = set(objective.cells or [])
    excluded = set(objective.excluded_cells or [])
    return [
        key
        for key, cell in table.items()
        if (not wanted or cell_key_label(key) in wanted)
        and cell_key_label(key) not in excluded
        and not why_fixed(cell)
    ]


@dataclass(frozen=True, slots=True, kw_only=True)
class QualityReadiness:
    """One cell's quality data for the bound: what it has, what it needs, what would get it."""

    cell: CellKey
    reports: int
    needed: int
    shadow_rate: float
    device_per_day: float

    @property
    def enough(self) -> bool:
        """Whether the window holds the reports the bound needs."""
        return self.reports >= self.needed

    def message(self, *, window_hours: int) -> str:
        """What the cell lacks and what would give it, in words."""
        missing = self.needed - self.reports
        per_window = self.shadow_rate * self.device_per_day * window_hours / 24
        if self.shadow_rate <= 0:
            rate_needed = (
                self.needed / (self.device_per_day * window_hours / 24)
                if self.device_per_day > 0
                else None
            )
            how = (
                f"set its shadow_refine_rate to at least {rate_needed:.1%}"
                if rate_needed is not None and rate_needed <= 1
                else "it has too few device tasks for any shadow-refine rate"
            )
            return (
                f"{cell_key_label(self.cell)}: {self.reports:,} scored draft reports in "
                f"{window_hours} h, {self.needed:,} needed ({missing:,} more); it samples no "
                f"shadow refines: {how}"
            )
        return (
            f"{cell_key_label(self.cell)}: {self.reports:,} scored draft reports in "
            f"{window_hours} h, {self.needed:,} needed ({missing:,} more); at its shadow-refine "
            f"rate {self.shadow_rate:.1%} of {self.device_per_day:,.0f} device tasks a day it "
            f"gathers about {per_window:,.0f} a window"
        )


def quality_readiness(
    *, objective: AutopilotObjective, version: PolicyVersion, end: datetime
) -> list[QualityReadiness]:
    """Per cell in scope: the scored draft reports of the last window and the sample the bound
    needs (core.reports_needed at the cell's kept rate, the floor where it has none)."""
    keys = cells_in_scope(objective, version)
    start = end - timedelta(hours=objective.window_hours)
    figures = kept_figures(
        fleet_id=objective.fleet_id,
        start=start,
        end=end,
        segment=segment_rows(fleet=objective.fleet, segment=objective.segment),
    )
    groups = groups_of_cells(figures, keys)
    rates = shadow_refine_rates(scope_table(objective, version))
    out = []
    for key in keys:
        cell = figures.get(key) or Figures()
        kept_rate = cell.draft_kept_rate()
        device_events = cell.total("events", "device") if cell.events else 0.0
        out.append(
            QualityReadiness(
                cell=key,
                reports=groups[key].scored,
                needed=reports_needed(
                    kept_rate=kept_rate if kept_rate is not None else objective.quality_floor,
                    resolution=objective.quality_resolution,
                    delta=objective.delta,
                ),
                shadow_rate=rates.get(key, 0.0),
                device_per_day=device_events * 24 / objective.window_hours,
            )
        )
    return out


def realized_of_cells(
    *,
    fleet: Fleet,
    version: int,
    start: datetime,
    end: datetime,
    cells: list[CellKey],
    segment: int = ALL_DEVICES,
) -> dict[CellKey, Realized]:
    """What each cell did on `version` between `start` and `end`, from the rollups (of the
    whole fleet, or of one segment's rows: its id): α and the cloud share of its events, its
    P95, the device route's kept rate (shadow refines) and the cloud cost per day (its cloud
    routes' calls and tokens at the fleet's price)."""
    # The level by the window's length (minutes up to 6 h); the rows from the minute (or hour)
    # holding `start`.
    plan = plan_window(end - start, now=end)
    rows = read_rows(
        plan.level(cell_level=True),
        fleet_id=fleet.pk,
        since=start.replace(second=0, microsecond=0)
        if plan.resolution == "minute"
        else start.replace(minute=0, second=0, microsecond=0),
        until=end,
        where={"policy_version": version},
        latency=True,
        segment=segment,
    )
    by_cell: dict[CellKey, Figures] = {}
    first = last = None
    for row in rows:
        figures_at(by_cell, (row.task_type, row.latency_budget, row.privacy_tier)).add(row)
        first = row.bucket if first is None or row.bucket < first else first
        last = row.bucket if last is None or row.bucket > last else last
    price = CloudPrice.of_fleet(fleet)
    # Per day over the buckets that hold data (the lab's "span that holds data", to the bucket).
    step = timedelta(minutes=1) if plan.resolution == "minute" else timedelta(hours=1)
    span = (last - first + step) if first is not None and last is not None else end - start
    days = max(span.total_seconds() / 86400, 1 / 1440)
    out: dict[CellKey, Realized] = {}
    for key in cells:
        figures = by_cell.get(key) or Figures()
        events = figures.events
        quality, reports = figures.device_kept()
        cloud = sum(figures.total("events", route) for route in _CLOUD_ROUTES) if events else 0
        tokens = sum(figures.total("tokens_sum", route) for route in _CLOUD_ROUTES) if events else 0
        out[key] = Realized(
            events=events,
            alpha=figures.share("device") if events else None,
            cloud_share=(cloud / events) if events else None,
            p95_ms=figures.latency_quantiles([0.95])[0] if events else None,
            quality=quality,
            quality_reports=reports,
            quality_kept=int(figures.total("refine_kept", "device")) if reports else 0,
            cost_per_day=price.cost(tokens=tokens, calls=cloud) / days if events else None,
        )
    return out


def cycle_out(cycle: AutopilotCycle) -> dict[str, Any]:
    """The API's and the page's shape of a cycle."""
    return {
        "number": cycle.number,
        "segment": cycle.segment or None,
        "state": cycle.state,
        "reason": cycle.reason,
        "started_at": cycle.started_at.isoformat() if cycle.started_at else None,
        "finished_at": cycle.finished_at.isoformat() if cycle.finished_at else None,
        "window": {"start": cycle.window_start.isoformat(), "end": cycle.window_end.isoformat()},
        "base_version": cycle.base_version,
        "draft_revision": cycle.draft_revision,
        "version": cycle.version,
        "change_request": cycle.change_request,
        "rollout": cycle.rollout,
        "cells": cycle.cells,
    }


def objective_out(objective: AutopilotObjective) -> dict[str, Any]:
    """The objective's settings as the API shows them (and as PUT takes them)."""
    run_at = objective.run_at
    return {
        "quality_floor": objective.quality_floor,
        "delta": objective.delta,
        "quality_resolution": objective.quality_resolution,
        "p95_within_budget": objective.p95_within_budget,
        "cost_ceiling_per_day": objective.cost_ceiling_per_day,
        "max_step": objective.max_step,
        "margin": objective.margin,
        "cells": list(objective.cells or []),
        "segment": objective.segment or None,
        "excluded_cells": list(objective.excluded_cells or []),
        "run_at": run_at.strftime("%H:%M") if hasattr(run_at, "strftime") else str(run_at)[:5],
        "time_zone": objective.time_zone,
        "quiet_periods": list(objective.quiet_periods or []),
        "window_hours": objective.window_hours,
        "holdback": objective.holdback,
        "bake_minutes": objective.bake_minutes,
        "measure_minutes": objective.measure_minutes,
        "share_tolerance": objective.share_tolerance,
    }


def autopilot_out(fleet: Fleet, *, cycles: int = 20) -> dict[str, Any]:
    """The API's and the page's shape of a fleet's autopilot."""
    objective = objective_get(fleet=fleet)
    return {
        "fleet": fleet.slug,
        "state": objective.state,
        "state_reason": objective.state_reason,
        "bound_confidence": round(100 * (1 - objective.delta), 1),
        "next_run_at": objective.next_run_at.isoformat() if objective.next_run_at else None,
        "objective": objective_out(objective),
        "cycles": [cycle_out(cycle) for cycle in cycles_list(fleet=fleet, limit=cycles)],
    }
