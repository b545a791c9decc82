"""Delivering alert webhooks: one attempt at a time, logged, with exponential back-off.

An attempt holds the delivery's row lock (`SKIP LOCKED`: a second task for the same delivery
does nothing), POSTs the JSON body, and logs the outcome. 2xx is delivered; a network error,
a timeout, 408, 429 or 5xx is retried after ALERT_WEBHOOK_BACKOFF_S × 2^(attempt − 1) seconds
(capped at ALERT_WEBHOOK_BACKOFF_MAX_S) up to ALERT_WEBHOOK_MAX_ATTEMPTS; any other answer
(a 4xx the receiver means) fails it at once.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import httpx
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from ..alert_models import WebhookDelivery

logger = logging.getLogger(__name__)

RETRYABLE_STATUS = frozenset({408, 425, 429})


def backoff_seconds(attempt: int) -> float:
    """Seconds to wait after failed attempt number `attempt` (1, 2, …)."""
    base: float = settings.ALERT_WEBHOOK_BACKOFF_S
    cap: float = settings.ALERT_WEBHOOK_BACKOFF_MAX_S
    return float(min(cap, base * 2 ** (attempt - 1)))


def webhook_delivery_attempt(*, delivery_id: int) -> float | None:
    """Try one delivery once; return the seconds until it should be tried again, or None."""
    with transaction.atomic():
        delivery = (
            WebhookDelivery.objects.select_for_update(skip_locked=True)
            .filter(pk=delivery_id, status=WebhookDelivery.Status.PENDING)
            .first()
        )
        if delivery is None:
            return None  # delivered, given up, or another worker is on it right now
        status_code: int | None = None
        error = ""
        try:
            response = httpx.post(
                delivery.url,
                json=delivery.payload,
                headers={
                    "User-Agent": "edge-routing-alerts/1",
                    "X-Alert-Delivery": str(delivery.pk),
                },
                timeout=settings.ALERT_WEBHOOK_TIMEOUT_S,
                follow_redirects=False,
                trust_env=False,
            )
            status_code = response.status_code
            delivered = 200 <= status_code < 300
            retryable = status_code >= 500 or status_code in RETRYABLE_STATUS
            if not delivered:
                error = f"HTTP {status_code}: {response.text[:200]}"
        except httpx.HTTPError as exc:
            delivered, retryable = False, True
            error = f"{type(exc).__name__}: {exc}"[:300]
        now = timezone.now()
        delivery.attempts += 1
        retry_in: float | None = None
        if delivered:
            delivery.status = WebhookDelivery.Status.DELIVERED
            delivery.finished_at, delivery.next_attempt_at = now, None
        elif retryable and delivery.attempts < settings.ALERT_WEBHOOK_MAX_ATTEMPTS:
            retry_in = backoff_seconds(delivery.attempts)
            delivery.next_attempt_at = now + timedelta(seconds=retry_in)
        else:
            delivery.status = WebhookDelivery.Status.FAILED
            delivery.finished_at, delivery.next_attempt_at = now, None
        delivery.attempt_log = [
            *delivery.attempt_log,
            {"at": now.isoformat(), "status": status_code, "error": error, "retry_in_s": retry_in},
        ]
        delivery.save(
            update_fields=["status", "attempts", "attempt_log", "next_attempt_at", "finished_at"]
        )
    logger.info(
        "webhook.attempted delivery=%d attempt=%d status=%s outcome=%s",
        delivery.pk,
        delivery.attempts,
        status_code,
        delivery.status,
    )
    return retry_in


def webhook_deliveries_overdue(*, grace_s: float = 60.0) -> list[int]:
    """Pending deliveries whose next attempt is overdue by `grace_s` (their task was lost)."""
    cutoff = timezone.now() - timedelta(seconds=grace_s)
    return list(
        WebhookDelivery.objects.filter(
            status=WebhookDelivery.Status.PENDING, next_attempt_at__lt=cutoff
        ).values_list("pk", flat=True)[:500]
    )
