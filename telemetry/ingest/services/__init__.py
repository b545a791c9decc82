"""Writes of ingest: landing a device's batch, processing landed batches into events and rollups."""

from .landing import IngestResult, retention_start, telemetry_batch_ingest
from .processing import (
    ProcessResult,
    landed_batches_process,
    landed_drain,
    partitions_ensure_window,
)

__all__ = [
    "IngestResult",
    "ProcessResult",
    "landed_batches_process",
    "landed_drain",
    "partitions_ensure_window",
    "retention_start",
    "telemetry_batch_ingest",
]
