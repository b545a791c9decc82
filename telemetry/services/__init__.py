"""Writes of telemetry's storage: the sweep of landed batches, compaction, retention.

Landing and processing are the ingest part's (`telemetry.ingest.services`).
"""

from .maintenance import landed_sweep, rollups_compact, storage_maintain

__all__ = ["landed_sweep", "rollups_compact", "storage_maintain"]
