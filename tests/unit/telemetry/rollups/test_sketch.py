"""The latency sketch: quantiles within 1% of exact for groups of 10,000+ values of several
distributions, heavy tails included; merging is adding."""

import math
import random
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from telemetry.rollups.sketch import (
    ALPHA,
    LatencySketch,
    bucket_index,
    bucket_value,
    exact_quantile,
    score_bin,
)

QUANTILES = (0.5, 0.95, 0.99)

Distribution = Callable[[random.Random], float]

DISTRIBUTIONS: dict[str, Callable[[float], Distribution]] = {
    # `spread` widens each distribution; all are latencies in ms.
    "lognormal": lambda spread: lambda rng: rng.lognormvariate(math.log(40), 0.3 + spread),
    "pareto": lambda spread: lambda rng: 20 * rng.paretovariate(1.05 + spread),
    "exponential": lambda spread: lambda rng: rng.expovariate(1 / (10 + 300 * spread)),
    "uniform": lambda spread: lambda rng: rng.uniform(1, 100 + 5000 * spread),
    "bimodal": lambda spread: (
        lambda rng: rng.gauss(30, 5) if rng.random() < 0.8 else rng.gauss(900 + 2000 * spread, 150)
    ),
    "weibull-heavy": lambda spread: lambda rng: 50 * rng.weibullvariate(1, 0.4 + spread),
}


def _relative_error(estimate: float | None, exact: float) -> float:
    assert estimate is not None
    if exact == 0:
        return abs(estimate)
    return abs(estimate - exact) / abs(exact)


@settings(max_examples=12, deadline=None)
@given(
    name=st.sampled_from(sorted(DISTRIBUTIONS)),
    spread=st.floats(min_value=0.0, max_value=1.5),
    size=st.integers(min_value=10_000, max_value=30_000),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
)
def test_sketch_quantiles__10k_plus_values__within_1_percent_of_exact(
    name: str, spread: float, size: int, seed: int
) -> None:
    # Given 10,000+ latencies from one of several distributions (heavy tails included)
    rng = random.Random(seed)
    draw = DISTRIBUTIONS[name](spread)
    values = [max(0.0, draw(rng)) for _ in range(size)]

    # When they go through a sketch
    estimates = LatencySketch.of(values).quantiles(QUANTILES)

    # Then P50, P95 and P99 are within 1% of the exact (percentile_cont) values
    ordered = sorted(values)
    for q, estimate in zip(QUANTILES, estimates, strict=True):
        assert _relative_error(estimate, exact_quantile(ordered, q)) <= 0.01, (name, q)


@settings(max_examples=10, deadline=None)
@given(
    parts=st.integers(min_value=2, max_value=60),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
)
def test_sketch_merge__many_small_sketches__same_as_one_sketch(parts: int, seed: int) -> None:
    # Given 12,000 Pareto latencies split over many small sketches (minutes of a day)
    rng = random.Random(seed)
    values = [15 * rng.paretovariate(1.2) for _ in range(12_000)]
    whole = LatencySketch.of(values)
    merged = LatencySketch()

    # When the small sketches are merged
    for start in range(parts):
        merged.merge(LatencySketch.of(values[start::parts]))

    # Then the merge is exactly the sketch of all the values, and as accurate
    assert merged.counts == whole.counts
    ordered = sorted(values)
    for q, estimate in zip(QUANTILES, merged.quantiles(QUANTILES), strict=True):
        assert _relative_error(estimate, exact_quantile(ordered, q)) <= 0.01


@given(value=st.floats(min_value=1e-3, max_value=1e9, allow_nan=False, exclude_min=True))
def test_bucket_value__any_value__within_alpha(value: float) -> None:
    # Given / When a value is bucketed / Then its bucket's representative is within ALPHA of it
    representative = bucket_value(bucket_index(value))
    assert abs(representative - value) / value <= ALPHA + 1e-12


def test_sketch__zero_latency__counted_as_zero() -> None:
    # Given cache hits answered in 0 ms
    sketch = LatencySketch.of([0.0, 0.0, 0.0, 10.0])

    # When / Then the median is 0 and the max is ~10
    assert sketch.quantile(0.5) == 0.0
    assert sketch.quantile(1.0) == pytest.approx(10.0, rel=ALPHA)


def test_sketch__empty__no_quantile() -> None:
    assert LatencySketch().quantiles([0.5, 0.99]) == [None, None]


def test_sketch__json_round_trip__same_counts() -> None:
    sketch = LatencySketch.of([1.0, 2.5, 2.5, 900.0])
    assert LatencySketch.from_json(sketch.to_json()).counts == sketch.counts


@pytest.mark.parametrize(("score", "expected"), [(0.0, 0), (0.42, 42), (0.999, 99), (1.0, 99)])
def test_score_bin__score__hundredths(score: float, expected: int) -> None:
    assert score_bin(score) == expected
