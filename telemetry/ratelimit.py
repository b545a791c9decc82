"""Per-device rate limit of telemetry batches: a fixed window counted in Redis (or in-process).

With Redis (real services) every web process shares the count; embedded, one process counts.
When Redis cannot be reached the limit is not enforced (logged): refusing telemetry because
the limiter is down would lose more than a burst costs.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any

from django.conf import settings

from controlplane.exceptions import error_body

from .redis_client import redis_client

logger = logging.getLogger(__name__)

_local_counts: dict[tuple[str, int], int] = {}
_local_lock = threading.Lock()


def rate_limit_check(key: str, *, now: float | None = None) -> int | None:
    """Count one batch for `key`; the seconds to wait when over the limit, else None."""
    limit: int = settings.TELEMETRY_RATE_LIMIT_BATCHES
    window: int = settings.TELEMETRY_RATE_LIMIT_WINDOW_S
    if limit <= 0:
        return None
    moment = time.time() if now is None else now
    window_id = int(moment // window)
    retry_after = max(1, math.ceil((window_id + 1) * window - moment))
    if settings.REDIS_URL:
        redis_key = f"telemetry:ratelimit:{key}:{window_id}"
        try:
            pipe = redis_client(settings.REDIS_URL).pipeline()
            pipe.incr(redis_key)
            pipe.expire(redis_key, window + 1)
            count = int(pipe.execute()[0])
        except Exception:  # any Redis failure: fail open, say so
            logger.warning("telemetry.rate_limit_unavailable key=%s", key, exc_info=True)
            return None
    else:
        with _local_lock:
            count = _local_counts.get((key, window_id), 0) + 1
            _local_counts[(key, window_id)] = count
            if len(_local_counts) > 100_000:
                for stale in [k for k in _local_counts if k[1] < window_id]:
                    del _local_counts[stale]
    return retry_after if count > limit else None


Outcome = tuple[int, dict[str, Any], dict[str, str]]


def device_batch_gate(key: str, body: bytes | None) -> Outcome | None:
    """The answers every device batch endpoint gives before reading the body, in this order:
    429 past the rate limit of `key`, 413 for a body over MAX_REQUEST_BYTES (None: the server
    stopped reading it); None when the batch may be read."""
    retry_after = rate_limit_check(key)
    if retry_after is not None:
        return (
            429,
            error_body(
                "rate_limited", f"Too many batches from this device; retry in {retry_after} s."
            ),
            {"Retry-After": str(retry_after)},
        )
    limit: int = settings.MAX_REQUEST_BYTES
    if body is None or len(body) > limit:
        return 413, error_body("payload_too_large", f"The body is over {limit} bytes."), {}
    return None
