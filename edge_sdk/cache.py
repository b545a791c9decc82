"""An LRU cache of task results, each entry living for its cell's `cache_ttl_s`."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

__all__ = ["ResultCache"]

_MISSING: Any = object()


class ResultCache:
    """At most `max_entries` results; the least recently used goes first, expired ones on read."""

    __slots__ = ("_clock", "_entries", "hits", "max_entries", "misses")

    def __init__(self, max_entries: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_entries = max_entries
        self._clock = clock
        self._entries: OrderedDict[Hashable, tuple[float, Any]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable, default: Any = None) -> Any:
        """The live result under `key`, or `default`."""
        entry = self._entries.get(key)
        if entry is None:
            self.misses += 1
            return default
        expires_at, value = entry
        if self._clock() >= expires_at:
            del self._entries[key]
            self.misses += 1
            return default
        self._entries.move_to_end(key)
        self.hits += 1
        return value

    def put(self, key: Hashable, value: Any, ttl_s: float) -> None:
        """Keep `value` for ttl_s seconds (not at all when ttl_s <= 0)."""
        if ttl_s <= 0 or self.max_entries <= 0:
            return
        self._entries[key] = (self._clock() + ttl_s, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        """Forget every entry."""
        self._entries.clear()
