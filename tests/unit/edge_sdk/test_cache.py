"""ResultCache: least recently used out first, each entry for its cell's TTL."""

from __future__ import annotations

from edge_sdk import ResultCache


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_get__within_ttl__hit_after_ttl__miss() -> None:
    clock = Clock()
    cache = ResultCache(8, clock=clock)
    cache.put("k", "answer", ttl_s=60)

    clock.now += 59.9
    assert cache.get("k") == "answer"
    clock.now += 0.1
    assert cache.get("k") is None

    assert (cache.hits, cache.misses, len(cache)) == (1, 1, 0)


def test_put__over_capacity__evicts_the_least_recently_used() -> None:
    cache = ResultCache(2, clock=Clock())
    cache.put("a", 1, ttl_s=60)
    cache.put("b", 2, ttl_s=60)
    assert cache.get("a") == 1  # a is now the most recent

    cache.put("c", 3, ttl_s=60)

    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (1, None, 3)


def test_put__ttl_zero_or_no_room__not_stored() -> None:
    cache = ResultCache(2, clock=Clock())
    cache.put("a", 1, ttl_s=0)
    ResultCache(0).put("b", 2, ttl_s=60)

    assert len(cache) == 0


def test_get__falsy_result_cached__told_apart_from_a_miss() -> None:
    cache = ResultCache(2, clock=Clock())
    missing = object()
    cache.put("empty", "", ttl_s=60)

    assert cache.get("empty", missing) == ""
    assert cache.get("other", missing) is missing
