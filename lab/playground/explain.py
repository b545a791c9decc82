"""The decision trace: `edge_sdk.decision.decide` and the parts it is made of, for people.

Pure functions. The route and `decided_by` are `decide`'s own answer; the score terms, θ with
its adjustments and the predicted cloud latency come from the very functions `decide` calls
(`score_terms`, `effective_threshold`, `predicted_cloud_ms`), so the trace cannot differ from
the decision. Parts a deciding step came before are still computed and shown as "not reached":
a person sees what the score would have been had the policy not fixed the route.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from edge_sdk.decision import (
    SCORE_TERM_NAMES,
    Cell,
    Decision,
    DeviceState,
    Mode,
    TaskSignals,
    decide,
    effective_threshold,
    predicted_cloud_ms,
    privacy_violation,
    score_terms,
)
from routing_policies.pricing import CloudPrice

CellKey = tuple[str, str, str]

# The step of PROTOCOL.md "The decision" that each answer comes from, in words.
STEP_TEXT: Final = {
    1: "Step 1, the cell's mode: {mode} fixes the route",
    2: "Step 2, privacy: sensitive data and the cell forbids upload",
    3: "Step 3, offline: the device has no network",
    6: "Step 6, score below θ: easy enough for the device",
    7: "Step 7, latency: the cloud would answer too late for the budget",
    8: "Step 8, score at or above θ and the cloud within budget",
}
ADJUSTMENT_TEXT: Final = {
    "network": "weak network (RTT above its limit or bandwidth below)",
    "load": "device busy (load at or above its limit)",
    "cloud_pressure": "cloud pressure offset pushed to the fleet",
    "clamp": "clamped to [0, 1]",
}
# The seed article's five tasks (tokens, intent confidence, on-device model confidence).
SEED_TASKS: Final = (
    (20, 0.98, 0.95),
    (180, 0.85, 0.72),
    (420, 0.62, 0.45),
    (55, 0.93, 0.88),
    (700, 0.40, 0.30),
)
# The seed's on-device latency (TaskRouter end_latency, 0.03 s): what a device answer costs in
# the stream of sample tasks unless the caller says otherwise.
SEED_DEVICE_MS: Final = 30.0


@dataclass(frozen=True, slots=True, kw_only=True)
class CellOverride:
    """What the playground changes in the picked cell before deciding (None: as published)."""

    mode: Mode | None = None
    threshold: float | None = None

    def apply(self, cell: Cell) -> Cell:
        """The cell with the override's mode and θ."""
        changes: dict[str, Any] = {}
        if self.mode is not None:
            changes["mode"] = self.mode
        if self.threshold is not None:
            changes["threshold"] = self.threshold
        return replace(cell, **changes) if changes else cell


def step_of(decision: Decision) -> int:
    """The step of PROTOCOL.md that decided (1-3, 6-8)."""
    if decision.decided_by == "policy":
        return 1
    if decision.decided_by == "privacy":
        return 2
    if decision.decided_by == "offline":
        return 3
    if decision.decided_by == "latency":
        return 7
    return 6 if decision.route == "device" else 8


def data_leaves_device(decision: Decision) -> bool:
    """Whether the task's data goes to the cloud: now, or once back online (queued)."""
    return decision.route != "device" or decision.queue_until_online


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def explain(
    *, cell: Cell, task: TaskSignals, device: DeviceState, price: CloudPrice
) -> dict[str, Any]:
    """The decision of `decide(cell, task, device)` as a trace a person can follow."""
    decision = decide(cell, task, device)
    step = step_of(decision)
    terms = score_terms(cell, task)
    weights = (cell.weight_length, cell.weight_intent, cell.weight_lm)
    signals = (
        min(1.0, task.tokens / cell.length_norm_tokens),
        1.0 - task.intent_conf,
        1.0 - task.lm_conf,
    )
    score = terms[0] + terms[1] + terms[2]
    theta, adjustments = effective_threshold(cell, device)
    predicted = predicted_cloud_ms(task, device)
    upload_ms = (
        task.upload_bytes * 8 / device.bandwidth_kbps if device.bandwidth_kbps > 0 else math.inf
    )
    scored = decision.score is not None
    leaves = data_leaves_device(decision)
    violation = privacy_violation(
        privacy_tier=cell.privacy_tier,
        upload_allowed=cell.upload_allowed,
        upload_deidentify=cell.upload_deidentify,
        left_device=leaves,
        deidentified=leaves and cell.upload_deidentify,  # the SDK de-identifies as told
    )
    cloud_calls = 1 if decision.route != "device" or decision.queue_until_online else 0
    return {
        "decision": {
            "route": decision.route,
            "decided_by": decision.decided_by,
            "step": step,
            "step_text": STEP_TEXT[step].format(mode=cell.mode),
            "explain": decision.explain(),
            "queue_until_online": decision.queue_until_online,
        },
        "score": {
            "reached": scored,
            "value": score,
            "terms": [
                {"name": name, "weight": weight, "signal": signal, "term": term}
                for name, weight, signal, term in zip(
                    SCORE_TERM_NAMES, weights, signals, terms, strict=True
                )
            ],
        },
        "threshold": {
            "reached": scored,
            "base": cell.threshold,
            "adjustments": [
                {"name": name, "delta": delta, "text": ADJUSTMENT_TEXT[name]}
                for name, delta in adjustments
            ],
            "effective": theta,
            "score_below": score < theta,
        },
        "latency": {
            "reached": decision.predicted_cloud_ms is not None,
            "predicted_cloud_ms": _finite(predicted),
            "upload_ms": _finite(upload_ms),
            "rtt_ms": device.rtt_ms,
            "cloud_infer_ms": device.cloud_infer_ms,
            "budget_ms": cell.latency_budget_ms,
            "within_budget": predicted <= cell.latency_budget_ms,
        },
        "privacy": {
            "tier": cell.privacy_tier,
            "upload_allowed": cell.upload_allowed,
            "deidentify": cell.upload_deidentify,
            "keeps_data_on_device": cell.keeps_data_on_device,
            "data_leaves_device": leaves,
            "violation": violation,
        },
        "cost": {
            "cloud_calls": cloud_calls,
            "amount": price.cost(tokens=task.tokens * cloud_calls, calls=cloud_calls),
            "currency": price.currency,
        },
    }


def matrix(
    *, cells: Mapping[CellKey, Cell], task: TaskSignals, device: DeviceState
) -> list[dict[str, Any]]:
    """The same task on the same device decided in every cell (the latency–privacy matrix)."""
    rows = []
    for key, cell in cells.items():
        decision = decide(cell, task, device)
        rows.append(
            {
                "task_type": key[0],
                "latency_budget": key[1],
                "privacy_tier": key[2],
                "mode": cell.mode,
                "route": decision.route,
                "decided_by": decision.decided_by,
                "step": step_of(decision),
                "score": decision.score,
                "threshold": decision.threshold,
                "queue_until_online": decision.queue_until_online,
            }
        )
    return rows


@dataclass(frozen=True, slots=True, kw_only=True)
class Sample:
    """One sample task of the stream: its signals and the device it ran on."""

    task: TaskSignals
    device: DeviceState
    source: str  # "seed" or "recorded"


def seed_samples(device: DeviceState, upload_bytes: int = 0) -> list[Sample]:
    """The seed's five tasks on the given device."""
    return [
        Sample(
            task=TaskSignals(
                tokens=tokens, intent_conf=intent, lm_conf=lm, upload_bytes=upload_bytes
            ),
            device=device,
            source="seed",
        )
        for tokens, intent, lm in SEED_TASKS
    ]


def sample_stream(
    *, cell: Cell, samples: Iterable[Sample], device_ms: float = SEED_DEVICE_MS
) -> list[dict[str, Any]]:
    """Each sample decided in `cell`, with the latency it would see: `device_ms` on the device,
    the predicted cloud latency in the cloud, both for draft_refine (draft, then refine)."""
    out = []
    for sample in samples:
        decision = decide(cell, sample.task, sample.device)
        cloud_ms = predicted_cloud_ms(sample.task, sample.device)
        if decision.route == "device":
            latency = device_ms
        elif decision.route == "cloud":
            latency = cloud_ms
        else:
            latency = device_ms + cloud_ms
        out.append(
            {
                "source": sample.source,
                "tokens": sample.task.tokens,
                "intent_conf": sample.task.intent_conf,
                "lm_conf": sample.task.lm_conf,
                "route": decision.route,
                "decided_by": decision.decided_by,
                "score": decision.score,
                "threshold": decision.threshold,
                "latency_ms": _finite(latency),
            }
        )
    return out
