"""The θ sweep of one cell over recorded events: α, cloud share, predicted P95 and cost for
every candidate θ, in one pass and bounded memory (docs/lab.md, "Calibration").

Only step 6 of the decision depends on the base θ, and only through `score < clamp(θ + A)`,
where the score and the adjustments A (network raise, load lower, cloud pressure, as
recorded) do not depend on θ. So each event is decided with `edge_sdk.decision.decide` at
θ = 0 (its outcome for a low θ) and, when θ can matter, at θ = 1 (its outcome for a high θ);
its breakpoint `score - A` says from which candidate on the high outcome holds. A breakpoint
that falls on a candidate (within float rounding of decide's own sum) is settled by one more
`decide` at that candidate. Nothing here re-implements the decision: every route counted is
one `decide` returned.

Candidates are θ = k/STEPS for k = 0..STEPS. α, shares and cost are exact at each of them
(difference arrays over breakpoints); the latency load, which the backtest's estimator turns
into a predicted P95, is kept per curve point (every CURVE_EVERY-th candidate) to bound
memory. A reservoir of VERIFY_SAMPLE events is decided again at the chosen θ to check the
sweep event by event.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace
from typing import Any, Final

from edge_sdk.decision import Cell, Decision, DeviceState, TaskSignals, decide
from routing_policies.pricing import CloudPrice
from telemetry.rollups import SCORE_BINS, LatencySketch, bucket_index, score_bin

from ..estimate import ROUTES, LatencyModel, RouteLoad, network_ms, weighted_quantiles
from .quality import KeptGroups, Prediction, predict
from .targets import Figures, Target, choose

__all__ = [
    "CURVE_EVERY",
    "STEPS",
    "VERIFY_SAMPLE",
    "CellSweep",
    "CurvePoint",
    "SweepResult",
    "theta_of",
]

STEPS: Final = 1000
CURVE_EVERY: Final = 10
# Of the curve points, every P95_EVERY-th has its P95 predicted (a prediction sorts a few
# thousand weighted points; the fold between curve points is cheap).
P95_EVERY: Final = 5
_CURVE_POINTS: Final = STEPS // CURVE_EVERY + 1
# decide sums θ and its adjustments in its own order; a breakpoint this close to a candidate
# may fall on either side of it, so decide settles it.
_TIE: Final = 1e-9
VERIFY_SAMPLE: Final = 1000
_CLOUD_ROUTES: Final = ("cloud", "draft_refine")


def theta_of(k: int) -> float:
    """Candidate k as a θ, rounded so that 0.63 is written as 0.63."""
    return round(k / STEPS, 3)


@dataclass(frozen=True, slots=True, kw_only=True)
class CurvePoint:
    """The cell's figures at one θ over the window."""

    threshold: float
    alpha: float  # share of tasks answered on the device
    cloud_share: float  # share that calls the cloud (route cloud or draft_refine)
    draft_refine_share: float
    p95_ms: float | None  # predicted over the cell's tasks; None: not evaluated or unknown
    cost_per_hour: float
    # Predicted device quality of the tasks this θ keeps on the device (quality.py), its 95%
    # interval and how many tasks it judges; None: too few reports, or no task judged.
    device_quality: float | None = None
    device_quality_low: float | None = None
    device_quality_high: float | None = None
    device_judged: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepResult:
    """One cell's calibration: the curve, the current and chosen points, the check."""

    events: int
    curve: list[CurvePoint]
    current: CurvePoint
    chosen: CurvePoint
    reached: bool
    verified_events: int
    verified_matching: int
    all_cloud_cost: float  # every task of the cell a cloud call with its tokens, in the window
    stable_cost: float | None  # the stable version's cell on the same tasks; None: no such cell
    quality_refused: str = ""  # why device quality is not predicted in this cell, or ""


@dataclass(slots=True)
class _Load:
    """Tasks per route with the network parts of the cloud ones: one side of one curve class."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ROUTES, 0))
    network: dict[str, dict[int, int]] = field(
        default_factory=lambda: {route: {} for route in _CLOUD_ROUTES}
    )

    def add(self, route: str, network_index: int) -> None:
        """One task; a cloud one with its network part's sketch bucket."""
        self.counts[route] += 1
        if route in _CLOUD_ROUTES:
            sketch = self.network[route]
            sketch[network_index] = sketch.get(network_index, 0) + 1

    def fold(self, other: _Load, sign: int) -> None:
        """Add (sign 1) or take away (sign -1) another load."""
        for route, count in other.counts.items():
            self.counts[route] += sign * count
        for route, counts in other.network.items():
            mine = self.network[route]
            for index, count in counts.items():
                left = mine.get(index, 0) + sign * count
                if left:
                    mine[index] = left
                else:
                    mine.pop(index, None)


class CellSweep:
    """Accumulates one cell's events (`add`); `result` gives the curve and the chosen θ."""

    def __init__(
        self,
        *,
        cell: Cell,
        stable: Cell | None = None,
        shadow_rate: float = 0.0,
        stable_shadow_rate: float = 0.0,
        seed: int = 0,
    ) -> None:
        self.cell = cell
        self.key = (cell.task_type, cell.latency_budget, cell.privacy_tier)
        # The stable version's cell, for the saving against it: when it differs from this one
        # in θ alone and its θ is a candidate, its cost is the curve's at that candidate;
        # otherwise each task is decided by it too (`_stable_cell`).
        self._stable_k: int | None = None
        self._stable_cell: Cell | None = None
        self._has_stable = stable is not None
        if stable is not None:
            k = round(stable.threshold * STEPS)
            if (
                replace(stable, threshold=cell.threshold) == cell
                and theta_of(k) == stable.threshold
            ):
                self._stable_k = k
            else:
                self._stable_cell = stable
        self._stable_tokens = 0
        self._stable_calls = 0
        self._all_tokens = 0
        # Shadow refines (the cell's `shadow_refine_rate` of its device answers, not cache
        # hits) cost a cloud call each: the device runs' calls and tokens per candidate are
        # kept only where a rate needs them.
        self._shadow_rate = shadow_rate
        self._stable_shadow_rate = stable_shadow_rate if stable is not None else 0.0
        self._track_device = shadow_rate > 0 or (
            self._stable_k is not None and self._stable_shadow_rate > 0
        )
        self._device_tokens = [0] * (STEPS + 2) if self._track_device else []
        self._device_calls = [0] * (STEPS + 2) if self._track_device else []
        self._stable_device_tokens = 0
        self._stable_device_calls = 0
        self._low_cell = replace(cell, threshold=0.0)
        self._high_cell = replace(cell, threshold=1.0)
        self.events = 0
        # Difference arrays over k = 0..STEPS (one spare slot): route counts, cloud tokens
        # and calls (cache hits make no call).
        self._routes: dict[str, list[int]] = {route: [0] * (STEPS + 2) for route in ROUTES}
        self._tokens = [0] * (STEPS + 2)
        self._calls = [0] * (STEPS + 2)
        # Device tasks with a score, per score bin: difference arrays over k (quality target).
        self._device_bins: dict[int, list[int]] = {}
        # Latency loads by curve class c (the first curve point m with m*CURVE_EVERY >= the
        # event's first high candidate): low at curve points m < c, high at m >= c.
        self._low: dict[int, _Load] = {}
        self._high: dict[int, _Load] = {}
        self._sample: list[tuple[Any, ...]] = []
        self._random = random.Random(seed)
        self._next_sampled = 0  # the reservoir takes the event after this many
        self._weight = 0.0
        self._tie_cells: dict[int, Cell] = {}

    def add(self, task: TaskSignals, device: DeviceState, *, cache_hit: bool) -> None:
        """Decide one task of this cell at both ends of θ and file its two outcomes.

        `task` and `device` may be one `replay.ReplayInputs` (it has both's attributes),
        reused row after row: nothing here keeps a reference to them. The hot loop of a
        calibration: the filing is written out here rather than in helpers.
        """
        low_decision = decide(self._low_cell, task, device)
        low = low_decision.route
        self._all_tokens += task.tokens
        stable_cell = self._stable_cell
        if stable_cell is not None and not cache_hit:
            stable_route = decide(stable_cell, task, device).route
            if stable_route in _CLOUD_ROUTES:
                self._stable_tokens += task.tokens
                self._stable_calls += 1
            elif self._stable_shadow_rate:
                self._stable_device_tokens += task.tokens
                self._stable_device_calls += 1
        first_high = self._first_high(task, device, low_decision)
        if 0 < first_high <= STEPS:
            high = decide(self._high_cell, task, device).route
        else:
            first_high, high = 0, low  # the same outcome at every candidate
        self.events += 1
        # Route counts: low over [0, first_high), high over [first_high, STEPS].
        routes = self._routes
        if first_high:
            counts = routes[low]
            counts[0] += 1
            counts[first_high] -= 1
        counts = routes[high]
        counts[first_high] += 1
        counts[STEPS + 1] -= 1
        if (low == "device" or high == "device") and low_decision.score is not None:
            # The device tasks' score bins, for the predicted device quality (quality.py).
            score_index = score_bin(low_decision.score)
            by_bin = self._device_bins.get(score_index)
            if by_bin is None:
                by_bin = self._device_bins[score_index] = [0] * (STEPS + 2)
            if low == "device" and first_high:
                by_bin[0] += 1
                by_bin[first_high] -= 1
            if high == "device":
                by_bin[first_high] += 1
                by_bin[STEPS + 1] -= 1
        if not cache_hit:
            low_cloud, high_cloud = low in _CLOUD_ROUTES, high in _CLOUD_ROUTES
            if self._track_device and not (low_cloud and high_cloud):
                tokens = task.tokens
                if not low_cloud and first_high:
                    self._device_tokens[0] += tokens
                    self._device_tokens[first_high] -= tokens
                    self._device_calls[0] += 1
                    self._device_calls[first_high] -= 1
                if not high_cloud:
                    self._device_tokens[first_high] += tokens
                    self._device_tokens[STEPS + 1] -= tokens
                    self._device_calls[first_high] += 1
                    self._device_calls[STEPS + 1] -= 1
            if low_cloud or high_cloud:
                tokens = task.tokens
                if low_cloud and first_high:
                    self._tokens[0] += tokens
                    self._tokens[first_high] -= tokens
                    self._calls[0] += 1
                    self._calls[first_high] -= 1
                if high_cloud:
                    self._tokens[first_high] += tokens
                    self._tokens[STEPS + 1] -= tokens
                    self._calls[first_high] += 1
                    self._calls[STEPS + 1] -= 1
                index = bucket_index(
                    network_ms(
                        upload_bytes=task.upload_bytes,
                        bandwidth_kbps=device.bandwidth_kbps,
                        rtt_ms=device.rtt_ms,
                    )
                )
            else:
                index = 0
            # Latency load by curve class c: low at curve points m < c, high from c on.
            curve_class = -(-first_high // CURVE_EVERY)
            if curve_class > 0:
                load = self._low.get(curve_class)
                if load is None:
                    load = self._low[curve_class] = _Load()
                load.add(low, index)
            if curve_class < _CURVE_POINTS:
                load = self._high.get(curve_class)
                if load is None:
                    load = self._high[curve_class] = _Load()
                load.add(high, index)
        if self.events > self._next_sampled:
            self._keep_sample(task, device, first_high, low, high)

    def _first_high(self, task: TaskSignals, device: DeviceState, low_decision: Decision) -> int:
        """The first candidate k at which the event takes its high-θ outcome."""
        score = low_decision.score
        if score is None:
            return 0  # decided before the score (policy, privacy, offline): θ plays no part
        if score >= 1.0:
            return STEPS + 1  # no θ in [0, 1] puts the score below the clamped threshold
        shift = 0.0
        for name, delta in low_decision.adjustments:
            if name != "clamp":
                shift += delta
        breakpoint_ = (score - shift) * STEPS  # on the device when k > breakpoint_
        nearest = round(breakpoint_)
        if abs(breakpoint_ - nearest) < _TIE * STEPS and 0 <= nearest <= STEPS:
            at = decide(self._cell_at(nearest), task, device)
            below = at.score is not None and at.threshold is not None and at.score < at.threshold
            return nearest if below else nearest + 1
        if breakpoint_ < 0:
            return 0
        return min(STEPS + 1, math.floor(breakpoint_) + 1)

    def _cell_at(self, k: int) -> Cell:
        cell = self._tie_cells.get(k)
        if cell is None:
            cell = self._tie_cells[k] = replace(self.cell, threshold=theta_of(k))
        return cell

    def _keep_sample(
        self, task: TaskSignals, device: DeviceState, first_high: int, low: str, high: str
    ) -> None:
        """Reservoir sampling (Li's algorithm L): every task has the same chance to be checked
        afterwards, and only the tasks taken cost anything (a frozen copy of their inputs)."""
        # A plain tuple (the frozen inputs are built only to check them, in `_verify`).
        entry = (
            task.tokens,
            task.intent_conf,
            task.lm_conf,
            task.upload_bytes,
            device.rtt_ms,
            device.bandwidth_kbps,
            device.device_load,
            device.online,
            device.cloud_infer_ms,
            device.cloud_pressure,
            first_high,
            low,
            high,
        )
        if len(self._sample) < VERIFY_SAMPLE:
            self._sample.append(entry)
            if len(self._sample) == VERIFY_SAMPLE:
                self._weight = math.exp(math.log(self._random.random()) / VERIFY_SAMPLE)
                self._skip()
            else:
                self._next_sampled = self.events
            return
        self._sample[self._random.randrange(VERIFY_SAMPLE)] = entry
        self._weight *= math.exp(math.log(self._random.random()) / VERIFY_SAMPLE)
        self._skip()

    def _skip(self) -> None:
        gap = math.floor(math.log(self._random.random()) / math.log(1 - self._weight))
        self._next_sampled = self.events + gap

    # --- the curve ------------------------------------------------------------------------

    def _p95s(self, model: LatencyModel, wanted: set[int]) -> dict[int, float | None]:
        """Predicted P95 at the `wanted` curve points, folding the loads from one curve point
        to the next (a fold is cheap; a prediction is not, so only those asked for)."""
        running = _Load()
        for load in self._low.values():  # every class > 0: low at curve point 0
            running.fold(load, 1)
        if 0 in self._high:
            running.fold(self._high[0], 1)
        out: dict[int, float | None] = {}
        for m in range(max(wanted, default=-1) + 1):
            if m > 0:
                if m in self._high:
                    running.fold(self._high[m], 1)
                if m in self._low:
                    running.fold(self._low[m], -1)
            if m in wanted:
                out[m] = self._p95_of(running, model)
        return out

    def _p95_of(self, load: _Load, model: LatencyModel) -> float | None:
        route_load = RouteLoad()
        for route in ROUTES:
            network = LatencySketch(load.network[route]) if route in _CLOUD_ROUTES else None
            route_load.add_counted(self.key, route, load.counts[route], network)
        points = [point for route in ROUTES for point in model.predict(route_load, route)]
        return weighted_quantiles(points, [0.95])[0]

    def _qualities(self, kept: KeptGroups) -> list[Prediction | None]:
        """Predicted device quality at every candidate k (quality.predict over the device
        tasks of each group at k)."""
        per_group = [[0] * (STEPS + 1) for _ in kept.groups]
        for index, diff in self._device_bins.items():
            target = per_group[kept.group_of[min(index, SCORE_BINS - 1)]]
            running = 0
            for k in range(STEPS + 1):
                running += diff[k]
                if running:
                    target[k] += running
        return [predict(kept, [counts[k] for counts in per_group]) for k in range(STEPS + 1)]

    def result(
        self,
        *,
        target: Target,
        model: LatencyModel,
        hours: float,
        price: CloudPrice,
        kept: KeptGroups | None = None,
    ) -> SweepResult:
        """The curve, the chosen point for `target` and the reservoir check at it.

        P95 is predicted at every P95_EVERY-th curve point, refined to every curve point
        next to the chosen θ (for the P95 target, between the last coarse point within the
        budget and the next one), and interpolated by θ between two curve points.
        """
        current_k = min(STEPS, max(0, round(self.cell.threshold * STEPS)))
        refused = "no reports of the draft kept" if kept is None else kept.refusal()
        curve = _Curve(
            total=max(1, self.events),
            routes={route: _prefix(diff) for route, diff in self._routes.items()},
            tokens=_prefix(self._tokens),
            calls=_prefix(self._calls),
            device_tokens=_prefix(self._device_tokens) if self._track_device else [],
            device_calls=_prefix(self._device_calls) if self._track_device else [],
            price=price,
            hours=hours,
            shadow=self._shadow_rate,
            p95s=self._p95s(model, {*range(0, _CURVE_POINTS, P95_EVERY), *_around(current_k)}),
            qualities=(
                self._qualities(kept) if kept is not None and not refused else [None] * (STEPS + 1)
            ),
        )
        chosen_k, reached = self._choose(curve, target=target, model=model, current_k=current_k)
        matching = self._verify(chosen_k)
        return SweepResult(
            events=self.events,
            curve=[curve.point(m * CURVE_EVERY) for m in range(_CURVE_POINTS)],
            current=curve.point(current_k),
            chosen=curve.point(chosen_k),
            reached=reached and self.events > 0,
            verified_events=len(self._sample),
            verified_matching=matching,
            all_cloud_cost=price.cost(tokens=self._all_tokens, calls=self.events),
            stable_cost=self._stable_cost(curve),
            quality_refused=refused,
        )

    def _choose(
        self, curve: _Curve, *, target: Target, model: LatencyModel, current_k: int
    ) -> tuple[int, bool]:
        """The candidate k chosen for `target`, and whether it reaches it; the P95s next to
        it are predicted into `curve` (and the choice made again with them)."""
        p95s = curve.p95s
        budget = self.cell.latency_budget_ms
        chosen_k, reached = choose(
            target=target, candidates=curve.candidates(), budget_ms=budget, current=current_k
        )
        wanted = set(_around(chosen_k))
        if target.kind == "p95_within_budget":
            coarse = chosen_k // CURVE_EVERY
            wanted.update(range(coarse, min(_CURVE_POINTS, coarse + P95_EVERY + 1)))
        elif target.kind == "alpha_within_budget":
            # The closest α within budget may lie between two coarse points on either side.
            coarse = chosen_k // CURVE_EVERY
            wanted.update(
                range(max(0, coarse - P95_EVERY), min(_CURVE_POINTS, coarse + P95_EVERY + 1))
            )
        if wanted - set(p95s):
            p95s.update(self._p95s(model, wanted - set(p95s)))
            chosen_k, reached = choose(
                target=target, candidates=curve.candidates(), budget_ms=budget, current=current_k
            )
            p95s.update(self._p95s(model, set(_around(chosen_k)) - set(p95s)))
        return chosen_k, reached

    def _stable_cost(self, curve: _Curve) -> float | None:
        """The stable version's cost over the window (None without a stable version)."""
        if self._stable_k is not None:
            return curve.cost_at(self._stable_k, self._stable_shadow_rate)
        if self._has_stable:
            rate = self._stable_shadow_rate
            return curve.price.cost(
                tokens=self._stable_tokens + rate * self._stable_device_tokens,
                calls=self._stable_calls + rate * self._stable_device_calls,
            )
        return None

    def _verify(self, k: int) -> int:
        """How many reservoir events `decide` routes at candidate k as the sweep says."""
        cell = replace(self.cell, threshold=theta_of(k))
        matching = 0
        for (tokens, intent, lm, upload, rtt, bandwidth, load, online, infer, pressure,
             first_high, low, high) in self._sample:  # fmt: skip
            task = TaskSignals(tokens=tokens, intent_conf=intent, lm_conf=lm, upload_bytes=upload)
            device = DeviceState(
                rtt_ms=rtt,
                bandwidth_kbps=bandwidth,
                device_load=load,
                online=online,
                cloud_infer_ms=infer,
                cloud_pressure=pressure,
            )
            expected = high if k >= first_high else low
            if decide(cell, task, device).route == expected:
                matching += 1
        return matching


def _around(k: int) -> tuple[int, int]:
    """The curve points at and around candidate k."""
    return (k // CURVE_EVERY, -(-k // CURVE_EVERY))


@dataclass(slots=True, kw_only=True)
class _Curve:
    """One result's figures at every candidate k: prefix sums of the sweep's counts, the
    predicted P95 at the curve points asked for so far, the predicted device quality."""

    total: int
    routes: dict[str, list[int]]
    tokens: list[int]
    calls: list[int]
    device_tokens: list[int]  # empty unless the sweep tracks the device runs
    device_calls: list[int]
    price: CloudPrice
    hours: float
    shadow: float
    p95s: dict[int, float | None]
    qualities: list[Prediction | None]

    def cost_at(self, k: int, rate: float) -> float:
        """The routed cloud calls at candidate k, and `rate` of its device runs refined."""
        if not rate:
            return self.price.cost(tokens=self.tokens[k], calls=self.calls[k])
        return self.price.cost(
            tokens=self.tokens[k] + rate * self.device_tokens[k],
            calls=self.calls[k] + rate * self.device_calls[k],
        )

    def candidates(self) -> list[Figures]:
        routes, total, p95s, qualities = self.routes, self.total, self.p95s, self.qualities
        return [
            Figures(
                k=k,
                alpha=routes["device"][k] / total,
                cloud_share=(routes["cloud"][k] + routes["draft_refine"][k]) / total,
                cost_per_hour=self.cost_at(k, self.shadow) / self.hours,
                p95_ms=p95s.get(k // CURVE_EVERY) if k % CURVE_EVERY == 0 else None,
                quality=quality.quality if (quality := qualities[k]) else None,
            )
            for k in range(STEPS + 1)
        ]

    def p95_between(self, k: int) -> float | None:
        """At a curve point, its P95; between two, interpolated by θ (docs/lab.md)."""
        below = self.p95s.get(k // CURVE_EVERY)
        above = self.p95s.get(-(-k // CURVE_EVERY))
        if below is None or above is None:
            return below if above is None else above
        return below + (above - below) * (k % CURVE_EVERY) / CURVE_EVERY

    def point(self, k: int) -> CurvePoint:
        routes, total = self.routes, self.total
        quality = self.qualities[k]
        return CurvePoint(
            threshold=theta_of(k),
            alpha=routes["device"][k] / total,
            cloud_share=(routes["cloud"][k] + routes["draft_refine"][k]) / total,
            draft_refine_share=routes["draft_refine"][k] / total,
            p95_ms=self.p95_between(k) if k % CURVE_EVERY else self.p95s.get(k // CURVE_EVERY),
            cost_per_hour=self.cost_at(k, self.shadow) / self.hours,
            device_quality=quality.quality if quality else None,
            device_quality_low=quality.low if quality else None,
            device_quality_high=quality.high if quality else None,
            device_judged=quality.tasks if quality else 0,
        )


def _prefix(diff: list[int]) -> list[int]:
    out, running = [], 0
    for value in diff[: STEPS + 1]:
        running += value
        out.append(running)
    return out
