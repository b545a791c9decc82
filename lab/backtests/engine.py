"""The backtest's one pass over a window of recorded events (docs/lab.md, "Backtest").

Each event's decision is recomputed with `edge_sdk.decision.decide` three times over: under
the subject (a version or the draft), under the stable version, and under the version that
actually ran it (the self-check). Equal cells are decided once. Everything is folded into
per-cell tallies and mergeable sketches as the rows stream by, so memory does not grow with
the events; the figures are computed from them at the end.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from math import ceil, log
from typing import Any, Final

from edge_sdk.decision import Cell, Decision, decide, privacy_violation
from routing_policies.cell_schema import cell_key_label
from routing_policies.pricing import CloudPrice, cost_report
from routing_policies.selectors import sends_sensitive_data_off_device
from telemetry.rollups import LOG_GAMMA, MIN_VALUE, ZERO_INDEX, LatencySketch

from ..estimate import (
    ROUTES,
    CellLoad,
    LatencyModel,
    Observed,
    RouteLoad,
    weighted_quantiles,
)
from ..replay import (
    NO_FILTERS,
    CellKey,
    EventFilters,
    EventSpan,
    NudgeHistory,
    ReplayInputs,
    recorded_rows,
)

__all__ = ["SIDES", "BacktestInput", "backtest_compute"]

# Whose decisions a result shows: what happened, the subject replayed, the stable version
# replayed, and the version that ran each event replayed (the self-check).
SIDES: Final = ("observed", "subject", "stable", "running")
_SENSITIVE: Final = "sensitive"
_INF: Final = math.inf
_QUANTILES: Final = (0.5, 0.95)
Progress = Callable[[int, int], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class BacktestInput:
    """What one backtest replays, over which events, at which price."""

    fleet_id: int
    start: datetime
    end: datetime
    subject: Mapping[CellKey, Cell]
    stable: Mapping[CellKey, Cell]
    # Every published version's cells, by number: the self-check decides with each event's own.
    versions: Mapping[int, Mapping[CellKey, Cell]]
    price: CloudPrice
    filters: EventFilters = NO_FILTERS
    # Each replayed side's `shadow_refine_rate` per cell ("subject", "stable"): the cloud also
    # refines that share of its device answers in the background, at a call's cost.
    shadow_rates: Mapping[str, Mapping[CellKey, float]] = field(default_factory=dict)


@dataclass(slots=True)
class _Tally:
    """One side's counts in one cell."""

    events: int = 0
    routes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ROUTES, 0))
    runs: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ROUTES, 0))  # no cache
    cache_hits: int = 0
    cloud_tokens: int = 0
    cloud_calls: int = 0
    tokens: int = 0  # of every task, cloud or not (what-happened tallies only: all-cloud)
    device_tokens: int = 0  # of the tasks run on the device (replays: shadow refines' cost)
    privacy_violations: int = 0
    fallbacks: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ROUTES, 0))
    uncovered: int = 0  # the side has no cell for these events

    def count(self, route: str, cache_hit: bool, tokens: int) -> None:
        self.events += 1
        self.routes[route] += 1
        self.tokens += tokens
        if cache_hit:
            self.cache_hits += 1
            return
        self.runs[route] += 1
        if route != "device":
            self.cloud_calls += 1
            self.cloud_tokens += tokens


@dataclass(slots=True)
class _Side:
    tallies: dict[CellKey, _Tally] = field(default_factory=dict)
    load: RouteLoad = field(default_factory=RouteLoad)
    shadow_rates: Mapping[CellKey, float] = field(default_factory=dict)

    def tally(self, cell: CellKey) -> _Tally:
        tally = self.tallies.get(cell)
        if tally is None:
            tally = self.tallies[cell] = _Tally()
        return tally


@dataclass(slots=True)
class _Check:
    eligible: int = 0
    agree: int = 0
    eligible_replayable: int = 0
    agree_replayable: int = 0
    unknown_version: int = 0
    mismatches: dict[str, int] = field(default_factory=dict)  # "recorded → replayed": count


class _Plan:
    """Everything one (cell, version that ran) touches per event, looked up once."""

    __slots__ = (
        "cells",
        "key",
        "latency",
        "model",
        "observed",
        "replays",
        "running_cell",
        "running_index",
        "running_load",
        "same",
        "stable",
        "subject",
    )

    def __init__(
        self,
        *,
        key: CellKey,
        observed: _Tally,
        subject_cell: Cell | None,
        stable_cell: Cell | None,
        subject: _Side,
        stable: _Side,
        running_cell: Cell | None,
        running: _Side,
        model: Observed,
        latency: dict[tuple[CellKey, str], LatencySketch],
    ) -> None:
        self.key = key
        self.observed = observed
        self.subject, self.stable = subject, stable
        self.same = subject_cell is stable_cell
        self.replays: list[tuple[Cell, _Tally, CellLoad]] = []
        for side, cell in ((stable, stable_cell), (subject, subject_cell)):
            if side is subject and self.same:
                continue  # the stable version's figures, copied in finish()
            if cell is None:
                side.tally(key)  # counted as uncovered in finish()
                continue
            self.replays.append((cell, side.tally(key), side.load.of_cell(key)))
        self.cells = [cell for cell, _, _ in self.replays]
        # Which replay's decision the self-check can reuse (-1: it decides on its own).
        self.running_index = next(
            (i for i, cell in enumerate(self.cells) if cell is running_cell), -1
        )
        self.running_cell = running_cell
        self.running_load = running.load.of_cell(key)
        self.model = model
        # Clean runs' latencies per route; the device's is the model's device sketch itself.
        self.latency = {"device": model.device}
        for route in ROUTES[1:]:
            self.latency[route] = latency.setdefault((key, route), LatencySketch())
        latency[(key, "device")] = model.device

    def finish(self) -> None:
        """After the loop: an unchanged cell's subject figures are the stable version's; a
        side without the cell counts the cell's events as uncovered."""
        key = self.key
        if self.same:
            self.subject.tallies[key] = self.stable.tallies[key]
            if key in self.stable.load.cells:
                self.subject.load.cells[key] = self.stable.load.cells[key]
        for side in (self.stable, self.subject):
            tally = side.tallies[key]
            if not tally.events:
                tally.uncovered = self.observed.events


def _canonical(cells: Mapping[CellKey, Cell], pool: dict[Cell, Cell]) -> dict[CellKey, Cell]:
    """The same cells, equal ones shared, so that one event's equal cells are decided once."""
    return {key: pool.setdefault(cell, cell) for key, cell in cells.items()}


@dataclass(slots=True, kw_only=True)
class _Replay:
    """One backtest's state as the rows stream by: the cells each side decides with (equal
    ones shared), each side's tallies and loads, the self-check, a _Plan per (cell, version
    that ran)."""

    spec: BacktestInput
    subject_cells: dict[CellKey, Cell]
    stable_cells: dict[CellKey, Cell]
    version_cells: dict[int, dict[CellKey, Cell]]
    inputs: ReplayInputs
    model: LatencyModel
    observed: _Side
    running: _Side
    subject: _Side
    stable: _Side
    # Clean runs' latencies per (cell, route), of the events the self-check replays.
    observed_latency: dict[tuple[CellKey, str], LatencySketch] = field(default_factory=dict)
    check: _Check = field(default_factory=_Check)
    plans: dict[tuple[CellKey, int], _Plan] = field(default_factory=dict)
    span: EventSpan = field(default_factory=EventSpan)
    replayable: int = 0
    done: int = 0

    @classmethod
    def of_spec(cls, spec: BacktestInput) -> _Replay:
        pool: dict[Cell, Cell] = {}
        subject_cells = _canonical(spec.subject, pool)
        stable_cells = _canonical(spec.stable, pool)
        version_cells = {number: _canonical(cells, pool) for number, cells in spec.versions.items()}
        inputs = ReplayInputs(NudgeHistory.of_fleet(fleet_id=spec.fleet_id, end=spec.end))
        return cls(
            spec=spec,
            subject_cells=subject_cells,
            stable_cells=stable_cells,
            version_cells=version_cells,
            inputs=inputs,
            model=LatencyModel(),
            observed=_Side(),
            running=_Side(),
            subject=_Side(shadow_rates=spec.shadow_rates.get("subject", {})),
            stable=_Side(shadow_rates=spec.shadow_rates.get("stable", {})),
        )

    def plan_of(self, key: CellKey, version: int) -> _Plan:
        """The plan of a (cell, version that ran) met for the first time."""
        ran = self.version_cells.get(version)
        plan = _Plan(
            key=key,
            observed=self.observed.tally(key),
            subject_cell=self.subject_cells.get(key),
            stable_cell=self.stable_cells.get(key),
            subject=self.subject,
            stable=self.stable,
            running_cell=ran.get(key) if ran is not None else None,
            running=self.running,
            model=self.model.of_cell(key),
            latency=self.observed_latency,
        )
        self.plans[(key, version)] = plan
        return plan


# Rows replayed before their self-check: few enough that what the self-check keeps of them
# stays in the processor's cache (a whole batch's decisions kept alive: a fifth more CPU time,
# measured with bench/lab).
_SLICE: Final = 512
# What the self-check needs of one clean event, taken in _replay_rows (its ReplayInputs is
# reused by the next row): the plan, the running version's decision, the recorded route and
# decided_by, replayable, ok, latency_ms, the network part and its sketch bucket (or None).
_Checked = tuple[_Plan, Decision, str, str, bool, bool, float, float, int | None]


def backtest_compute(
    spec: BacktestInput, *, total: int = 0, progress: Progress | None = None
) -> dict[str, Any]:
    """Replay the window and return the result document (docs/lab.md describes each figure).

    `total` is the number of events expected (for progress only); `progress(done, total)` is
    called after each batch.
    """
    began = time.perf_counter()
    replay = _Replay.of_spec(spec)
    for rows in recorded_rows(
        fleet_id=spec.fleet_id, start=spec.start, end=spec.end, filters=spec.filters
    ):
        replay.span.add(rows)
        for begin in range(0, len(rows), _SLICE):
            _self_check_rows(replay.check, _replay_rows(replay, rows[begin : begin + _SLICE]))
        replay.done += len(rows)
        if progress is not None:
            progress(replay.done, max(total, replay.done))
    for plan in replay.plans.values():
        plan.finish()
    return _result(replay, began)


def _replay_rows(replay: _Replay, rows: Sequence[tuple[Any, ...]]) -> list[_Checked]:
    """One batch of the hot loop: what happened and each replay, per event (no function call
    per event but `decide`); the clean events the self-check takes, in order."""
    inputs, plans, check = replay.inputs, replay.plans, replay.check
    checked: list[_Checked] = []
    replayable = 0
    for row in rows:
        event = inputs.load(row)
        key = event.cell
        plan = plans.get((key, event.policy_version)) or replay.plan_of(key, event.policy_version)
        route = event.route
        cache_hit = event.cache_hit
        tokens = event.tokens
        clean = not cache_hit and event.fallback == "none"
        # estimate.network_ms, inline (it runs a million times a day of events)
        bandwidth = event.bandwidth_kbps
        network = (
            event.upload_bytes * 8 / bandwidth + event.rtt_ms
            if 0 < bandwidth < _INF
            else event.rtt_ms
        )
        # The network part's sketch bucket (LatencySketch.add's, inline), worked out at
        # the first replayed cloud task that needs it (most events need it once or twice,
        # a cache hit or an event every side keeps on the device never).
        bucket = None
        replayable += event.replayable
        # What happened (_Tally.count, inline).
        observed_tally = plan.observed
        observed_tally.events += 1
        observed_tally.routes[route] += 1
        observed_tally.tokens += tokens
        if cache_hit:
            observed_tally.cache_hits += 1
        else:
            observed_tally.runs[route] += 1
            if route != "device":
                observed_tally.cloud_calls += 1
                observed_tally.cloud_tokens += tokens
            if not clean:
                observed_tally.fallbacks[route] += 1
        # The replays; equal cells are decided once (an unchanged cell's subject figures
        # are the stable version's, filled in after the loop). The self-check reuses the
        # decision of the replay whose cell is the running version's.
        running_index = plan.running_index
        running_decision = None
        for index, (cell, tally, load) in enumerate(plan.replays):
            decision = decide(cell, event, event)  # type: ignore[arg-type]
            if index == running_index:
                running_decision = decision
            replayed = decision.route
            tally.events += 1
            tally.routes[replayed] += 1
            if cache_hit:
                tally.cache_hits += 1
                continue
            tally.runs[replayed] += 1
            load.counts[replayed] += 1
            if replayed == "device":
                tally.device_tokens += tokens
            else:
                tally.cloud_calls += 1
                tally.cloud_tokens += tokens
                if bucket is None:
                    bucket = ceil(log(network) / LOG_GAMMA) if network > MIN_VALUE else ZERO_INDEX
                counts = load.network[replayed].counts
                counts[bucket] = counts.get(bucket, 0) + 1
                if cell.privacy_tier == _SENSITIVE:
                    tally.privacy_violations += privacy_violation(
                        privacy_tier=cell.privacy_tier,
                        upload_allowed=cell.upload_allowed,
                        upload_deidentify=cell.upload_deidentify,
                        left_device=True,
                        deidentified=cell.upload_deidentify,
                    )
        # The self-check: the version that ran it, on what was not a fallback or cache hit.
        if not clean:
            continue
        ran = plan.running_cell
        if ran is None:
            check.unknown_version += 1
            continue
        if running_decision is None:
            running_decision = decide(ran, event, event)  # type: ignore[arg-type]
        checked.append(
            (plan, running_decision, route, event.decided_by, event.replayable, event.ok,
             event.latency_ms, network, bucket)
        )  # fmt: skip
    replay.replayable += replayable
    return checked


def _self_check_rows(check: _Check, checked: list[_Checked]) -> None:
    """The self-check of a batch's clean events, in order: agreement with what was recorded,
    and the clean runs' latencies and the running version's load for the estimator."""
    for plan, decision, route, decided_by, replayable, ok, latency_ms, network, bucket in checked:
        agrees = decision.route == route and decision.decided_by == decided_by
        check.eligible += 1
        check.agree += agrees
        if replayable:
            check.eligible_replayable += 1
            check.agree_replayable += agrees
        if not agrees:
            pair = f"{route}/{decided_by} → {decision.route}/{decision.decided_by}"
            check.mismatches[pair] = check.mismatches.get(pair, 0) + 1
        replayed = decision.route
        if ok:
            # (the device latency sketch is the model's own: one add for both)
            plan.model.add(route, latency_ms, network)
            if route != "device":
                # LatencySketch.add, inline
                latency_bucket = (
                    ZERO_INDEX if latency_ms <= MIN_VALUE else ceil(log(latency_ms) / LOG_GAMMA)
                )
                counts = plan.latency[route].counts
                counts[latency_bucket] = counts.get(latency_bucket, 0) + 1
            running_load = plan.running_load
            running_load.counts[replayed] += 1
            if replayed != "device":
                if bucket is None:
                    bucket = ceil(log(network) / LOG_GAMMA) if network > MIN_VALUE else ZERO_INDEX
                counts = running_load.network[replayed].counts
                counts[bucket] = counts.get(bucket, 0) + 1


def _result(replay: _Replay, began: float) -> dict[str, Any]:
    """The result document of a finished replay (`began`: when it started)."""
    spec, observed, subject, stable = replay.spec, replay.observed, replay.subject, replay.stable
    subject_cells, stable_cells = replay.subject_cells, replay.stable_cells
    figures = _Figures(
        model=replay.model,
        observed=observed,
        observed_latency=replay.observed_latency,
        price=spec.price,
    )
    keys = sorted(observed.tallies)
    result: dict[str, Any] = {
        "events": replay.done,
        "replayable": replay.replayable,
        "overall": {
            "observed": figures.observed(observed),
            "subject": figures.replayed(subject),
            "stable": figures.replayed(stable),
        },
        "cells": [
            {
                "cell": list(key),
                "label": cell_key_label(key),
                # A cell changed in its decision, or only in its shadow refines' rate.
                "changed": subject_cells.get(key) is not stable_cells.get(key)
                or subject.shadow_rates.get(key, 0.0) != stable.shadow_rates.get(key, 0.0),
                "privacy_flag": _privacy_flag(subject_cells.get(key), subject.tallies.get(key)),
                "observed": figures.observed(observed, key=key),
                "subject": figures.replayed(subject, key=key),
                "stable": figures.replayed(stable, key=key),
            }
            for key in keys
        ],
        "self_check": _self_check(
            replay.check,
            figures.replayed(replay.running),
            figures.observed(observed),
            runs={
                route: sum(load.counts[route] for load in replay.running.load.cells.values())
                for route in ROUTES
            },
        ),
        "price": {
            "per_1k_tokens": spec.price.per_1k_tokens,
            "per_call": spec.price.per_call,
            "currency": spec.price.currency,
        },
        "seconds": round(time.perf_counter() - began, 3),
    }
    result["cost"] = _cost(result["overall"], observed, spec, replay.span)
    flagged = [cell["label"] for cell in result["cells"] if cell["privacy_flag"]]
    flagged += [
        cell_key_label(key)
        for key, cell in sorted(subject_cells.items())
        if key not in observed.tallies and sends_sensitive_data_off_device(cell)
    ]
    result["privacy"] = {"flagged_cells": flagged, "ok": not flagged}
    return result


def _cost(
    overall: dict[str, Any], observed: _Side, spec: BacktestInput, span: EventSpan
) -> dict[str, Any]:
    """Each side's cost per hour and day over the span that holds data (the window's first
    event to its last), and its savings against all-cloud (every task of the window a cloud
    call with its tokens) and against the stable version replayed."""
    tallies = observed.tallies.values()
    all_cloud = spec.price.cost(
        tokens=sum(tally.tokens for tally in tallies), calls=sum(tally.events for tally in tallies)
    )
    stable = overall["stable"]["cost"]
    return {
        side: cost_report(
            price=spec.price,
            spent=overall[side]["cost"],
            all_cloud=all_cloud,
            first=span.first,
            last=span.last,
            stable=None if side == "stable" else stable,
        )
        for side in ("observed", "stable", "subject")
    }


def _privacy_flag(cell: Cell | None, tally: _Tally | None) -> bool:
    """The subject would send this cell's sensitive data off the device: replayed events did,
    or the decision would for some task."""
    if cell is None:
        return False
    return bool(tally and tally.privacy_violations) or sends_sensitive_data_off_device(cell)


# --- figures -----------------------------------------------------------------------------------


def _share(part: float, whole: float) -> float | None:
    return part / whole if whole else None


def _relative_error(predicted: float | None, observed: float | None) -> float | None:
    if predicted is None or observed is None or observed <= 0:
        return None
    return abs(predicted - observed) / observed


class _Figures:
    """Each side's figures, for the whole window or one cell."""

    def __init__(
        self,
        *,
        model: LatencyModel,
        observed: _Side,
        observed_latency: Mapping[tuple[CellKey, str], LatencySketch],
        price: CloudPrice,
    ) -> None:
        self.model = model
        self.price = price
        self.observed_latency = observed_latency
        # The observed fallback rate of each (cell, route), and of each route over the fleet
        # (cell None) for cells that never ran that route.
        self.rate: dict[tuple[CellKey | None, str], float] = {}
        fleet = {route: [0, 0] for route in ROUTES}
        for key, tally in observed.tallies.items():
            for route in ROUTES:
                runs = tally.runs[route]
                if runs:
                    self.rate[(key, route)] = tally.fallbacks[route] / runs
                    fleet[route][0] += tally.fallbacks[route]
                    fleet[route][1] += runs
        for route, (falls, runs) in fleet.items():
            self.rate[(None, route)] = falls / runs if runs else 0.0

    def observed(self, side: _Side, *, key: CellKey | None = None) -> dict[str, Any]:
        """What happened: latency quantiles of the clean runs, fallbacks as counted."""
        tallies = self._tallies(side, key)
        latency = {}
        for route in ROUTES:
            merged = LatencySketch()
            for (cell, ran), sketch in self.observed_latency.items():
                if ran == route and (key is None or cell == key):
                    merged.merge(sketch)
            latency[route] = merged.quantiles(_QUANTILES)
        fallbacks = sum(sum(tally.fallbacks.values()) for tally in tallies)
        return _figures(tallies, latency=latency, fallbacks=fallbacks, price=self.price)

    def replayed(self, side: _Side, *, key: CellKey | None = None) -> dict[str, Any]:
        """A replay: latency quantiles by the estimator, fallbacks expected at observed rates."""
        tallies = self._tallies(side, key)
        load = side.load if key is None else side.load.restricted(key)
        latency = {
            route: weighted_quantiles(self.model.predict(load, route), _QUANTILES)
            for route in ROUTES
        }
        expected = shadow_calls = shadow_tokens = 0.0
        for cell, tally in (
            side.tallies.items() if key is None else [(key, tallies[0])] if tallies else []
        ):
            for route in ROUTES:
                rate = self.rate.get((cell, route), self.rate[(None, route)])
                expected += tally.runs[route] * rate
            # Shadow refines: the cell's rate of its device runs, expected (a draw per task).
            shadow = side.shadow_rates.get(cell, 0.0)
            shadow_calls += shadow * tally.runs["device"]
            shadow_tokens += shadow * tally.device_tokens
        return _figures(
            tallies,
            latency=latency,
            fallbacks=expected,
            price=self.price,
            shadow=(shadow_calls, shadow_tokens),
        )

    @staticmethod
    def _tallies(side: _Side, key: CellKey | None) -> list[_Tally]:
        if key is None:
            return list(side.tallies.values())
        tally = side.tallies.get(key)
        return [tally] if tally is not None else []


def _figures(
    tallies: Iterable[_Tally],
    *,
    latency: Mapping[str, list[float | None]],
    fallbacks: float,
    price: CloudPrice,
    shadow: tuple[float, float] = (0.0, 0.0),
) -> dict[str, Any]:
    """One side's figures; `shadow` is its expected shadow refines and their tokens (replays
    of cells with a `shadow_refine_rate`), cloud calls on top of the routed ones."""
    events = cache_hits = tokens = calls = violations = uncovered = 0
    routes = dict.fromkeys(ROUTES, 0)
    for tally in tallies:
        events += tally.events
        for route in ROUTES:
            routes[route] += tally.routes[route]
        cache_hits += tally.cache_hits
        tokens += tally.cloud_tokens
        calls += tally.cloud_calls
        violations += tally.privacy_violations
        uncovered += tally.uncovered
    return {
        "events": events,
        "uncovered": uncovered,
        "routes": routes,
        "alpha": _share(routes["device"], events),
        "cloud_share": _share(routes["cloud"], events),
        "draft_refine_share": _share(routes["draft_refine"], events),
        "cache_hits": cache_hits,
        "latency_ms": {
            route: {"p50": values[0], "p95": values[1]} for route, values in latency.items()
        },
        "fallbacks": fallbacks,
        "cloud_calls": calls,
        "cloud_tokens": tokens,
        "shadow_refines": shadow[0],
        "cost": price.cost(tokens=tokens + shadow[1], calls=calls + shadow[0]),
        "privacy_violations": violations,
    }


def _self_check(
    check: _Check, running: dict[str, Any], observed: dict[str, Any], *, runs: dict[str, int]
) -> dict[str, Any]:
    """The running version replayed against what it did: agreement and latency error."""
    latency: dict[str, Any] = {}
    errors: list[float] = []
    for route in ROUTES:
        seen, predicted = observed["latency_ms"][route], running["latency_ms"][route]
        entry: dict[str, Any] = {"runs": runs[route]}
        for name in ("p50", "p95"):
            error = _relative_error(predicted[name], seen[name])
            entry[name] = {"predicted": predicted[name], "observed": seen[name], "error": error}
            if error is not None:
                errors.append(error)
        latency[route] = entry
    mismatches = sorted(check.mismatches.items(), key=lambda item: -item[1])[:10]
    return {
        "eligible": check.eligible,
        "agree": check.agree,
        "agreement": _share(check.agree, check.eligible),
        "eligible_replayable": check.eligible_replayable,
        "agreement_replayable": _share(check.agree_replayable, check.eligible_replayable),
        "unknown_version": check.unknown_version,
        "mismatches": [{"decisions": pair, "events": count} for pair, count in mismatches],
        "latency": latency,
        "latency_error_max": max(errors) if errors else None,
    }
