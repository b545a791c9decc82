"""Generated events for the lab's tests whose answer is known by construction."""

import random
from datetime import UTC, datetime, timedelta
from typing import Any

from edge_sdk.decision import DeviceState, TaskSignals, decide
from lab.replay import RecordedEvent
from tests.factories import demo_cell, protocol_event

VOICE_KEY = ("voice", "interactive", "normal")


def slow_device_events(count: int = 400, *, seed: int = 5) -> list[dict[str, Any]]:
    """`count` events of voice/interactive/normal (budget 300 ms) as v1 decided them, ready to
    ingest: a device answer takes 600 ms, a cloud answer 140 ms (40 ms round trip, no upload,
    100 ms inference). Any α above a few percent breaks the cell's budget."""
    cell = demo_cell(VOICE_KEY)
    rng = random.Random(seed)
    now = datetime.now(UTC) - timedelta(minutes=5)
    events = []
    for _ in range(count):
        task = TaskSignals(
            tokens=rng.randint(0, 800),
            intent_conf=round(rng.random(), 3),
            lm_conf=round(rng.random(), 3),
            upload_bytes=0,
        )
        device = DeviceState(
            rtt_ms=40.0, bandwidth_kbps=8000.0, device_load=0.2, online=True, cloud_infer_ms=100.0
        )
        decision = decide(cell, task, device)
        recorded = RecordedEvent(
            ts=now,
            policy_version=1,
            cohort="stable",
            cell=VOICE_KEY,
            task=task,
            device=device,
            route=decision.route,
            decided_by=decision.decided_by,
            fallback="none",
            cache_hit=False,
            ok=True,
            latency_ms=600.0 if decision.route == "device" else 140.0,
            tokens=task.tokens,
            replayable=True,
        )
        events.append(protocol_event(recorded))
    return events
