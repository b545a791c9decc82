"""The Redis client telemetry's parts share (ingest wake-up and rate limit, dashboard feed,
alert coalescing): one per URL, with short timeouts, since a down Redis must not stall a
request; each caller falls back when it is unreachable."""

from __future__ import annotations

from functools import lru_cache
from typing import Any


@lru_cache(maxsize=4)
def redis_client(url: str) -> Any:
    """A Redis client with short timeouts (a down Redis must not stall a request)."""
    import redis

    return redis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)
