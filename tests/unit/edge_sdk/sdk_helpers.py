"""Policy documents, readings and inference functions for the SDK's unit tests."""

from __future__ import annotations

import asyncio
from typing import Any

from edge_sdk import Decision, Readings, Task

from .test_decision import make_cell

KEYS = [
    (task_type, budget, tier)
    for task_type in ("voice", "text", "image")
    for budget in ("interactive", "background")
    for tier in ("sensitive", "normal")
]


def policy_document(version: int = 1, **cells: dict[str, Any]) -> dict[str, Any]:
    """A 12-cell document; `cells["text/interactive/normal"] = {...}` overrides one cell."""
    documents = []
    for task_type, budget, tier in KEYS:
        overrides = cells.get(f"{task_type}/{budget}/{tier}", {})
        documents.append(
            make_cell(task_type=task_type, latency_budget=budget, privacy_tier=tier, **overrides)
        )
    return {
        "fleet": "unit-fleet",
        "version": version,
        "etag": f'"v{version}-unit"',
        "dimensions": {
            "task_type": ["voice", "text", "image"],
            "latency_budget": ["interactive", "background"],
            "privacy_tier": ["sensitive", "normal"],
        },
        "cells": documents,
    }


def readings(**overrides: Any) -> Readings:
    """A good network and an idle device; the cloud answers in 80 + 250 = 330 ms."""
    values: dict[str, Any] = {
        "rtt_ms": 80.0,
        "bandwidth_kbps": 5000.0,
        "device_load": 0.3,
        "online": True,
        "cloud_infer_ms": 250.0,
        **overrides,
    }
    return Readings(**values)


def task(**overrides: Any) -> Task:
    """text/interactive/normal scoring 0.4*1 + 0.3*0.5 + 0.3*0.5 = 0.70 on the default cell."""
    values: dict[str, Any] = {
        "task_type": "text",
        "latency_budget": "interactive",
        "privacy_tier": "normal",
        "tokens": 400,
        "intent_conf": 0.5,
        "lm_conf": 0.5,
        **overrides,
    }
    return Task(**values)


class Inference:
    """Device and cloud inference that record their calls and fail or stall on demand."""

    def __init__(self) -> None:
        self.device_calls: list[Task] = []
        self.cloud_calls: list[Task] = []
        self.device_fails = False
        self.cloud_fails = False
        self.cloud_stalls = False

    async def on_device(self, task: Task) -> str:
        self.device_calls.append(task)
        if self.device_fails:
            raise RuntimeError("device model crashed")
        return f"device:{task.tokens}"

    async def on_cloud(self, task: Task, decision: Decision) -> str:
        self.cloud_calls.append(task)
        if self.cloud_stalls:
            await asyncio.sleep(3600)
        if self.cloud_fails:
            raise ConnectionError("cloud answered 503")
        return f"cloud:{task.tokens}"
