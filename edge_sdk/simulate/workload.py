"""What the simulated fleet asks its models to do: a task mix over the policy's cells and
the signals each task carries.

The mix is read from the dimensions of the policy document the device received, so a fleet
whose operators added a task type (`code`) or a privacy tier sees tasks in those cells too.
Signals follow the seed's examples: short, confident intents ("turn on the light": 20 tokens,
intent 0.98, lm 0.95) and long, uncertain requests (700 tokens, 0.40, 0.30), with questions
in between. A *less confident model* (the buggy candidate) draws its confidences from the same
distributions scaled down, which moves scores up and tasks to the cloud.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from .models import modality, model_table, pick_weighted

__all__ = [
    "BUGGY_MODEL",
    "KINDS",
    "STABLE_MODEL",
    "CellKey",
    "ModelConfidence",
    "RequestKind",
    "TaskDraw",
    "Workload",
]

CellKey = tuple[str, str, str]


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestKind:
    """A family of requests: a length distribution and how sure the small model is."""

    name: str
    tokens_median: float
    tokens_sigma: float  # of the log-normal
    tokens_max: int
    intent_mean: float  # Beta mean of the intent classifier's confidence
    lm_mean: float  # Beta mean of the small model's own confidence
    concentration: float  # Beta a + b: higher is tighter around the mean


KINDS: Final = {
    kind.name: kind
    for kind in model_table(
        RequestKind,
        (
            "name",
            "tokens_median",
            "tokens_sigma",
            "tokens_max",
            "intent_mean",
            "lm_mean",
            "concentration",
        ),
        ("intent", 18, 0.6, 120, 0.93, 0.9, 30),
        ("question", 150, 0.45, 600, 0.82, 0.7, 14),
        ("request", 480, 0.5, 4000, 0.6, 0.5, 8),
    )
}

# Per modality: how often each kind of request comes up.
_KIND_MIX: Final = {
    "voice": (("intent", 0.7), ("question", 0.25), ("request", 0.05)),
    "text": (("intent", 0.05), ("question", 0.45), ("request", 0.5)),
    "image": (("intent", 0.2), ("question", 0.5), ("request", 0.3)),
}
# Shares of the seed's dimension values; values an operator added get _OTHER_WEIGHT.
_VALUE_WEIGHTS: Final = {
    "task_type": {"voice": 0.15, "text": 0.72, "image": 0.13},
    "latency_budget": {"interactive": 0.7, "background": 0.3},
    "privacy_tier": {"sensitive": 0.25, "normal": 0.75},
}
_OTHER_WEIGHT: Final = 0.1
_DIMENSIONS: Final = ("task_type", "latency_budget", "privacy_tier")
# Popular short voice intents repeat ("what's the weather"): these get a cache key.
_CACHEABLE_SHARE: Final = 0.3
_COMMON_PHRASES: Final = 40


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelConfidence:
    """The on-device model's calibration: its confidences are drawn, then scaled by these."""

    name: str
    intent_scale: float = 1.0
    lm_scale: float = 1.0


STABLE_MODEL: Final = ModelConfidence(name="stable")
# A candidate whose small model is badly calibrated: it doubts what it would have been sure
# of. Scaled so the demo fleet's cloud share goes from ~30% to ~70% (the seed's alarm case).
BUGGY_MODEL: Final = ModelConfidence(name="buggy", intent_scale=0.2, lm_scale=0.1)


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskDraw:
    """One task as the simulated app produces it (signals as in PROTOCOL.md)."""

    cell: CellKey
    kind: str
    tokens: int
    intent_conf: float
    lm_conf: float
    upload_bytes: int
    cache_key: str | None


class Workload:
    """The fleet's task mix over the cells of one policy document's dimensions."""

    __slots__ = ("_cells", "dimensions")

    def __init__(self, dimensions: Mapping[str, Sequence[str]]) -> None:
        missing = [name for name in _DIMENSIONS if not dimensions.get(name)]
        if missing:
            raise ValueError(f"policy dimensions lack values for {missing}")
        self.dimensions = {name: tuple(dimensions[name]) for name in _DIMENSIONS}
        options: list[tuple[CellKey, float]] = []
        for task_type in self.dimensions["task_type"]:
            for budget in self.dimensions["latency_budget"]:
                for tier in self.dimensions["privacy_tier"]:
                    weight = (
                        _weight("task_type", task_type)
                        * _weight("latency_budget", budget)
                        * _weight("privacy_tier", tier)
                    )
                    options.append(((task_type, budget, tier), weight))
        self._cells = tuple(options)

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> Workload:
        """The mix for a policy document (its `dimensions`)."""
        dimensions = document.get("dimensions")
        if not isinstance(dimensions, Mapping):
            raise ValueError("policy document has no dimensions")
        return cls({name: list(dimensions.get(name) or []) for name in _DIMENSIONS})

    def cell_shares(self) -> dict[CellKey, float]:
        """Each cell's share of all tasks."""
        total = sum(weight for _, weight in self._cells)
        return {cell: weight / total for cell, weight in self._cells}

    def draw(self, rng: random.Random, model: ModelConfidence = STABLE_MODEL) -> TaskDraw:
        """One task: a cell, a kind of request, its length, confidences and upload."""
        cell = pick_weighted(rng, self._cells)
        kind_name = pick_weighted(rng, _KIND_MIX[modality(cell[0])])
        kind = KINDS[kind_name]
        tokens = min(
            kind.tokens_max,
            max(1, round(rng.lognormvariate(math.log(kind.tokens_median), kind.tokens_sigma))),
        )
        intent_conf = _beta(rng, kind.intent_mean, kind.concentration) * model.intent_scale
        lm_conf = _beta(rng, kind.lm_mean, kind.concentration) * model.lm_scale
        cache_key = None
        if kind_name == "intent" and rng.random() < _CACHEABLE_SHARE:
            # Zipf-like popularity: a few phrases make most of the repeats.
            phrase = min(_COMMON_PHRASES - 1, int(rng.paretovariate(1.2)) - 1)
            cache_key = f"{cell[0]}:phrase-{phrase}"
        return TaskDraw(
            cell=cell,
            kind=kind_name,
            tokens=tokens,
            intent_conf=intent_conf,
            lm_conf=lm_conf,
            upload_bytes=_upload_bytes(rng, modality(cell[0]), tokens),
            cache_key=cache_key,
        )


def _weight(dimension: str, value: str) -> float:
    return _VALUE_WEIGHTS[dimension].get(value, _OTHER_WEIGHT)


def _beta(rng: random.Random, mean: float, concentration: float) -> float:
    return rng.betavariate(mean * concentration, (1.0 - mean) * concentration)


def _upload_bytes(rng: random.Random, kind: str, tokens: int) -> int:
    """What a cloud call would upload: audio features, the text, or a (downscaled) image."""
    if kind == "voice":
        return int(rng.lognormvariate(math.log(12_000), 0.4))
    if kind == "image":
        return int(min(1_900_000, rng.lognormvariate(math.log(180_000), 0.6)))
    return tokens * 4 + 200
