"""Reads of telemetry: fleet catalog and cohorts, routing figures from rollups, ingest gauges."""

from .catalog import CohortResolver, VersionCatalog
from .metrics import (
    fleet_metrics,
    ingest_gauges,
    parse_group_by,
    parse_window,
    route_totals,
)

__all__ = [
    "CohortResolver",
    "VersionCatalog",
    "fleet_metrics",
    "ingest_gauges",
    "parse_group_by",
    "parse_window",
    "route_totals",
]
