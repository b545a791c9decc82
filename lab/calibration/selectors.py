"""Calibration of θ per cell over a window of recorded events (docs/lab.md, "Calibration").

A read: it decides recorded events again under candidate θs and writes nothing. Applying
the chosen θs to the draft is `services.calibration_apply`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from django.utils import timezone

from controlplane.exceptions import Conflict, ValidationFailed
from edge_sdk.decision import Cell
from routing_policies.cell_schema import CellKey, cell_key_label
from routing_policies.models import Fleet, FleetRouting, PolicyVersion
from routing_policies.pricing import CloudPrice, cost_report, data_span_hours, has_rate
from routing_policies.selectors import (
    shadow_refine_rates,
    table_cells,
    version_get,
    version_table,
)
from telemetry.rollups import ALL_DEVICES, Figures

from ..estimate import LatencyModel, Observed, network_ms
from ..replay import (
    DEFAULT_HOURS,
    EventFilters,
    EventSpan,
    NudgeHistory,
    ReplayInputs,
    recorded_rows,
)
from ..running import lab_version_default
from ..segments import LabSegment, lab_segment, segment_table
from .quality import (
    MIN_QUALITY_REPORTS,
    KeptGroups,
    display_curve,
    groups_of_cells,
    kept_figures,
)
from .sweep import CellSweep, CurvePoint, SweepResult
from .targets import Target, broken_constraints

__all__ = [
    "DEFAULT_HOURS",
    "MAX_HOURS",
    "Calibration",
    "CellCalibration",
    "calibration_compute",
    "calibration_out",
    "why_fixed",
]

logger = logging.getLogger(__name__)

MAX_HOURS: Final = 7 * 24
_CALIBRATED_MODES: Final = ("auto", "draft_refine")


@dataclass(frozen=True, slots=True, kw_only=True)
class CellCalibration:
    """One cell: its current θ, and the sweep's result, or why θ plays no part in it."""

    key: CellKey
    mode: str
    current_threshold: float
    latency_budget_ms: int
    result: SweepResult | None
    skipped: str = ""  # why the cell was not calibrated
    # The cell's rollups over the window (its curve score → draft kept) and their pooling.
    kept: Figures | None = None
    kept_groups: KeptGroups | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Calibration:
    """Every requested cell's calibration over one window, and what it was computed on."""

    fleet: Fleet
    base: PolicyVersion
    target: Target
    start: datetime
    end: datetime
    # The first and the last event of the window: the span its costs per hour are over.
    span: EventSpan
    cost_hours: float  # what the curve's costs per hour are per (the span, or 1 without one)
    price: CloudPrice
    stable_version: int | None  # what the cost is compared with
    events: int
    unreplayable: int
    seconds: float
    cells: list[CellCalibration]
    # The segment it is of (None: the whole fleet), and the cells its override changes in
    # the version calibrated.
    segment: LabSegment | None = None
    overridden: tuple[str, ...] = ()


def _base_version(fleet: Fleet, ref: int | str | None) -> PolicyVersion:
    if ref is not None:
        return version_get(fleet=fleet, ref=ref)
    base = lab_version_default(fleet=fleet)
    if base is None:
        raise Conflict(
            f"Fleet {fleet.slug!r} has no draft and no published version to calibrate.",
            code="nothing_to_calibrate",
            details=[{"field": "version", "message": "nothing to calibrate"}],
        )
    return base


def _stable_cells(
    fleet: Fleet, segment: LabSegment | None
) -> tuple[int | None, dict[CellKey, Cell], dict[CellKey, float]]:
    """The fleet's stable version, its cells (as a device of `segment` runs them) and their
    shadow refine rates (none before its first publish)."""
    routing = FleetRouting.objects.select_related("stable_version").filter(fleet=fleet).first()
    if routing is None or routing.stable_version is None:
        return None, {}, {}
    stable = routing.stable_version
    raw = version_table(version=stable)
    if segment is not None:
        raw, _ = segment_table(version=stable, table=raw, segment=segment.name)
    return stable.number, table_cells(raw), shadow_refine_rates(raw)


def why_fixed(cell: Cell) -> str:
    """Why θ plays no part in this cell's decisions, or "" when it does."""
    if cell.mode not in _CALIBRATED_MODES:
        return f"mode {cell.mode}: θ plays no part"
    if cell.keeps_data_on_device:
        return "sensitive and upload not allowed: every task stays on the device"
    return ""


def calibration_compute(
    *,
    fleet: Fleet,
    target: Target,
    cells: Sequence[CellKey] | None = None,
    hours: int = DEFAULT_HOURS,
    version: int | str | None = None,
    end: datetime | None = None,
    segment: str | None = None,
) -> Calibration:
    """Calibrate θ of `cells` (None: every cell) of the draft (else what devices run, the
    stable version, else the latest published version; or `version`) for `target` over the
    last `hours` of the fleet's events; with `segment`, of its devices' events only, each
    version as a device of the segment runs it."""
    started = time.perf_counter()
    base = _base_version(fleet, version)
    scope = _segment_of(fleet, segment)
    raw_table = version_table(version=base)
    overridden: list[str] = []
    if scope is not None:
        raw_table, overridden = segment_table(version=base, table=raw_table, segment=scope.name)
    table = table_cells(raw_table)
    shadow_rates = shadow_refine_rates(raw_table)
    wanted = _wanted_cells(table, cells, base)
    end = end or timezone.now()
    start = end - timedelta(hours=hours)
    stable_version, stable, stable_shadow = _stable_cells(fleet, scope)
    sweeps = {
        key: CellSweep(
            cell=table[key],
            stable=stable.get(key),
            shadow_rate=shadow_rates.get(key, 0.0),
            stable_shadow_rate=stable_shadow.get(key, 0.0),
        )
        for key in wanted
        if not why_fixed(table[key])
    }
    # The curve score → draft kept of each cell, from the window's rollups (one query; a
    # segment's own rows); the quality target is refused before the sweep when no cell has
    # the reports it needs.
    kept = kept_figures(
        fleet_id=fleet.pk, start=start, end=end, segment=scope.id if scope else ALL_DEVICES
    )
    groups = groups_of_cells(kept, sweeps)
    if target.kind == "quality" and sweeps and not any(g.enough for g in groups.values()):
        raise _too_few_quality_reports(groups)
    model = LatencyModel()
    events, unreplayable, span = _replay(
        fleet=fleet,
        start=start,
        end=end,
        model=model,
        sweeps=sweeps,
        filters=EventFilters(segment_rule=scope.rule if scope else None),
    )
    price = CloudPrice.of_fleet(fleet)
    span_hours = _cost_hours(span, target)
    results = [
        CellCalibration(
            key=key,
            mode=table[key].mode,
            current_threshold=table[key].threshold,
            latency_budget_ms=table[key].latency_budget_ms,
            result=sweeps[key].result(
                target=target, model=model, hours=span_hours, price=price, kept=groups[key]
            )
            if key in sweeps
            else None,
            skipped=why_fixed(table[key]),
            kept=kept.get(key) or Figures(),
            kept_groups=groups.get(key),
        )
        for key in wanted
    ]
    seconds = time.perf_counter() - started
    logger.info(
        "calibration.computed fleet=%s base=%s cells=%d events=%d seconds=%.2f",
        fleet.slug,
        base.label,
        len(sweeps),
        events,
        seconds,
    )
    return Calibration(
        fleet=fleet,
        base=base,
        target=target,
        start=start,
        end=end,
        span=span,
        cost_hours=span_hours,
        price=price,
        stable_version=stable_version,
        events=events,
        unreplayable=unreplayable,
        seconds=seconds,
        cells=results,
        segment=scope,
        overridden=tuple(overridden),
    )


def _wanted_cells(
    table: dict[CellKey, Cell], cells: Sequence[CellKey] | None, base: PolicyVersion
) -> list[CellKey]:
    """The cells asked for (None: every cell of the table); a cell not in the table is a bad
    request naming it."""
    wanted = list(table) if cells is None else list(cells)
    unknown = [index for index, key in enumerate(wanted) if key not in table]
    if unknown:  # well-formed, but not in this table: a bad request naming the cell
        raise ValidationFailed(
            f"{cell_key_label(wanted[unknown[0]])} is not a cell of {base.label}.",
            details=[
                {"field": f"cells[{index}]", "message": f"not a cell of {base.label}"}
                for index in unknown
            ],
        )
    return wanted


def _segment_of(fleet: Fleet, segment: str | None) -> LabSegment | None:
    """The segment a calibration is scoped to (None: the whole fleet)."""
    return None if segment is None else lab_segment(fleet=fleet, name=segment)


def _too_few_quality_reports(groups: dict[CellKey, KeptGroups]) -> Conflict:
    """The refusal of a quality target when no cell has the draft reports it needs."""
    return Conflict(
        f"Too few draft reports to predict device quality: a cell needs "
        f"{MIN_QUALITY_REPORTS:,} scored reports of `refine_changed` in the window.",
        code="too_few_quality_reports",
        details=[
            {"field": "cells", "message": f"{cell_key_label(key)}: {group.refusal()}"}
            for key, group in groups.items()
        ],
    )


def _replay(
    *,
    fleet: Fleet,
    start: datetime,
    end: datetime,
    model: LatencyModel,
    sweeps: dict[CellKey, CellSweep],
    filters: EventFilters,
) -> tuple[int, int, EventSpan]:
    """Replay the window's events into the latency model and the calibrated cells' sweeps;
    the number of events, of unreplayable ones, and the span they cover."""
    events = unreplayable = 0
    # The backtest's hot loop: one reused ReplayInputs per row, no object per event. Every
    # cell's clean runs feed the estimator (a cell without observations borrows the fleet's);
    # only the calibrated cells' events are swept.
    inputs = ReplayInputs(NudgeHistory.of_fleet(fleet_id=fleet.pk, end=end))
    plans: dict[CellKey, tuple[Observed, CellSweep | None]] = {}
    span = EventSpan()
    for rows in recorded_rows(fleet_id=fleet.pk, start=start, end=end, filters=filters):
        events += len(rows)
        span.add(rows)
        for row in rows:
            event = inputs.load(row)
            key = event.cell
            plan = plans.get(key)
            if plan is None:
                plan = plans[key] = (model.of_cell(key), sweeps.get(key))
            observed, cell_sweep = plan
            unreplayable += not event.replayable
            cache_hit = event.cache_hit
            if event.ok and not cache_hit and event.fallback == "none":
                route = event.route
                network = 0.0
                if route != "device":
                    network = network_ms(
                        upload_bytes=event.upload_bytes,
                        bandwidth_kbps=event.bandwidth_kbps,
                        rtt_ms=event.rtt_ms,
                    )
                observed.add(route, event.latency_ms, network)
            if cell_sweep is not None:
                cell_sweep.add(event, event, cache_hit=cache_hit)  # type: ignore[arg-type]
    return events, unreplayable, span


def _cost_hours(span: EventSpan, target: Target) -> float:
    """The hours costs are per: the span that holds data (1.0 under a minute, refused for a
    cost ceiling)."""
    # Costs per hour over the span that holds data, as every cost in the product (pricing).
    # Under a minute of data there is no rate: the sweep's cost "per hour" is then the window's
    # cost, kept for the report's window figures and shown nowhere as a rate (_point_out).
    span_hours = data_span_hours(span.first, span.last)
    if not has_rate(span_hours):
        if target.kind == "cost_ceiling":
            raise Conflict(
                "Too little data for a cost per hour: the window's events span "
                f"{round(span_hours * 3600)} s; a cost ceiling needs a minute at least.",
                code="too_little_data_for_a_rate",
                details=[{"field": "target", "message": "no cost per hour under a minute"}],
            )
        span_hours = 1.0
    return span_hours


def _point_out(point: CurvePoint, *, rate: bool) -> dict[str, Any]:
    return {
        "threshold": point.threshold,
        "alpha": point.alpha,
        "cloud_share": point.cloud_share,
        "draft_refine_share": point.draft_refine_share,
        "p95_ms": point.p95_ms,
        "cost_per_hour": point.cost_per_hour if rate else None,
        "device_quality": point.device_quality,
        "device_quality_low": point.device_quality_low,
        "device_quality_high": point.device_quality_high,
        "device_judged": point.device_judged,
    }


def _quality_out(cell: CellCalibration) -> dict[str, Any] | None:
    """The cell's curve score → draft kept (deciles, Wilson intervals) and what the quality
    target can say of it: the reports behind it, or why it is refused."""
    figures, groups = cell.kept, cell.kept_groups
    if figures is None or groups is None:
        return None
    device_rate, device_reports = figures.device_kept()
    return {
        "device_kept_rate": device_rate,
        "device_reports": device_reports,
        "reports": groups.reports,
        "scored_reports": groups.scored,
        "min_reports": MIN_QUALITY_REPORTS,
        "draft_kept_rate": figures.draft_kept_rate(),
        "groups": len(groups.groups) if groups.enough else 0,
        "refused": groups.refusal(),
        "curve": display_curve(figures),
    }


def _cost(
    calibration: Calibration, *, chosen: float, all_cloud: float, stable: float | None
) -> dict[str, Any]:
    """A cost report at the chosen θ (`chosen`: its cost per hour over the span that holds
    data; `all_cloud` and `stable`: costs over that span)."""
    return cost_report(
        price=calibration.price,
        spent=chosen * calibration.cost_hours,
        all_cloud=all_cloud,
        first=calibration.span.first,
        last=calibration.span.last,
        stable=stable,
    )


def _overall_cost(calibration: Calibration) -> dict[str, Any] | None:
    """The calibrated cells together at their chosen θs; against stable only when every one
    of them has a stable cell."""
    results = [cell.result for cell in calibration.cells if cell.result is not None]
    if not results:
        return None
    stables = [result.stable_cost for result in results]
    return _cost(
        calibration,
        chosen=sum(result.chosen.cost_per_hour for result in results),
        all_cloud=sum(result.all_cloud_cost for result in results),
        stable=None if None in stables else sum(s for s in stables if s is not None),
    )


def _cell_out(cell: CellCalibration, *, calibration: Calibration) -> dict[str, Any]:
    rate = has_rate(data_span_hours(calibration.span.first, calibration.span.last))
    out: dict[str, Any] = {
        "task_type": cell.key[0],
        "latency_budget": cell.key[1],
        "privacy_tier": cell.key[2],
        "mode": cell.mode,
        "current_threshold": cell.current_threshold,
        "latency_budget_ms": cell.latency_budget_ms,
        "calibrated": cell.result is not None,
        "skipped": cell.skipped,
        "quality": _quality_out(cell),
    }
    result = cell.result
    if result is None:
        return {
            **out,
            "events": 0,
            "reached": False,
            "current": None,
            "chosen": None,
            "curve": [],
            "verified": None,
            "cost": None,
            "constraints_broken": [],
        }
    return {
        **out,
        "events": result.events,
        "reached": result.reached,
        "current": _point_out(result.current, rate=rate),
        "chosen": _point_out(result.chosen, rate=rate),
        "curve": [_point_out(point, rate=rate) for point in result.curve],
        "verified": {"events": result.verified_events, "matching": result.verified_matching},
        "cost": _cost(
            calibration,
            chosen=result.chosen.cost_per_hour,
            all_cloud=result.all_cloud_cost,
            stable=result.stable_cost,
        ),
        "constraints_broken": broken_constraints(
            p95_ms=result.chosen.p95_ms, budget_ms=cell.latency_budget_ms
        ),
    }


def calibration_out(calibration: Calibration) -> dict[str, Any]:
    """The API's and the page's shape of a calibration."""
    base = calibration.base
    hours = (calibration.end - calibration.start).total_seconds() / 3600
    return {
        "fleet": calibration.fleet.slug,
        "base": {
            "version": base.number,
            "label": base.label,
            "is_draft": base.is_draft,
            "revision": base.revision if base.is_draft else None,
        },
        "target": {
            "kind": calibration.target.kind,
            "value": calibration.target.value,
            "label": calibration.target.describe(),
        },
        "window": {
            "start": calibration.start.isoformat(),
            "end": calibration.end.isoformat(),
            "hours": hours,
        },
        "currency": calibration.price.currency,
        "stable_version": calibration.stable_version,
        "events": calibration.events,
        "unreplayable_events": calibration.unreplayable,
        "seconds": round(calibration.seconds, 3),
        "cells": [_cell_out(cell, calibration=calibration) for cell in calibration.cells],
        "cost": _overall_cost(calibration),
        "segment": (
            {**calibration.segment.out(), "overridden": list(calibration.overridden)}
            if calibration.segment
            else None
        ),
    }
