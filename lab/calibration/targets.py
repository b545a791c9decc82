"""What a calibration aims at, and how a point of the θ curve is chosen for it.

Five kinds. The quality target (issue #15) is a floor on the predicted device quality: the
share of the tasks a θ keeps on the device whose draft the cloud would have kept, judged by
the cell's curve score → draft kept (quality.py); it is refused in a cell with too few
reports, where `choose` sees no predicted quality and keeps the current θ.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

__all__ = ["TARGET_KINDS", "Figures", "Target", "TargetKind", "broken_constraints", "choose"]

TargetKind: TypeAlias = Literal[
    "alpha", "alpha_within_budget", "cloud_share", "p95_within_budget", "cost_ceiling", "quality"
]
TARGET_KINDS: Final[dict[str, str]] = {
    "alpha": "a device share α (value: 0–1)",
    "alpha_within_budget": "the device share α closest to the value (0–1) whose predicted "
    "P95 is within the cell's latency budget",
    "cloud_share": "a share of tasks that call the cloud (value: 0–1)",
    "p95_within_budget": "the highest α whose predicted P95 is within the cell's budget",
    "cost_ceiling": "the most cloud use whose cost stays at or below a ceiling "
    "(value: currency units per hour, per cell)",
    "quality": "the highest α whose predicted device quality (the share of device answers "
    "whose draft the cloud would keep) is at or above the value (0–1)",
}
# "Reaching" a share target: within one point of it.
SHARE_TOLERANCE: Final = 0.01


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """A calibration target; `value` is None for p95_within_budget."""

    kind: TargetKind
    value: float | None = None

    def describe(self) -> str:
        """How the page and the audit summary name it."""
        if self.kind == "alpha":
            return f"α {self.value:.0%}"
        if self.kind == "alpha_within_budget":
            return f"α {self.value:.0%} within the latency budget"
        if self.kind == "cloud_share":
            return f"cloud share {self.value:.0%}"
        if self.kind == "cost_ceiling":
            return f"cost ≤ {self.value:g}/h per cell"
        if self.kind == "quality":
            return f"highest α with device quality ≥ {self.value:.0%}"
        return "highest α with P95 within budget"


@dataclass(frozen=True, slots=True, kw_only=True)
class Figures:
    """What `choose` reads of one candidate θ."""

    k: int
    alpha: float
    cloud_share: float
    cost_per_hour: float
    p95_ms: float | None
    quality: float | None = None  # predicted device quality; None: not predicted


def _middle_of_best(candidates: Sequence[Figures], distance: Callable[[Figures], float]) -> int:
    """The candidate closest to the target; of a run of equally close ones (a plateau of the
    curve), the middle, so a little new traffic moves the figure least."""
    best = min(distance(c) for c in candidates)
    run = [c.k for c in candidates if distance(c) == best]
    return run[len(run) // 2]


def choose(
    *, target: Target, candidates: Sequence[Figures], budget_ms: float, current: int = 0
) -> tuple[int, bool]:
    """The chosen candidate k for `target` and whether it meets the target (`current`: the
    cell's θ now, kept where the quality target has nothing to judge by)."""
    if target.kind in ("alpha", "cloud_share"):
        wanted = float(target.value or 0.0)

        def distance(c: Figures) -> float:
            share = c.alpha if target.kind == "alpha" else c.cloud_share
            return abs(share - wanted)

        k = _middle_of_best(candidates, distance)
        chosen = next(c for c in candidates if c.k == k)
        return k, distance(chosen) <= SHARE_TOLERANCE
    if target.kind == "cost_ceiling":
        ceiling = float(target.value or 0.0)
        # Cost falls as θ rises: the lowest θ under the ceiling uses the cloud the most.
        affordable = [c for c in candidates if c.cost_per_hour <= ceiling]
        if affordable:
            return min(affordable, key=lambda c: c.k).k, True
        return min(candidates, key=lambda c: (c.cost_per_hour, c.k)).k, False
    if target.kind == "quality":
        floor = float(target.value or 0.0)
        judged = [c for c in candidates if c.quality is not None]
        meeting = [c for c in judged if c.quality is not None and c.quality >= floor]
        if meeting:
            highest = max(c.alpha for c in meeting)
            return min(c.k for c in meeting if c.alpha == highest), True
        if not judged:
            return current, False
        # Not reachable: the best predicted quality (of equals, the most α).
        return max(judged, key=lambda c: (c.quality or 0.0, c.alpha, -c.k)).k, False
    # p95_within_budget and alpha_within_budget: only the candidates whose P95 was evaluated
    # take part.
    evaluated = [c for c in candidates if c.p95_ms is not None]
    within = [c for c in evaluated if c.p95_ms is not None and c.p95_ms <= budget_ms]
    if target.kind == "alpha_within_budget" and within:
        wanted = float(target.value or 0.0)
        k = _middle_of_best(within, lambda c: abs(c.alpha - wanted))
        chosen = next(c for c in within if c.k == k)
        return k, abs(chosen.alpha - wanted) <= SHARE_TOLERANCE
    if within:
        highest = max(c.alpha for c in within)
        return min(c.k for c in within if c.alpha == highest), True
    if not evaluated:
        return 0, False
    return min(evaluated, key=lambda c: (c.p95_ms, c.k)).k, False


def broken_constraints(*, p95_ms: float | None, budget_ms: float) -> list[dict[str, object]]:
    """The constraints of the cell a point breaks, whatever the target: its predicted P95
    over the cell's latency budget (`constraints_broken` of the API; the page's badge says
    it). A P95 not predicted breaks nothing known."""
    if p95_ms is None or p95_ms <= budget_ms:
        return []
    return [
        {
            "constraint": "latency_budget",
            "limit": budget_ms,
            "value": p95_ms,
            "message": f"predicted P95 {p95_ms:,.0f} ms is over the cell's {budget_ms:,.0f} ms "
            "latency budget",
        }
    ]
