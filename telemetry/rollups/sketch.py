"""A mergeable latency sketch: log-spaced buckets with a relative accuracy of ALPHA.

Bucket `i` holds the values in (GAMMA**(i-1), GAMMA**i], with GAMMA = (1+ALPHA)/(1-ALPHA);
its representative value 2*GAMMA**i/(GAMMA+1) is within ALPHA (relative) of every value in
it. Merging two sketches adds their counts bucket by bucket, so per-minute sketches fold into
hours, fleets and any window without losing accuracy. Quantiles interpolate linearly between
the two ranks around `q*(n-1)` (as PostgreSQL's `percentile_cont`); each rank's value is
within ALPHA of the exact order statistic, and so is the interpolation.

Pure (msgspec its one dependency): the ingest worker, the selectors and the benchmark share
it. Values at or below MIN_VALUE (latencies of 0 ms) share one zero bucket, represented as 0.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Final

import msgspec

ALPHA: Final = 0.005
GAMMA: Final = (1 + ALPHA) / (1 - ALPHA)
LOG_GAMMA: Final = math.log(GAMMA)
MIN_VALUE: Final = 1e-3
ZERO_INDEX: Final = -(2**20)
_REPRESENTATIVE_FACTOR: Final = 2 / (GAMMA + 1)

# Scores live in [0, 1]; threshold calibration wants their distribution in 0.01 steps.
SCORE_BINS: Final = 100
_DECODE_COUNTS: Final = msgspec.json.Decoder(dict[str, Annotated[int, msgspec.Meta(ge=0)]])


def bucket_index(value: float) -> int:
    """The bucket holding `value` (>= 0)."""
    if value <= MIN_VALUE:
        return ZERO_INDEX
    return math.ceil(math.log(value) / LOG_GAMMA)


def bucket_value(index: int) -> float:
    """The representative value of bucket `index` (within ALPHA of all its values)."""
    if index == ZERO_INDEX:
        return 0.0
    try:
        return math.exp(index * LOG_GAMMA) * _REPRESENTATIVE_FACTOR
    except OverflowError:
        # Only a row stored before telemetry numbers had physical ranges (latency 1e308) has
        # such a bucket: the largest float, so that every figure read from it stays finite.
        return sys.float_info.max


def score_bin(score: float) -> int:
    """The complexity-score bin (0..SCORE_BINS-1) of a score in [0, 1]."""
    return min(SCORE_BINS - 1, max(0, int(score * SCORE_BINS)))


class LatencySketch:
    """Counts per log bucket; mergeable, serialisable as `{"<index>": count}`."""

    __slots__ = ("counts",)

    def __init__(self, counts: Mapping[int, int] | None = None) -> None:
        self.counts: dict[int, int] = dict(counts) if counts else {}

    @classmethod
    def of(cls, values: Iterable[float]) -> LatencySketch:
        """A sketch of these values."""
        sketch = cls()
        for value in values:
            sketch.add(value)
        return sketch

    @classmethod
    def from_json(cls, data: Mapping[str, int]) -> LatencySketch:
        """Inverse of `to_json`; an entry that is not `"<whole number>": count >= 0` (a bad
        row stored by hand or by an older version) is left out rather than failing the read."""
        counts: dict[int, int] = {}
        for key, count in data.items():
            try:
                index = int(key)
            except (TypeError, ValueError):
                continue
            if isinstance(count, int) and not isinstance(count, bool) and count > 0:
                counts[index] = counts.get(index, 0) + count
        return cls(counts)

    def to_json(self) -> dict[str, int]:
        """JSON-friendly form (object keys must be strings)."""
        return {str(index): count for index, count in self.counts.items()}

    @property
    def count(self) -> int:
        """How many values the sketch holds."""
        return sum(self.counts.values())

    def add(self, value: float, count: int = 1) -> None:
        """Record `value` (>= 0) `count` times."""
        index = bucket_index(value)
        self.counts[index] = self.counts.get(index, 0) + count

    def merge(self, other: LatencySketch) -> None:
        """Add `other`'s counts into this sketch."""
        counts = self.counts
        for index, count in other.counts.items():
            counts[index] = counts.get(index, 0) + count

    def quantile(self, q: float) -> float | None:
        """The q-quantile (0 <= q <= 1), interpolated as `percentile_cont`; None when empty."""
        return self.quantiles([q])[0]

    def quantiles(self, qs: Iterable[float]) -> list[float | None]:
        """Several quantiles in one pass over the buckets."""
        wanted = list(qs)
        for q in wanted:
            if not 0.0 <= q <= 1.0:
                raise ValueError(f"quantile {q} is outside [0, 1]")
        total = self.count
        if total == 0:
            return [None for _ in wanted]
        ordered = sorted(self.counts.items())
        # Every rank that any quantile needs: floor(h) and floor(h)+1 for h = q*(n-1).
        ranks: set[int] = set()
        for q in wanted:
            position = q * (total - 1)
            lower = math.floor(position)
            ranks.update((lower, min(lower + 1, total - 1)))
        value_at: dict[int, float] = {}
        pending = sorted(ranks)
        seen = 0
        cursor = 0
        for index, count in ordered:
            seen += count
            while cursor < len(pending) and pending[cursor] < seen:
                value_at[pending[cursor]] = bucket_value(index)
                cursor += 1
            if cursor == len(pending):
                break
        out: list[float | None] = []
        for q in wanted:
            position = q * (total - 1)
            lower = math.floor(position)
            upper = min(lower + 1, total - 1)
            fraction = position - lower
            out.append(value_at[lower] + (value_at[upper] - value_at[lower]) * fraction)
        return out


def merge_counts(target: dict[str, int], source: Mapping[str, int]) -> None:
    """Add serialised counts into `target` in place (both keyed by bucket as a string).

    The selectors merge thousands of stored sketches; skipping the int conversion of every key
    until the quantile is asked for keeps that merge a plain dict update.
    """
    get = target.get
    for key, count in source.items():
        target[key] = get(key, 0) + count


def stored_histogram(value: Any) -> dict[str, int]:
    """A stored histogram column as `{"<bucket>": count}`, whatever the row holds.

    Counts are whole numbers >= 0; anything else (a row written by hand or by an older
    version) is left out, so one bad row never fails a read of the fleet, or of every fleet.
    Keys are checked where they are read as numbers (LatencySketch.from_json, score_counts).
    """
    if isinstance(value, str | bytes):
        try:
            return _DECODE_COUNTS.decode(value)
        except msgspec.DecodeError:
            try:
                value = msgspec.json.decode(value)
            except msgspec.DecodeError:
                return {}
    if not isinstance(value, Mapping):
        return {}
    return {
        str(key): count
        for key, count in value.items()
        if isinstance(count, int) and not isinstance(count, bool) and count >= 0
    }


def score_counts(score_hist: Mapping[str, int]) -> list[int]:
    """A merged score histogram as SCORE_BINS counts, bin 0 first (a bad stored key is left
    out)."""
    counts = [0] * SCORE_BINS
    for key, count in score_hist.items():
        if key.isdigit() and int(key) < SCORE_BINS:
            counts[int(key)] += count
    return counts


def exact_quantile(sorted_values: list[float], q: float) -> float:
    """The exact q-quantile of sorted values, interpolated as `percentile_cont`."""
    if not sorted_values:
        raise ValueError("no values")
    position = q * (len(sorted_values) - 1)
    lower = math.floor(position)
    upper = min(lower + 1, len(sorted_values) - 1)
    fraction = position - lower
    return sorted_values[lower] + (sorted_values[upper] - sorted_values[lower]) * fraction
