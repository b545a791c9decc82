"""Waking the worker: one drain task at a time instead of one Celery task per batch.

After its commit, an ingest request sets a short-lived Redis key with `SET NX`; only the request
that sets it enqueues a `drain_landed` task, which processes landed batches in a loop (several
per transaction) until none is left. While the key is set, other requests enqueue nothing: the
running (or queued) drain will find their batches. The drain releases the key when it finds the
landing table empty and then looks once more, so a batch committed just before the release is
not left behind. If Redis is unreachable, a request enqueues a plain task for its own batch;
if that fails too, or the drain dies (its key expires after WAKE_TTL_MS), the sweeper finds the
batch. Embedded (no Redis), the batch is processed in the request, as every task is.
A drain that keeps finding a full claim wakes a helper drain (up to TELEMETRY_DRAINS in all, each
with its own key) that claims other batches beside it and stops when none is left.
"""

from __future__ import annotations

import logging

from django.conf import settings

from controlplane.queue import task_send

from ..redis_client import redis_client

logger = logging.getLogger(__name__)

WAKE_KEY = "telemetry:drain"
WAKE_TTL_MS = 5000


def wake_worker(batch_id: int) -> None:
    """Called after the landing commit: make sure a drain will see `batch_id`."""
    try:
        if not settings.REDIS_URL or settings.CELERY_TASK_ALWAYS_EAGER:
            task_send("telemetry.process_landed", args=[[batch_id]])
            return
        try:
            first = bool(
                redis_client(settings.REDIS_URL).set(WAKE_KEY, "1", nx=True, px=WAKE_TTL_MS)
            )
        except Exception:  # Redis down: fall back to a task for this batch
            logger.warning("telemetry.wake_unavailable batch=%s", batch_id)
            task_send("telemetry.process_landed", args=[[batch_id]], retry=False)
            return
        if first:
            task_send("telemetry.drain_landed", retry=False)
    except Exception:  # the batch is durable; the sweeper re-enqueues it
        logger.warning("telemetry.enqueue_failed batch=%s", batch_id, exc_info=True)


def _key(slot: int) -> str:
    return WAKE_KEY if slot == 0 else f"{WAKE_KEY}:{slot}"


def wake_helper(slot: int) -> None:
    """A drain found a backlog: enqueue a helper drain in `slot` unless one is running.

    One drain is serial (decode and fold, then COPY, then the next claim), so a backlog can grow
    while CPU is idle; helpers claim other batches beside it (`SKIP LOCKED`) and stop when they
    find none.
    """
    if not settings.REDIS_URL or settings.CELERY_TASK_ALWAYS_EAGER:
        return
    try:
        if redis_client(settings.REDIS_URL).set(_key(slot), "1", nx=True, px=WAKE_TTL_MS):
            task_send("telemetry.drain_landed", kwargs={"slot": slot}, retry=False)
    except Exception:  # the first drain carries on alone
        logger.warning("telemetry.wake_helper_failed slot=%d", slot, exc_info=True)


def keep_awake(slot: int = 0) -> None:
    """The drain is alive: keep other requests from enqueueing another one."""
    if not settings.REDIS_URL:
        return
    try:
        redis_client(settings.REDIS_URL).pexpire(_key(slot), WAKE_TTL_MS)
    except Exception:  # at worst a second drain runs; SKIP LOCKED copes
        logger.warning("telemetry.wake_refresh_failed")


def release(slot: int = 0) -> None:
    """The drain found nothing: the next request must enqueue a new one."""
    if not settings.REDIS_URL:
        return
    try:
        redis_client(settings.REDIS_URL).delete(_key(slot))
    except Exception:  # the key expires by itself within WAKE_TTL_MS
        logger.warning("telemetry.wake_release_failed")
