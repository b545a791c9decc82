"""The Prometheus text exposition format (version 0.0.4) for routing telemetry.

Counters come from `RouteCounter` (monotonic totals kept by the compaction task), latency
histograms per fleet and route use fixed `le` bounds, and two gauges tell the ingest lag.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from .sketch import bucket_value

LATENCY_BUCKETS_MS: Final = (5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0)
CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"


def latency_bins(latency_hist: Mapping[str, int]) -> list[int]:
    """Counts per `le` bound (not cumulative) from a stored sketch; beyond the last is dropped.

    A sketch bucket counts under the bound its representative value falls below (0.5% off at
    most, and only for values within 0.5% of a bound).
    """
    bins = [0] * len(LATENCY_BUCKETS_MS)
    for key, count in latency_hist.items():
        try:
            index = int(key)
        except (TypeError, ValueError):
            continue  # a bad stored key: left out, not a failed compaction
        position = bisect_left(LATENCY_BUCKETS_MS, bucket_value(index))
        if position < len(bins):
            bins[position] += count
    return bins


def stored_latency_bins(value: Any) -> list[int]:
    """A counter's stored `latency_le`, one whole count >= 0 per bound (a bad stored row reads
    as zeros, so that it cannot break the scrape of every fleet)."""
    width = len(LATENCY_BUCKETS_MS)
    if not isinstance(value, list) or len(value) != width:
        return [0] * width
    return [c if isinstance(c, int) and not isinstance(c, bool) and c >= 0 else 0 for c in value]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs: Sequence[tuple[str, str]]) -> str:
    if not pairs:
        return ""
    return "{" + ",".join(f'{name}="{_escape(value)}"' for name, value in pairs) + "}"


def _number(value: float) -> str:
    # A sum made infinite or NaN by a row stored before telemetry numbers had ranges is
    # exposed as the format spells it, never a failed scrape of every fleet.
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


@dataclass(slots=True)
class RouteTotals:
    """One fleet × route × deciding step's totals."""

    fleet: str
    route: str
    decided_by: str
    events: int
    errors: int
    fallbacks: int
    cache_hits: int
    privacy_violations: int
    latency_sum_ms: float
    latency_bins: list[int] = field(default_factory=list)


@dataclass(slots=True)
class IngestGauges:
    """The landing table right now."""

    landed_batches: int
    landed_events: int
    lag_seconds: float


_COUNTERS: Final = (
    ("controlplane_routing_decisions_total", "events", "Routing decisions reported by devices."),
    ("controlplane_routing_errors_total", "errors", "Reported tasks that failed (ok=false)."),
    ("controlplane_routing_fallbacks_total", "fallbacks", "Tasks answered by the other side."),
    ("controlplane_routing_cache_hits_total", "cache_hits", "Tasks answered from the cache."),
    (
        "controlplane_routing_privacy_violations_total",
        "privacy_violations",
        "Sensitive tasks sent to the cloud without de-identification.",
    ),
)


def render(
    totals: Iterable[RouteTotals],
    gauges: IngestGauges,
    broker_access_failures: Mapping[str, int] | None = None,
) -> str:
    """The whole /metrics page (with this process's broker-access failures, when given)."""
    rows = sorted(totals, key=lambda t: (t.fleet, t.route, t.decided_by))
    lines: list[str] = []
    for name, attr, help_text in _COUNTERS:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} counter")
        for row in rows:
            labels = _labels(
                [("fleet", row.fleet), ("route", row.route), ("decided_by", row.decided_by)]
            )
            lines.append(f"{name}{labels} {_number(getattr(row, attr))}")
    histogram = "controlplane_routing_latency_ms"
    lines.append(f"# HELP {histogram} Task latency reported by devices, per fleet and route.")
    lines.append(f"# TYPE {histogram} histogram")
    per_route: dict[tuple[str, str], tuple[list[int], int, float]] = {}
    for row in rows:
        bins, count, total = per_route.get(
            (row.fleet, row.route), ([0] * len(LATENCY_BUCKETS_MS), 0, 0.0)
        )
        own = row.latency_bins or [0] * len(LATENCY_BUCKETS_MS)
        per_route[(row.fleet, row.route)] = (
            [a + b for a, b in zip(bins, own, strict=True)],
            count + row.events,
            total + row.latency_sum_ms,
        )
    for (fleet, route), (bins, count, total) in sorted(per_route.items()):
        cumulative = 0
        for bound, in_bin in zip(LATENCY_BUCKETS_MS, bins, strict=True):
            cumulative += in_bin
            labels = _labels([("fleet", fleet), ("route", route), ("le", _number(bound))])
            lines.append(f"{histogram}_bucket{labels} {cumulative}")
        labels = _labels([("fleet", fleet), ("route", route), ("le", "+Inf")])
        lines.append(f"{histogram}_bucket{labels} {count}")
        labels = _labels([("fleet", fleet), ("route", route)])
        lines.append(f"{histogram}_sum{labels} {_number(total)}")
        lines.append(f"{histogram}_count{labels} {count}")
    for name, value, help_text in (
        (
            "controlplane_telemetry_ingest_lag_seconds",
            gauges.lag_seconds,
            "Age of the oldest accepted batch not yet processed (0 when none is waiting).",
        ),
        (
            "controlplane_telemetry_landed_batches",
            gauges.landed_batches,
            "Accepted batches waiting for a worker.",
        ),
        (
            "controlplane_telemetry_landed_events",
            gauges.landed_events,
            "Accepted events waiting for a worker.",
        ),
    ):
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} gauge")
        lines.append(f"{name} {_number(value)}")
    if broker_access_failures is not None:
        name = "controlplane_broker_access_failures_total"
        lines.append(
            f"# HELP {name} Device accounts this process could not give or take from the MQTT "
            "broker (MQTT_ACCESS=dynsec), by operation; `mqtt_access sync` puts them right."
        )
        lines.append(f"# TYPE {name} counter")
        for operation, count in sorted(broker_access_failures.items()):
            lines.append(f"{name}{_labels([('operation', operation)])} {count}")
    return "\n".join(lines) + "\n"
