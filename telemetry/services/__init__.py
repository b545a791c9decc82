"""Writes of telemetry: ingest (landing), processing, compaction, retention, sweeping."""

from .ingest import IngestResult, retention_start, telemetry_batch_ingest
from .maintenance import landed_sweep, rollups_compact, storage_maintain
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
    "landed_sweep",
    "partitions_ensure_window",
    "retention_start",
    "rollups_compact",
    "storage_maintain",
    "telemetry_batch_ingest",
]
