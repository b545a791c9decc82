"""Celery tasks of the telemetry pipeline: thin, each calls one service.

Process and drain landed batches (woken by ingest, telemetry.ingest.wakeup); beat runs the
sweep of landed batches, rollup compaction, and partitions with retention. Late feedback's
tasks are its own (telemetry.feedback.tasks).
"""

from __future__ import annotations

import threading
import time

from celery import shared_task
from django.conf import settings

from controlplane.queue import DATABASE_RETRY

from ..rollups.maintenance import landed_sweep, rollups_compact, storage_maintain
from .services import landed_batches_process, landed_drain

_embedded_lock = threading.Lock()
_embedded_last_compaction = 0.0


@shared_task(  # type: ignore[untyped-decorator]  # Celery ships no type hints
    name="telemetry.process_landed",
    **DATABASE_RETRY,
    max_retries=None,
)
def process_landed(batch_ids: list[int] | None = None) -> int:
    """Process these landed batches (and others waiting, up to the per-task maximum)."""
    result = landed_batches_process(batch_ids=batch_ids or ())
    if settings.CELERY_TASK_ALWAYS_EAGER:
        _compact_when_embedded()
    return result.events


def _compact_when_embedded() -> None:
    """Embedded mode has no beat: compact from time to time after processing instead."""
    global _embedded_last_compaction
    interval: float = settings.TELEMETRY_COMPACT_INTERVAL_S
    with _embedded_lock:
        if time.monotonic() - _embedded_last_compaction < interval:
            return
        _embedded_last_compaction = time.monotonic()
    rollups_compact(time_budget_s=2.0)


@shared_task(  # type: ignore[untyped-decorator]
    name="telemetry.drain_landed",
    ignore_result=True,
    **DATABASE_RETRY,
    max_retries=None,
)
def drain_landed(slot: int = 0) -> int:
    """Process landed batches until none is left (enqueued by the first request to wake it,
    or, with `slot` > 0, as a helper by a drain that found a backlog)."""
    return landed_drain(slot=slot)


@shared_task(name="telemetry.sweep_landed", ignore_result=True)  # type: ignore[untyped-decorator]
def sweep_landed() -> int:
    """Re-enqueue batches that waited too long (their task was lost)."""
    return landed_sweep()


@shared_task(name="telemetry.compact_rollups", ignore_result=True)  # type: ignore[untyped-decorator]
def compact_rollups() -> int:
    """Merge partial rollup rows."""
    return rollups_compact()


@shared_task(name="telemetry.maintain_storage", ignore_result=True)  # type: ignore[untyped-decorator]
def maintain_storage() -> None:
    """Partitions ahead, retention behind."""
    storage_maintain()
