"""The latency estimator of the lab: predicted P50/P95 per route for replayed decisions.

A replay knows where each recorded task would run, not how long it would take there. The
estimator (docs/lab.md, "Backtest") answers from the same window's own observations:

- device: the latencies observed for tasks of the same cell answered on the device (route
  `device`, no fallback, no cache hit);
- cloud: the task's own network part, `upload_bytes*8/bandwidth_kbps + rtt_ms` from its
  recorded signals (step 7's formula without the inference estimate), plus the cloud's
  *residual* observed in the same cell: `latency_ms` minus the network part of every task of
  the cell that did run in the cloud (route `cloud`, no fallback, no cache hit), floored at 0;
- draft_refine: the same, with the residuals of the cell's `draft_refine` tasks; a cell that
  never refined uses its own device latency plus its cloud residual (never the fleet's
  draft-refine figures, which are other cells');
- a cell with no observation of a route borrows the fleet's (all cells) figures for it.

Network part and residual are taken as independent: a route's predicted distribution over a
set of tasks is the sum distribution of their network parts and the residuals, computed on a
grid of GRID quantiles of each (GRID² sums, weighted). Every distribution is held in a
mergeable `LatencySketch` (relative accuracy 0.5%), so memory does not grow with events.

`LatencyModel` is fed the observed events (`observe`); `RouteLoad` collects the tasks a replay
sends to each route (`add`); `LatencyModel.predict(load)` gives the distribution as weighted
points, `weighted_quantiles` its P50/P95. The error of this estimator is measured by every
backtest on the version that actually ran (its self-check) and recorded in docs/lab.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from telemetry.rollups import LatencySketch

from .replay import CellKey, RecordedEvent

__all__ = [
    "GRID",
    "ROUTES",
    "CellLoad",
    "LatencyModel",
    "Observed",
    "RouteLoad",
    "network_ms",
    "weighted_quantiles",
]

ROUTES: Final = ("device", "cloud", "draft_refine")
GRID: Final = 64
_QS: Final = tuple((index + 0.5) / GRID for index in range(GRID))
FLEET: Final[CellKey] = ("*", "*", "*")


def network_ms(*, upload_bytes: int, bandwidth_kbps: float, rtt_ms: float) -> float:
    """The network part of a cloud call: upload time plus one round trip (step 7's formula
    without the inference estimate). No bandwidth: the RTT only (the upload is unknown)."""
    if bandwidth_kbps <= 0 or not math.isfinite(bandwidth_kbps):
        return rtt_ms
    return upload_bytes * 8 / bandwidth_kbps + rtt_ms


def _event_network(event: RecordedEvent) -> float:
    return network_ms(
        upload_bytes=event.task.upload_bytes,
        bandwidth_kbps=event.device.bandwidth_kbps,
        rtt_ms=event.device.rtt_ms,
    )


@dataclass(slots=True)
class Observed:
    """One cell's observations: device latencies and cloud residuals per route."""

    device: LatencySketch = field(default_factory=LatencySketch)
    residual: dict[str, LatencySketch] = field(
        default_factory=lambda: {"cloud": LatencySketch(), "draft_refine": LatencySketch()}
    )

    def add(self, route: str, latency_ms: float, network: float) -> None:
        """One clean run (see `LatencyModel.observe_clean`)."""
        if route == "device":
            self.device.add(latency_ms)
        elif route in ("cloud", "draft_refine"):
            self.residual[route].add(latency_ms - network if latency_ms > network else 0.0)


class LatencyModel:
    """What the window observed, per cell (the fleet's is their merge): the estimator's inputs.

    Feed it with `observe` / `observe_clean`, or, in a hot loop, add to the `Observed` of
    `of_cell(cell)` directly; read it (`predict`) once everything is observed.
    """

    __slots__ = ("_cells", "_grid_cache")

    def __init__(self) -> None:
        self._cells: dict[CellKey, Observed] = {}
        self._grid_cache: dict[tuple[CellKey, str], list[float] | None] = {}

    def of_cell(self, cell: CellKey) -> Observed:
        """The cell's observations, to add to."""
        observed = self._cells.get(cell)
        if observed is None:
            observed = self._cells[cell] = Observed()
        self._cells.pop(FLEET, None)  # the fleet's merge is redone at the next read
        self._grid_cache.clear()
        return observed

    def _fleet(self) -> Observed:
        fleet = Observed()
        for key, observed in self._cells.items():
            if key != FLEET:
                fleet.device.merge(observed.device)
                for route, sketch in observed.residual.items():
                    fleet.residual[route].merge(sketch)
        return fleet

    def observe(self, event: RecordedEvent) -> None:
        """Learn from one recorded event (only clean runs count: no fallback, no cache hit)."""
        if event.cache_hit or event.fallback != "none" or not event.ok:
            return
        network = 0.0 if event.route == "device" else _event_network(event)
        self.observe_clean(event.cell, event.route, event.latency_ms, network)

    def observe_clean(self, cell: CellKey, route: str, latency_ms: float, network: float) -> None:
        """Learn from one clean run (ok, no fallback, no cache hit) of `route` in `cell` that
        took `latency_ms`, `network` of it the network part (`network_ms`; 0 on the device)."""
        self.of_cell(cell).add(route, latency_ms, network)

    def observe_all(self, events: Iterable[RecordedEvent]) -> None:
        """`observe` each event."""
        for event in events:
            self.observe(event)

    def _grid(self, cell: CellKey, kind: str) -> list[float] | None:
        """GRID quantiles of the cell's `kind` distribution (device, cloud or draft_refine
        residual), borrowing the fleet's when the cell has none; None when neither has."""
        key = (cell, kind)
        if key in self._grid_cache:
            return self._grid_cache[key]
        if FLEET not in self._cells:
            self._cells[FLEET] = self._fleet()
        grid = self._observed_grid(cell, kind)
        if grid is None and kind == "draft_refine":
            # A cell that never refined: its own device latency plus its cloud residual (each
            # the fleet's where the cell has none), not the fleet's draft-refine figures,
            # which are other cells' devices and budgets (docs/lab.md, "The latency estimator").
            device, cloud = self._grid(cell, "device"), self._grid(cell, "cloud")
            if device is not None and cloud is not None:
                grid = sorted(_sums(device, cloud))[GRID // 2 :: GRID]
        if grid is None and cell != FLEET:
            grid = self._observed_grid(FLEET, kind)
        self._grid_cache[key] = grid
        return grid

    def _observed_grid(self, source: CellKey, kind: str) -> list[float] | None:
        """GRID quantiles of what `source` itself observed of `kind`; None when nothing."""
        observed = self._cells.get(source)
        if observed is None:
            return None
        sketch = observed.device if kind == "device" else observed.residual[kind]
        if not sketch.counts:
            return None
        return [value for value in sketch.quantiles(_QS) if value is not None]

    def predict(self, load: RouteLoad, route: str) -> list[tuple[float, float]]:
        """The predicted latency distribution of the tasks `load` sends to `route`, as
        (value, weight) points whose weights sum to the task count; empty when no task goes
        there or the window observed nothing to predict it from."""
        points: list[tuple[float, float]] = []
        for cell, counts in load.cells.items():
            count = counts.count(route)
            if not count:
                continue
            if route == "device":
                grid = self._grid(cell, "device")
                if grid:
                    weight = count / len(grid)
                    points.extend((value, weight) for value in grid)
                continue
            residual = self._grid(cell, route)
            network = counts.network[route]
            if not residual or not network.counts:
                continue
            net_grid = [value for value in network.quantiles(_QS) if value is not None]
            weight = count / (len(net_grid) * len(residual))
            points.extend((value, weight) for value in _sums(net_grid, residual))
        return points


@dataclass(slots=True)
class CellLoad:
    """The tasks of one cell a replay sends to each route: counts, and network parts of the
    cloud-bound ones."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ROUTES, 0))
    network: dict[str, LatencySketch] = field(
        default_factory=lambda: {"cloud": LatencySketch(), "draft_refine": LatencySketch()}
    )

    def count(self, route: str) -> int:
        return self.counts.get(route, 0)


class RouteLoad:
    """The tasks a replay sends to each route, per cell: counts and network parts."""

    __slots__ = ("cells",)

    def __init__(self) -> None:
        self.cells: dict[CellKey, CellLoad] = {}

    def add(self, event: RecordedEvent, route: str) -> None:
        """One task of `event`'s cell sent to `route` (cache hits are not latency samples:
        leave them out)."""
        self.add_task(event.cell, route, 0.0 if route == "device" else _event_network(event))

    def add_task(self, cell: CellKey, route: str, network: float) -> None:
        """One task of `cell` sent to `route`, `network` its network part (`network_ms`)."""
        load = self.of_cell(cell)
        load.counts[route] += 1
        if route != "device":
            load.network[route].add(network)

    def add_counted(
        self, cell: CellKey, route: str, count: int, network: LatencySketch | None = None
    ) -> None:
        """`count` tasks of `cell` sent to `route` at once, their network parts already in a
        sketch (calibration folds each θ's load from per-breakpoint sums, not event by event)."""
        if count <= 0:
            return
        load = self.of_cell(cell)
        load.counts[route] = load.counts.get(route, 0) + count
        if route != "device" and network is not None:
            load.network[route].merge(network)

    def of_cell(self, cell: CellKey) -> CellLoad:
        """The cell's load, to add to."""
        load = self.cells.get(cell)
        if load is None:
            load = self.cells[cell] = CellLoad()
        return load

    def restricted(self, cell: CellKey) -> RouteLoad:
        """This load restricted to one cell."""
        restricted = RouteLoad()
        if cell in self.cells:
            restricted.cells[cell] = self.cells[cell]
        return restricted


def _sums(first: Sequence[float], second: Sequence[float]) -> list[float]:
    return [a + b for a in first for b in second]


def weighted_quantiles(
    points: Sequence[tuple[float, float]], qs: Sequence[float]
) -> list[float | None]:
    """Quantiles of weighted points (the lower weighted quantile); None for no points."""
    if not points:
        return [None for _ in qs]
    ordered = sorted(points)
    total = sum(weight for _, weight in ordered)
    wanted = sorted(range(len(qs)), key=lambda index: qs[index])
    out: list[float | None] = [ordered[-1][0]] * len(qs)
    seen = 0.0
    cursor = 0
    for value, weight in ordered:  # one pass for every q, in increasing order
        seen += weight
        while cursor < len(wanted) and seen >= qs[wanted[cursor]] * total:
            out[wanted[cursor]] = value
            cursor += 1
        if cursor == len(wanted):
            break
    return out
