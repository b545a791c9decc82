"""Signals of the telemetry pipeline, for the parts that react to new data.

`rollups_stored` is sent after the transaction that stored new rollup rows has committed, once
per processed set of batches, with `fleet_ids` (the fleets whose rollups changed). It runs in
the Celery worker (or in-process when embedded); receivers must be quick and must not raise
(a failing receiver is logged and the others still run).
"""

from __future__ import annotations

import logging

from django.dispatch import Signal

logger = logging.getLogger(__name__)

rollups_stored = Signal()


def send_rollups_stored(fleet_ids: frozenset[int]) -> None:
    """Tell the receivers that these fleets have new rollups (call after commit)."""
    for receiver, result in rollups_stored.send_robust(sender=None, fleet_ids=fleet_ids):
        if isinstance(result, Exception):
            logger.error(
                "telemetry.rollups_stored receiver %r failed",
                receiver,
                exc_info=(type(result), result, result.__traceback__),
            )
