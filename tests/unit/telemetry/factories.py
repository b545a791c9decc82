"""Telemetry events as devices send them (PROTOCOL.md), for unit and integration tests."""

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any


def iso(moment: datetime) -> str:
    """RFC 3339 with milliseconds and Z, as the SDK writes it."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def make_event(device_id: str = "phone-1", **overrides: Any) -> dict[str, Any]:
    """A valid event of `device_id` (fleet on v1, cell text/interactive/normal, on device)."""
    event: dict[str, Any] = {
        "event_id": str(uuid.uuid4()),
        "device_id": device_id,
        "ts": iso(datetime.now(UTC) - timedelta(seconds=1)),
        "policy_version": 1,
        "task_type": "text",
        "latency_budget": "interactive",
        "privacy_tier": "normal",
        "route": "device",
        "decided_by": "threshold",
        "score": 0.42,
        "threshold": 0.6,
        "tokens": 180,
        "intent_conf": 0.85,
        "lm_conf": 0.72,
        "latency_ms": 35.2,
        "fallback": "none",
        "cache_hit": False,
        "upload_bytes": 0,
        "rtt_ms": 80,
        "bandwidth_kbps": 5000,
        "device_load": 0.3,
        "ok": True,
        "deidentified": False,
    }
    event.update(overrides)
    return event


def make_events(count: int, device_id: str = "phone-1", **overrides: Any) -> list[dict[str, Any]]:
    """`count` valid events with distinct ids."""
    return [make_event(device_id, **overrides) for _ in range(count)]
