"""Sending push messages to every ASGI process: one PUBLISH on the deployment's channel, after
the transaction that made the change commits (docs/capacity.md).

Never raises for Redis being away: what a message announces is committed already, and every
process's reconcile delivers it within PUSH_RECONCILE_S. Without REDIS_URL (embedded mode) the
process's own hub gets the message, once it has started.
"""

import asyncio
import json
import logging
from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import urlparse

import redis
from django.conf import settings
from django.db import transaction

logger = logging.getLogger(__name__)

PUSH_CHANNEL = "controlplane:push"

LocalDispatch = Callable[[dict[str, Any]], Coroutine[Any, Any, None]]
# Embedded mode: the running hub's dispatch and its event loop (see `deliver_locally`).
_local: tuple[LocalDispatch, asyncio.AbstractEventLoop] | None = None
_clients: dict[str, redis.Redis] = {}


def push_channel() -> str:
    """The pub/sub channel of this deployment.

    Redis pub/sub ignores the database number of REDIS_URL, so two deployments (or two test
    runs) on one Redis with different databases would hear each other's pushes, whose fleet ids
    mean different fleets in their databases. The database number is part of the name.
    """
    database = (urlparse(settings.REDIS_URL).path or "/0").strip("/") or "0"
    return f"{PUSH_CHANNEL}:{database}"


def deliver_locally(dispatch: LocalDispatch, loop: asyncio.AbstractEventLoop) -> None:
    """Embedded mode: hand this process's messages to its hub's `dispatch`, on its loop."""
    global _local
    _local = (dispatch, loop)


def publish_on_commit(message: dict[str, Any]) -> None:
    """`publish` once the current transaction commits (at once outside one)."""
    transaction.on_commit(lambda: publish(message))


def publish(message: dict[str, Any]) -> None:
    """Send one push message to every process (call after the transaction commits)."""
    publish_many([message])


def publish_many(messages: list[dict[str, Any]]) -> None:
    """Several push messages, in order, in one round trip to Redis."""
    if not messages:
        return
    if not settings.REDIS_URL:
        _dispatch_here(messages)
        return
    channel = push_channel()
    try:
        with _client().pipeline(transaction=False) as pipe:
            for message in messages:
                pipe.publish(channel, json.dumps(message, separators=(",", ":")))
            pipe.execute()
    except (redis.RedisError, OSError):
        logger.warning(
            "push.publish_failed kinds=%s fleets=%s: the change is committed; connected devices "
            "get it at their processes' next reconcile (PUSH_RECONCILE_S=%s)",
            sorted({str(m.get("kind")) for m in messages}),
            sorted({str(m.get("fleet_id")) for m in messages}),
            settings.PUSH_RECONCILE_S,
            exc_info=True,
        )


def _dispatch_here(messages: list[dict[str, Any]]) -> None:
    if _local is None:
        return
    dispatch, loop = _local
    if loop.is_closed():
        return
    for message in messages:
        asyncio.run_coroutine_threadsafe(dispatch(message), loop)


def _client() -> redis.Redis:
    client = _clients.get(settings.REDIS_URL)
    if client is None:
        client = _clients[settings.REDIS_URL] = redis.Redis.from_url(
            settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=5
        )
    return client
