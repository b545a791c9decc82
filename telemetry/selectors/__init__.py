"""Reads of telemetry: routing figures from rollups, ingest gauges.

The fleet catalog and cohorts that ingest resolves are in `telemetry.ingest.selectors`.
"""

from .metrics import (
    fleet_metrics,
    ingest_gauges,
    parse_group_by,
    parse_window,
    route_totals,
)

__all__ = [
    "fleet_metrics",
    "ingest_gauges",
    "parse_group_by",
    "parse_window",
    "route_totals",
]
