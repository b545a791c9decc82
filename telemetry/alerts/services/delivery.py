"""Delivering alert webhooks: one attempt at a time, logged, with exponential back-off.

An attempt holds the delivery's row lock (`SKIP LOCKED`: a second task for the same delivery
does nothing), POSTs the JSON body, and logs the outcome. 2xx is delivered; a network error,
a timeout, 408, 429 or 5xx is retried after ALERT_WEBHOOK_BACKOFF_S × 2^(attempt − 1) seconds
(capped at ALERT_WEBHOOK_BACKOFF_MAX_S) up to ALERT_WEBHOOK_MAX_ATTEMPTS; any other answer
(a 4xx the receiver means) fails it at once.

Webhook URLs are typed in by publishers, and the worker that posts to them sits inside the
deployment's network: unless ALERT_WEBHOOK_ALLOW_PRIVATE_NETWORKS is set, a URL whose host is
(or, at delivery, resolves to) a loopback, private, link-local or otherwise non-public address
is refused, so a webhook cannot be used to reach the database, Redis, a cloud metadata
endpoint or an internal service (server-side request forgery). The name is resolved again at
each attempt; a name that resolves to a public address when checked and to another one a
moment later (DNS rebinding) is not caught here, which is why the outbound firewall of the
workers should say the same.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import socket
import threading
import time
import unicodedata
from datetime import timedelta
from typing import Final
from urllib.parse import urlparse

import httpx
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from controlplane.queue import task_send

from ..models import WebhookDelivery

logger = logging.getLogger(__name__)

RETRYABLE_STATUS = frozenset({408, 425, 429})


class _Refused(Exception):
    """The delivery's URL points inside the network (see the module's docstring)."""


_INET_ATON_PART: Final = re.compile(r"0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*")
_NAT64: Final = ipaddress.IPv6Network("64:ff9b::/96")
# Dots a URL parser (UTS #46, as httpx's IDNA encoding) reads as the full stop.
_DOTS: Final = str.maketrans({"\u3002": ".", "\uff0e": ".", "\uff61": "."})


def _inet_aton(host: str) -> ipaddress.IPv4Address | None:
    """`host` read as libc's inet_aton (and so getaddrinfo, curl, httpx) reads an IPv4
    address: 1 to 4 parts, each decimal, octal (`0177`) or hex (`0x7f`), the last one filling
    the remaining bytes (`127.1`, `2130706433`, `0x7f000001`); None when it is not one."""
    parts = host.split(".")
    if not 1 <= len(parts) <= 4 or not all(_INET_ATON_PART.fullmatch(p) for p in parts):
        return None
    numbers = [
        int(p, 16) if p[:2] in ("0x", "0X") else int(p, 8) if p.startswith("0") else int(p)
        for p in parts
    ]
    *head, last = numbers
    if any(n > 255 for n in head) or last >= 1 << (8 * (4 - len(head))):
        return None
    value = last
    for position, number in enumerate(head):
        value |= number << (24 - 8 * position)
    return ipaddress.IPv4Address(value)


def _ip_of(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address a URL's host spells, in any of its spellings, or None for a name."""
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])  # an IPv6 zone is not part of it
    except ValueError:
        return _inet_aton(host)


def _non_public(address: str) -> bool:
    ip = _ip_of(address)
    if ip is None:
        raise ValueError(f"{address!r} is not an address")
    if isinstance(ip, ipaddress.IPv6Address):
        # An IPv4 address carried inside IPv6 (mapped, 6to4, Teredo, NAT64, compatible) is
        # judged as that IPv4 address.
        embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if embedded is None and ip in _NAT64:
            embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if embedded is None and int(ip) >> 32 == 0 and int(ip) > 1:
            embedded = ipaddress.IPv4Address(int(ip))  # ::a.b.c.d, IPv4-compatible
        if embedded is not None:
            return not embedded.is_global or embedded.is_multicast
    return not ip.is_global or ip.is_multicast


def url_refusal(url: str) -> str | None:
    """Why `url` may not be a webhook, judged on its text alone (no DNS), or None.

    Every spelling of an address counts: `127.1`, `2130706433`, `0x7f000001`, `0177.0.0.1`,
    `[::ffff:127.0.0.1]`, a trailing dot, full-width digits.
    """
    if settings.ALERT_WEBHOOK_ALLOW_PRIVATE_NETWORKS:
        return None
    host = unicodedata.normalize("NFKC", urlparse(url).hostname or "").translate(_DOTS)
    host = host.rstrip(".").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return f"{host} is this machine"
    try:
        non_public = _non_public(host)
    except ValueError:
        return None  # a name: checked where it resolves, at each delivery
    if non_public:
        ip = _ip_of(host)
        spelled = f" ({ip})" if ip is not None and str(ip) != host else ""
        return f"{host}{spelled} is not a public address"
    return None


def delivery_refusal(url: str) -> str | None:
    """Why posting to `url` is refused now (its host resolves to a non-public address)."""
    if settings.ALERT_WEBHOOK_ALLOW_PRIVATE_NETWORKS:
        return None
    refusal = url_refusal(url)
    if refusal is not None:
        return refusal
    parsed = urlparse(url)
    try:
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        infos = socket.getaddrinfo(parsed.hostname or "", port, proto=socket.IPPROTO_TCP)
    except (OSError, ValueError):
        return None  # unresolvable: the POST fails as a network error and is retried
    for info in infos:
        address = str(info[4][0])
        if _non_public(address):
            return f"{parsed.hostname} resolves to {address}, not a public address"
    return None


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
        refusal = delivery_refusal(delivery.url)
        try:
            if refusal is not None:
                raise _Refused(refusal)
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
        except _Refused as exc:
            delivered, retryable = False, False
            error = f"refused: {exc} (ALERT_WEBHOOK_ALLOW_PRIVATE_NETWORKS is off)"[:300]
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


def enqueue_delivery(delivery_id: int) -> None:
    """Start delivering (call after the commit that created the delivery)."""
    if settings.CELERY_TASK_ALWAYS_EAGER:
        # Embedded mode has no worker to wait for a retry: a thread sleeps through the back-off.
        threading.Thread(target=_deliver_embedded, args=(delivery_id,), daemon=True).start()
        return
    try:
        task_send("telemetry.deliver_webhook", args=[delivery_id], retry=False)
    except Exception:  # the beat re-enqueues overdue deliveries
        logger.warning("webhook.enqueue_failed delivery=%d", delivery_id)


def deliveries_start_on_commit(deliveries: list[WebhookDelivery]) -> None:
    """Start delivering each of `deliveries` once the transaction that created them commits."""
    ids = [d.pk for d in deliveries]

    def start_deliveries() -> None:
        for delivery_id in ids:
            enqueue_delivery(delivery_id)

    if ids:
        transaction.on_commit(start_deliveries)


def _deliver_embedded(delivery_id: int) -> None:
    try:
        while (retry_in := webhook_delivery_attempt(delivery_id=delivery_id)) is not None:
            time.sleep(retry_in)
    finally:
        connection.close()
