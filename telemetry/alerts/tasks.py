"""Celery tasks of alerting: evaluate a fleet, the beat's sweep, webhook delivery with back-off.

Thin: each calls one service. The receiver of `telemetry.signals.rollups_stored` (connected in
`telemetry.apps`) calls `request_alert_evaluation`, which coalesces bursts into one task.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from celery import shared_task
from django.conf import settings
from django.db import DatabaseError, connection

from routing_policies.services import scheduled_changes_run_due

from ..redis_client import redis_client
from .selectors import fleets_to_evaluate
from .services import (
    alerts_evaluate,
    enqueue_delivery,
    webhook_deliveries_overdue,
    webhook_delivery_attempt,
)

logger = logging.getLogger(__name__)

_ALERT_EVAL_KEY = "alerts:evaluate"


@shared_task(  # type: ignore[untyped-decorator]
    name="telemetry.evaluate_alerts",
    ignore_result=True,
    autoretry_for=(DatabaseError,),
    retry_backoff=True,
    retry_backoff_max=30,
    max_retries=5,
)
def evaluate_alerts(fleet_id: int) -> None:
    """Judge one fleet's rules and rollout guards (after new rollups)."""
    alerts_evaluate(fleet_id=fleet_id)


@shared_task(name="telemetry.evaluate_all_alerts", ignore_result=True)  # type: ignore[untyped-decorator]
def evaluate_all_alerts() -> int:
    """Beat: judge every fleet with rules or guards (so silence is noticed), and re-send
    webhook deliveries whose task was lost."""
    fleet_ids = fleets_to_evaluate()
    for fleet_id in fleet_ids:
        try:
            alerts_evaluate(fleet_id=fleet_id)
        except DatabaseError:
            logger.warning("alerts.evaluate_failed fleet=%d", fleet_id)
    for delivery_id in webhook_deliveries_overdue():
        enqueue_delivery(delivery_id)
    return len(fleet_ids)


@shared_task(  # type: ignore[untyped-decorator]
    bind=True, name="telemetry.deliver_webhook", ignore_result=True, max_retries=None
)
def deliver_webhook(self: Any, delivery_id: int) -> None:
    """One attempt; a retryable failure comes back after the delivery's back-off."""
    retry_in = webhook_delivery_attempt(delivery_id=delivery_id)
    if retry_in is not None:
        raise self.retry(countdown=retry_in)


def request_alert_evaluation(fleet_ids: frozenset[int]) -> None:
    """After new rollups: evaluate these fleets soon, coalescing bursts into one task each.

    The first request for a fleet sets a Redis key that lives ALERT_EVALUATE_COALESCE_S and
    enqueues a task delayed by as long; later requests while the key lives enqueue nothing.
    The task starts after the key expired, so it sees every rollup whose request it absorbed.
    Embedded (no Redis), the fleet is evaluated at once.
    """
    delay: float = settings.ALERT_EVALUATE_COALESCE_S
    for fleet_id in sorted(fleet_ids):
        if settings.CELERY_TASK_ALWAYS_EAGER or not settings.REDIS_URL:
            embedded_beat_start()
            alerts_evaluate(fleet_id=fleet_id)
            continue
        try:
            first = redis_client(settings.REDIS_URL).set(
                f"{_ALERT_EVAL_KEY}:{fleet_id}", "1", nx=True, px=max(1, int(delay * 1000))
            )
        except Exception:  # Redis down: the beat evaluates every fleet anyway
            first = True
        if first:
            try:
                evaluate_alerts.apply_async(args=[fleet_id], countdown=delay, retry=False)
            except Exception:
                logger.warning("alerts.enqueue_failed fleet=%d", fleet_id)


def on_rollups_stored(sender: Any, fleet_ids: frozenset[int], **kwargs: Any) -> None:
    """Receiver of `rollups_stored`: ask for an evaluation of each fleet (cheap, coalesced)."""
    request_alert_evaluation(fleet_ids)


_embedded_beat: threading.Thread | None = None
_embedded_beat_lock = threading.Lock()


def embedded_beat_start() -> None:
    """Embedded mode has no Celery beat: a thread of this process does its alert round, so
    silence is noticed there too. Started by the first rollups or the first open page."""
    global _embedded_beat
    if not settings.CELERY_TASK_ALWAYS_EAGER:
        return
    with _embedded_beat_lock:
        if _embedded_beat is None:
            _embedded_beat = threading.Thread(
                target=_embedded_beat_loop, name="alerts-beat", daemon=True
            )
            _embedded_beat.start()


def _embedded_beat_loop() -> None:
    while True:
        time.sleep(settings.ALERT_EVALUATE_INTERVAL_S)
        try:
            evaluate_all_alerts()
            # The beat's other round in embedded mode: due scheduled changes, in process.
            scheduled_changes_run_due()
        except Exception:
            logger.warning("alerts.embedded_beat_failed", exc_info=True)
        finally:
            connection.close()
