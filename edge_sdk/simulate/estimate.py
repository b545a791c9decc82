"""Where a fleet's tasks would go under a policy, without running a fleet.

Draws tasks from the workload and device readings from the link and load models and routes
each with `edge_sdk.decision.decide`, as a device would (no fallback, no cache). Used to tune
the workload (the demo fleet's cloud share near 30% on the stable model and near 70% on the
buggy one) and to check that tuning in tests.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..decision import Cell, DeviceState, TaskSignals, decide
from .models import (
    LINK_PROFILES,
    Link,
    Load,
    NetworkConditions,
    cloud_estimate_ms,
    pick_weighted,
)
from .workload import STABLE_MODEL, ModelConfidence, Workload

__all__ = ["RouteShares", "nominal_cloud_estimate_ms", "route_shares"]

# The cloud's utilisation in a steady demo fleet (capacity is sized for about twice the load).
NOMINAL_UTILISATION = 0.45


@dataclass(frozen=True, slots=True)
class RouteShares:
    """Shares of tasks per route (they sum to 1)."""

    device: float
    cloud: float
    draft_refine: float
    samples: int


def nominal_cloud_estimate_ms(utilisation: float = NOMINAL_UTILISATION) -> float:
    """A device's cloud estimate when the shared queue runs steadily at `utilisation`."""
    return cloud_estimate_ms(1.0 / (1.0 - utilisation))


def route_shares(
    document: Mapping[str, Any],
    *,
    model: ModelConfidence = STABLE_MODEL,
    samples: int = 20_000,
    seed: int = 1,
    conditions: NetworkConditions | None = None,
    cloud_infer_ms: float | None = None,
    cloud_pressure: float = 0.0,
) -> RouteShares:
    """Route `samples` tasks of the workload through the document's cells."""
    rng = random.Random(seed)
    conditions = conditions or NetworkConditions()
    cloud_estimate = (
        nominal_cloud_estimate_ms() if cloud_infer_ms is None else float(cloud_infer_ms)
    )
    cells = {
        (c["task_type"], c["latency_budget"], c["privacy_tier"]): Cell.from_document(c)
        for c in document["cells"]
    }
    workload = Workload.from_document(document)
    links = tuple((profile, profile.weight) for profile in LINK_PROFILES)
    routes: Counter[str] = Counter()
    for _ in range(samples):
        # Readings of a random device at a random moment of its life (up to an hour in).
        moment = rng.uniform(0.0, 3600.0)
        link = Link(pick_weighted(rng, links), rng).reading(moment, conditions)
        load = Load(rng).reading(moment)
        task = workload.draw(rng, model)
        decision = decide(
            cells[task.cell],
            TaskSignals(
                tokens=task.tokens,
                intent_conf=task.intent_conf,
                lm_conf=task.lm_conf,
                upload_bytes=task.upload_bytes,
            ),
            DeviceState(
                rtt_ms=link.rtt_ms,
                bandwidth_kbps=link.bandwidth_kbps,
                device_load=load,
                online=link.online,
                cloud_infer_ms=cloud_estimate,
                cloud_pressure=cloud_pressure,
            ),
        )
        routes[decision.route] += 1
    return RouteShares(
        device=routes["device"] / samples,
        cloud=routes["cloud"] / samples,
        draft_refine=routes["draft_refine"] / samples,
        samples=samples,
    )
