"""Device tokens remembered per process, for hot paths (telemetry ingest authenticates every
batch; the token query would be a good part of a small request).

A token → device entry is kept TTL_S (60 s) while this process listens to the push channel,
whose `revoke` messages (device_revoke, and a re-enrolment replacing a token: push/receivers.py
sends them) drop the entry at once in every process; while it does not listen (Redis down,
embedded mode, not yet subscribed), SHORT_TTL_S (2 s). The revoking process drops its own
entry on commit either way. A lookup that raced a revocation is not remembered (a generation
counter), and a lost subscription forgets everything, since messages may have been missed
meanwhile.
"""

import json
import logging
import threading
import time
from typing import Any, Final

import redis
from django.conf import settings

from ..devices.models import Device
from ..devices.selectors import device_authenticate
from ..devices.tokens import hash_secret, looks_like_device_token
from .publish import push_channel

logger = logging.getLogger(__name__)

TTL_S: Final = 60.0
SHORT_TTL_S: Final = 2.0
_MAX_ENTRIES: Final = 100_000
_PING_EVERY_S: Final = 5.0

_entries: dict[str, tuple[float, Device]] = {}
_lock = threading.Lock()
_generation = 0  # bumped by every forget: a lookup that saw it change is not remembered
_listening = False
_listener: threading.Thread | None = None


def device_authenticate_cached(token: str) -> Device | None:
    """`device_authenticate`, remembered per process (see the module's docstring)."""
    if not looks_like_device_token(token):
        return None
    token_hash = hash_secret(token)
    now = time.monotonic()
    cached = _entries.get(token_hash)
    if cached is not None and cached[0] > now:
        return cached[1]
    _ensure_listener()
    generation = _generation
    device = device_authenticate(token)
    with _lock:
        if device is None or generation != _generation:
            _entries.pop(token_hash, None)
        else:
            if len(_entries) >= _MAX_ENTRIES:
                _entries.clear()
            _entries[token_hash] = (now + (TTL_S if _listening else SHORT_TTL_S), device)
    return device


def forget(token_hash: str) -> None:
    """This token was revoked or replaced: look it up again next time."""
    global _generation
    with _lock:
        _generation += 1
        _entries.pop(token_hash, None)


def _forget_all() -> None:
    global _generation
    with _lock:
        _generation += 1
        _entries.clear()


def _ensure_listener() -> None:
    global _listener
    if _listener is not None or not settings.REDIS_URL:
        return
    with _lock:
        if _listener is None:
            _listener = threading.Thread(target=_listen, name="token-cache", daemon=True)
            _listener.start()


def _listen() -> None:
    """Follow the push channel for `revoke` messages, reconnecting after any failure."""
    global _listening
    while True:
        try:
            client = redis.Redis.from_url(
                settings.REDIS_URL, socket_timeout=2 * _PING_EVERY_S, socket_connect_timeout=2
            )
            pubsub = client.pubsub()
            pubsub.subscribe(push_channel())
            last_ping = time.monotonic()
            while True:
                message = pubsub.get_message(timeout=1.0)
                if message is not None:
                    _on_message(message)
                if time.monotonic() - last_ping > _PING_EVERY_S:
                    pubsub.ping()
                    last_ping = time.monotonic()
        except Exception:  # Redis went away: short TTLs until subscribed again
            if _listening:
                logger.warning("token_cache.unsubscribed", exc_info=True)
            _listening = False
            _forget_all()
            time.sleep(1.0)


def _on_message(message: dict[str, Any]) -> None:
    global _listening
    if message["type"] == "subscribe":
        _listening = True
        return
    data = message.get("data")
    if message["type"] != "message" or not isinstance(data, bytes) or b'"revoke"' not in data:
        return
    try:
        token_hash = json.loads(data).get("token_hash")
    except ValueError:
        return
    if isinstance(token_hash, str):
        forget(token_hash)
