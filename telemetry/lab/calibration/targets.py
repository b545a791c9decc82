"""What a calibration aims at, and how a point of the θ curve is chosen for it.

Four kinds today. A quality target (a floor on the share of device answers the cloud would
not have changed) follows the quality signal of issue #15: it is one more entry of
TARGET_KINDS and one more `choose` branch over the same curve.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

__all__ = ["TARGET_KINDS", "Figures", "Target", "TargetKind", "choose"]

TargetKind: TypeAlias = Literal["alpha", "cloud_share", "p95_within_budget", "cost_ceiling"]
TARGET_KINDS: Final[dict[str, str]] = {
    "alpha": "a device share α (value: 0–1)",
    "cloud_share": "a share of tasks that call the cloud (value: 0–1)",
    "p95_within_budget": "the highest α whose predicted P95 is within the cell's budget",
    "cost_ceiling": "the most cloud use whose cost stays at or below a ceiling "
    "(value: currency units per hour, per cell)",
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
        if self.kind == "cloud_share":
            return f"cloud share {self.value:.0%}"
        if self.kind == "cost_ceiling":
            return f"cost ≤ {self.value:g}/h per cell"
        return "highest α with P95 within budget"


@dataclass(frozen=True, slots=True, kw_only=True)
class Figures:
    """What `choose` reads of one candidate θ."""

    k: int
    alpha: float
    cloud_share: float
    cost_per_hour: float
    p95_ms: float | None


def _middle_of_best(candidates: Sequence[Figures], distance: Callable[[Figures], float]) -> int:
    """The candidate closest to the target; of a run of equally close ones (a plateau of the
    curve), the middle, so a little new traffic moves the figure least."""
    best = min(distance(c) for c in candidates)
    run = [c.k for c in candidates if distance(c) == best]
    return run[len(run) // 2]


def choose(*, target: Target, candidates: Sequence[Figures], budget_ms: float) -> tuple[int, bool]:
    """The chosen candidate k for `target` and whether it meets the target."""
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
    # p95_within_budget: only the candidates whose P95 was evaluated take part.
    evaluated = [c for c in candidates if c.p95_ms is not None]
    within = [c for c in evaluated if c.p95_ms is not None and c.p95_ms <= budget_ms]
    if within:
        highest = max(c.alpha for c in within)
        return min(c.k for c in within if c.alpha == highest), True
    if not evaluated:
        return 0, False
    return min(evaluated, key=lambda c: (c.p95_ms, c.k)).k, False
