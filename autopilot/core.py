"""The autopilot's decisions as pure functions, shared by the service and bench/autopilot.

Nothing here reads a database: a cycle's calibration (the lab's curve per cell) goes in, a
proposal comes out; a rollout's realized figures go in, the misses come out.

**The bound.** For a candidate θ the lab predicts the device quality Q(θ) (the share of the
tasks θ keeps on the device whose draft the cloud would keep) with its standard error σ, from
the cell's shadow-refined sample (lab/calibration/quality.py: score groups of ≥ 30 reports,
independent binomials). The autopilot takes a θ only when the one-sided lower bound
Q − z₁₋δ·σ is at or above the floor, z₁₋δ the standard normal quantile at 1 − δ (δ 0.05:
z 1.645, "the lower 95% bound"). So, up to the estimator's bias and the world's drift over a
cycle, a cycle breaks the quality target with probability at most δ.

**The sample a cell needs.** To tell a kept rate p from the floor f at that confidence, the
half-width z·√(p(1−p)/n) must be at most the resolution m the objective states:
n ≥ z²·p(1−p)/m². At a shadow-refine rate s and D device tasks a day, a window of h hours
gathers s·D·h/24 reports.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from statistics import NormalDist
from typing import Any, ClassVar, Final

__all__ = [
    "CurvePoint",
    "Limits",
    "Proposal",
    "Realized",
    "Tolerance",
    "bound_z",
    "curve_of",
    "misses",
    "propose",
    "quality_low",
    "reports_needed",
    "wilson_high",
]

# The lab's calibration states Q ± 1.96σ: σ is read back from it.
_Z_TWO_SIDED_95: Final = 1.959964


def bound_z(delta: float) -> float:
    """z₁₋δ: the one-sided bound at confidence 1 − δ."""
    return NormalDist().inv_cdf(1.0 - delta)


def reports_needed(*, kept_rate: float, resolution: float, delta: float) -> int:
    """Scored draft reports a cell needs in its window for the bound to resolve the kept rate
    to within `resolution` at confidence 1 − δ (n ≥ z²·p(1−p)/m²; p = ½ at worst)."""
    p = min(max(kept_rate, 0.05), 0.95)
    z = bound_z(delta)
    return max(100, math.ceil(z * z * p * (1.0 - p) / (resolution * resolution)))


def wilson_high(kept: int, reported: int, *, z: float = _Z_TWO_SIDED_95) -> float:
    """The upper end of the Wilson score interval of kept / reported (1 without reports)."""
    if reported <= 0:
        return 1.0
    p = kept / reported
    z2 = z * z
    centre = (p + z2 / (2 * reported)) / (1 + z2 / reported)
    half = z * math.sqrt(p * (1 - p) / reported + z2 / (4 * reported * reported))
    return min(1.0, max(p, centre + half / (1 + z2 / reported)))


@dataclass(frozen=True, slots=True, kw_only=True)
class CurvePoint:
    """One candidate θ of a cell, as the lab's calibration predicts it over the window."""

    threshold: float
    alpha: float
    cloud_share: float
    p95_ms: float | None
    cost_per_day: float | None
    quality: float | None  # predicted device quality; None: too few reports
    quality_high: float | None = None  # the lab's 95% two-sided ends (σ is read from them)
    quality_low_2s: float | None = None

    # The figures a cycle stores (and the page and the API show) of a point.
    STORED: ClassVar[tuple[str, ...]] = (
        "threshold", "alpha", "cloud_share", "p95_ms", "cost_per_day", "quality",
    )  # fmt: skip

    @classmethod
    def from_stored(cls, stored: Mapping[str, Any]) -> CurvePoint:
        """A point back from what a cycle stored of it (`as_dict`; no interval)."""
        return cls(**{name: stored[name] for name in cls.STORED})

    @property
    def sigma(self) -> float | None:
        """The standard error of the predicted quality (from the lab's two-sided interval)."""
        if self.quality is None or self.quality_high is None or self.quality_low_2s is None:
            return None
        # The interval is clipped to [0, 1]: the wider side is the unclipped one.
        half = max(self.quality_high - self.quality, self.quality - self.quality_low_2s)
        return half / _Z_TWO_SIDED_95

    def as_dict(self) -> dict[str, Any]:
        """Stored with a cycle and shown by the page and the API."""
        return _stored(self)


def quality_low(point: CurvePoint, *, delta: float) -> float | None:
    """The one-sided lower bound Q − z₁₋δ·σ of a point's predicted quality."""
    sigma = point.sigma
    if point.quality is None or sigma is None:
        return None
    return point.quality - bound_z(delta) * sigma


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """What an objective asks of one cell (the fleet's objective, per cell)."""

    quality_floor: float = 0.85
    delta: float = 0.05
    max_step: float = 0.05
    margin: float = 0.01  # the α gain whose interval must clear it
    # A dead zone above the floor, so the autopilot does not chase its own sampling error: the
    # current θ breaks the quality target when its bound is below the floor (then it moves
    # down, landing `hysteresis` above it); it moves up only when its own bound is
    # 3·`hysteresis` above the floor (there is room), to the highest α whose bound is
    # 2·`hysteresis` above it; in between it holds.
    hysteresis: float = 0.02
    p95_within_budget: bool = True
    budget_ms: float = math.inf
    cost_per_day_ceiling: float | None = None  # this cell's share of the fleet's ceiling


@dataclass(frozen=True, slots=True, kw_only=True)
class Proposal:
    """What a cycle proposes for one cell: a new θ, or none, and why, with the prediction."""

    threshold_from: float
    threshold_to: float | None  # None: no change
    reason: str
    current: CurvePoint
    predicted: CurvePoint | None
    quality_low: float | None = None
    gain_low: float | None = None  # the lower end of the α gain's 95% interval

    @property
    def changes(self) -> bool:
        """Whether this cell's θ moves."""
        return self.threshold_to is not None


def _meets(point: CurvePoint, limits: Limits, *, slack: float = 0.0) -> tuple[bool, str]:
    low = quality_low(point, delta=limits.delta)
    if low is None:
        return False, "no predicted quality"
    if low < limits.quality_floor - slack:
        return False, f"quality bound {low:.3f} < {limits.quality_floor:.3f}"
    if limits.p95_within_budget and point.p95_ms is not None and point.p95_ms > limits.budget_ms:
        return False, f"P95 {point.p95_ms:.0f} ms over the {limits.budget_ms:.0f} ms budget"
    ceiling = limits.cost_per_day_ceiling
    if ceiling is not None and point.cost_per_day is not None and point.cost_per_day > ceiling:
        return False, f"cost {point.cost_per_day:.2f}/day over {ceiling:.2f}"
    return True, ""


def _gain_low(current: CurvePoint, chosen: CurvePoint, events: int) -> float:
    """The lower end of the 95% interval of the α gain: the share d of the window's tasks
    that change route is a binomial proportion over `events` tasks."""
    gain = chosen.alpha - current.alpha
    moved = abs(gain)
    if events <= 0:
        return -math.inf
    radius = _Z_TWO_SIDED_95 * math.sqrt(max(moved * (1 - moved), 1e-12) / events)
    return gain - radius


def propose(
    *, curve: Sequence[CurvePoint], current_threshold: float, events: int, limits: Limits
) -> Proposal:
    """The θ a cycle proposes for one cell: within `max_step` of the current θ, the highest α
    whose quality bound, P95 and cost meet the objective; moved only when the α gain's
    interval clears the margin, or when the current θ breaks the objective (then the point in
    reach that comes closest to the floor's bound, even at a loss of α)."""
    if not curve:
        raise ValueError("a cell's curve has no points")
    current = min(curve, key=lambda p: abs(p.threshold - current_threshold))
    reach = [p for p in curve if abs(p.threshold - current_threshold) <= limits.max_step + 1e-9]
    if current.quality is None:
        return Proposal(
            threshold_from=current_threshold,
            threshold_to=None,
            reason="too few draft reports to bound the quality",
            current=current,
            predicted=None,
        )
    current_ok, why_not = _meets(current, limits)
    room = _meets(current, limits, slack=-3 * limits.hysteresis)[0]
    if current_ok:
        # Up: to a point whose bound is 2·hysteresis above the floor, as the bound of a point
        # away from the current θ is the less certain (its tasks' reports are fewer).
        meeting = [p for p in reach if _meets(p, limits, slack=-2 * limits.hysteresis)[0]]
    else:
        # Breaking: a quality bound is restored by keeping fewer (easier) tasks on the device,
        # so only lower θs; landing `hysteresis` above the floor where one reaches it.
        if why_not.startswith("quality"):
            reach = [p for p in reach if p.threshold < current.threshold] or [current]
        meeting = [p for p in reach if _meets(p, limits, slack=-limits.hysteresis)[0]] or [
            p for p in reach if _meets(p, limits)[0]
        ]
    if meeting:
        best_alpha = max(p.alpha for p in meeting)
        best = min((p for p in meeting if p.alpha == best_alpha), key=lambda p: p.threshold)
    elif why_not.startswith("P95"):  # nothing in reach meets it: the lowest P95 there
        best = min(reach, key=lambda p: p.p95_ms if p.p95_ms is not None else math.inf)
    elif why_not.startswith("cost"):  # likewise the cheapest
        best = min(reach, key=lambda p: (p.cost_per_day or 0.0, -p.alpha))
    else:
        best = max(
            reach,
            key=lambda p: (quality_low(p, delta=limits.delta) or -1.0, -p.threshold),
        )
    # Every proposal from here on reads the same θ now, point now, point in reach and bound.
    proposal = partial(
        Proposal,
        threshold_from=current_threshold,
        current=current,
        predicted=best,
        quality_low=quality_low(best, delta=limits.delta),
    )
    if not current_ok:
        if abs(best.threshold - current_threshold) < 1e-9:
            return proposal(
                threshold_to=None,
                reason=f"current θ breaks the objective ({why_not}); nothing in reach is better",
            )
        return proposal(
            threshold_to=best.threshold,
            reason=f"current θ breaks the objective ({why_not})",
            gain_low=_gain_low(current, best, events),
        )
    gain_low = _gain_low(current, best, events)
    if not room:
        return proposal(
            threshold_to=None,
            reason=(
                f"held: the quality bound {quality_low(current, delta=limits.delta):.3f} is "
                f"within {3 * limits.hysteresis:.3f} of the floor (no room to raise θ)"
            ),
            gain_low=gain_low,
        )
    if best.alpha <= current.alpha or gain_low <= limits.margin:
        return proposal(
            threshold_to=None,
            reason=(
                f"α gain {best.alpha - current.alpha:+.3f} (95% low {gain_low:+.3f}) does not "
                f"clear the {limits.margin:.3f} margin"
            ),
            gain_low=gain_low,
        )
    return proposal(
        threshold_to=best.threshold,
        reason=f"α {current.alpha:.3f} → {best.alpha:.3f} (95% low of the gain {gain_low:+.3f})",
        gain_low=gain_low,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Realized:
    """What a cell did after the change: the candidate version's own events."""

    events: int
    alpha: float | None
    cloud_share: float | None
    p95_ms: float | None
    quality: float | None  # the device route's kept rate (shadow refines)
    quality_reports: int = 0
    quality_kept: int = 0
    cost_per_day: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    STORED: ClassVar[tuple[str, ...]] = (
        "events", "alpha", "cloud_share", "p95_ms", "quality", "quality_reports", "cost_per_day",
    )  # fmt: skip

    def as_dict(self) -> dict[str, Any]:
        """Stored with a cycle and shown by the page and the API."""
        return _stored(self)


def _stored(figures: CurvePoint | Realized) -> dict[str, Any]:
    """The figures a cycle stores of a point or a realized cell (its class's `STORED`)."""
    return {name: getattr(figures, name) for name in figures.STORED}


@dataclass(frozen=True, slots=True, kw_only=True)
class Tolerance:
    """How far the realized may be from the predicted before the autopilot stops."""

    share: float = 0.05  # α and cloud share, absolute
    p95: float = 0.25  # relative, over the larger of the prediction and the budget
    cost: float = 0.25  # relative


def misses(
    *,
    predicted: CurvePoint,
    predicted_quality_low: float | None,
    realized: Realized,
    budget_ms: float,
    tolerance: Tolerance,
) -> list[str]:
    """Each way the realized cell missed its prediction beyond the tolerance (empty: none)."""
    out: list[str] = []
    for name, want, got in (
        ("α", predicted.alpha, realized.alpha),
        ("cloud share", predicted.cloud_share, realized.cloud_share),
    ):
        if got is not None and abs(got - want) > tolerance.share:
            out.append(
                f"{name} {got:.3f} realized vs {want:.3f} predicted "
                f"(more than {tolerance.share:.2f} apart)"
            )
    if realized.p95_ms is not None and predicted.p95_ms is not None:
        allowed = max(predicted.p95_ms, budget_ms) * (1 + tolerance.p95)
        if realized.p95_ms > allowed:
            out.append(f"P95 {realized.p95_ms:.0f} ms realized, over {allowed:.0f} ms allowed")
    if predicted_quality_low is not None and realized.quality_reports > 0:
        high = wilson_high(realized.quality_kept, realized.quality_reports)
        if high < predicted_quality_low:
            out.append(
                f"quality {realized.quality:.3f} realized (95% high {high:.3f}) below the "
                f"predicted bound {predicted_quality_low:.3f}"
            )
    if (
        realized.cost_per_day is not None
        and predicted.cost_per_day is not None
        and predicted.cost_per_day > 0
        and realized.cost_per_day > predicted.cost_per_day * (1 + tolerance.cost)
    ):
        out.append(
            f"cost {realized.cost_per_day:.2f}/day realized vs {predicted.cost_per_day:.2f} "
            "predicted"
        )
    return out


def _p95s(points: Sequence[Any]) -> list[float | None]:
    """The curve's P95s, those the lab did not predict (it predicts every 0.05 of θ and next
    to its own chosen θ) interpolated linearly by θ between the nearest predicted ones, as the
    lab does for a θ off its points; None outside them."""
    known = [(p.threshold, p.p95_ms) for p in points if p.p95_ms is not None]
    out: list[float | None] = []
    for point in points:
        if point.p95_ms is not None:
            out.append(point.p95_ms)
            continue
        below = [k for k in known if k[0] < point.threshold]
        above = [k for k in known if k[0] > point.threshold]
        if not below or not above:
            out.append(None)
            continue
        (t0, v0), (t1, v1) = below[-1], above[0]
        out.append(v0 + (v1 - v0) * (point.threshold - t0) / (t1 - t0))
    return out


def curve_of(result: Any, *, cost_per_day: bool) -> list[CurvePoint]:
    """The lab's calibration curve of a cell (`lab.calibration.sweep.SweepResult.curve`, read
    by attribute) as the autopilot's points; costs per day where the window has a rate."""
    p95s = _p95s(result.curve)
    return [
        CurvePoint(
            threshold=p.threshold,
            alpha=p.alpha,
            cloud_share=p.cloud_share,
            p95_ms=p95,
            cost_per_day=p.cost_per_hour * 24 if cost_per_day else None,
            quality=p.device_quality,
            quality_high=p.device_quality_high,
            quality_low_2s=p.device_quality_low,
        )
        for p, p95 in zip(result.curve, p95s, strict=True)
    ]
