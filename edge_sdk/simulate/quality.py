"""The device model's quality, as the simulated cloud judges it: how often it keeps a draft.

The small model's drafts get worse as the task gets harder, i.e. as the decision's score
rises (longer, less certain tasks). Per cell the chance that the cloud keeps the device's
draft unchanged is a line in the score, clamped to [0, 1]:

    p_keep(score) = clamp(a - b * score)

with `a` and `b` per task type (`KEEP_CURVES`; an operator's own task types are text) and,
for a "degraded device model" (scenario `degraded-model`), `drop` subtracted from it. The
simulated cloud refine draws `changed` from it (and an edit ratio when it changed), and the
simulated app reports a quality drawn around it for device answers. `true_kept_rate(cell,
score)` is the curve itself, so tests and the lab can compare what the fleet measured with
the truth.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from .models import modality

__all__ = [
    "CLOUD_QUALITY",
    "DEGRADED_DROP",
    "DEGRADED_QUALITY",
    "KEEP_CURVES",
    "STABLE_QUALITY",
    "KeepCurve",
    "QualityModel",
    "true_kept_rate",
]


def _clamp(value: float) -> float:
    return 0.0 if value < 0.0 else 1.0 if value > 1.0 else value


@dataclass(frozen=True, slots=True)
class KeepCurve:
    """p_keep(score) = clamp(a - b * score): the chance the cloud keeps a draft unchanged."""

    a: float
    b: float

    def kept_rate(self, score: float, drop: float = 0.0) -> float:
        """The chance at `score` (0..1), lowered by `drop`."""
        return _clamp(self.a - self.b * score - drop)


# Short voice commands the small model gets right; images it gets wrong more often.
KEEP_CURVES: Final[Mapping[str, KeepCurve]] = {
    "voice": KeepCurve(0.95, 0.60),
    "text": KeepCurve(0.90, 0.70),
    "image": KeepCurve(0.85, 0.80),
}
DEGRADED_DROP: Final = 0.30  # the degraded model's drafts are kept 30 points less often
# The large model's answers, as the app rates them (mean, spread).
CLOUD_QUALITY: Final = (0.92, 0.05)
_QUALITY_SPREAD: Final = 0.10  # the app's rating of a device answer around p_keep


def _key(cell: Any) -> tuple[str, str, str]:
    """A cell key from a key tuple, or from anything with the three dimension attributes."""
    if isinstance(cell, tuple):
        return (str(cell[0]), str(cell[1]), str(cell[2]))
    return (cell.task_type, cell.latency_budget, cell.privacy_tier)


@dataclass(frozen=True, slots=True, kw_only=True)
class QualityModel:
    """A device model's quality per cell: its keep curve (per task type, or per cell where
    `cells` names one) and how much lower than that it is (`drop`)."""

    curves: Mapping[str, KeepCurve] = field(default_factory=lambda: dict(KEEP_CURVES))
    cells: Mapping[tuple[str, str, str], KeepCurve] = field(default_factory=dict)
    drop: float = 0.0

    def curve(self, cell: Any) -> KeepCurve:
        """The keep curve of a cell (a key tuple or a `Cell`/`Task`)."""
        key = _key(cell)
        return self.cells.get(key) or self.curves[modality(key[0])]

    def kept_rate(self, cell: Any, score: float) -> float:
        """The true chance that the cloud keeps a draft of this cell at this score."""
        return self.curve(cell).kept_rate(score, self.drop)

    def draw_refine(self, rng: random.Random, cell: Any, score: float) -> tuple[bool, float]:
        """One cloud refine of a draft: (changed, edit ratio; 0 when kept). A changed draft
        is edited more the harder the task was."""
        if rng.random() < self.kept_rate(cell, score):
            return False, 0.0
        return True, _clamp(0.05 + rng.betavariate(2.0, 5.0) * (0.5 + score))

    def draw_quality(
        self, rng: random.Random, cell: Any, score: float, *, on_device: bool
    ) -> float:
        """The app's rating (0..1) of an answer: around p_keep for a device answer, around
        CLOUD_QUALITY for the cloud's."""
        if on_device:
            return _clamp(rng.gauss(self.kept_rate(cell, score), _QUALITY_SPREAD))
        mean, spread = CLOUD_QUALITY
        return _clamp(rng.gauss(mean, spread))


STABLE_QUALITY: Final = QualityModel()
DEGRADED_QUALITY: Final = QualityModel(drop=DEGRADED_DROP)


def true_kept_rate(cell: Any, score: float, model: QualityModel = STABLE_QUALITY) -> float:
    """The simulator's true curve: the chance the cloud keeps a draft of `cell` at `score`
    (the stable device model unless another `model` is given, e.g. DEGRADED_QUALITY)."""
    return model.kept_rate(cell, score)
