"""The statistics of the guards (telemetry.alerts.statistics): known values, direct
computations, and the anytime validity of the intervals under repeated looks."""

from __future__ import annotations

import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from telemetry.alerts.statistics import (
    Interval,
    mixture_radius,
    mixture_statistic,
    quantile_bounds,
    quantile_ratio,
    rate_difference,
    sample_ratio,
)
from telemetry.rollups.sketch import LatencySketch


def test_mixture_radius__variance_equal_to_prior__closed_form():
    # Given V = τ²: r = sqrt(2V · ln(2/α²))
    radius = mixture_radius(variance=1e-4, prior_variance=1e-4, alpha=0.05)
    assert math.isclose(radius, math.sqrt(2e-4 * math.log(2 / 0.05**2)), rel_tol=1e-12)


@given(
    variance=st.floats(1e-8, 1.0),
    prior=st.floats(1e-6, 1.0),
    alpha=st.floats(0.001, 0.3),
)
@settings(max_examples=200, deadline=None)
def test_mixture_radius__at_the_boundary__the_mixture_likelihood_ratio_is_one_over_alpha(
    variance, prior, alpha
):
    # Given the radius, When the mSPRT statistic is computed at that gap directly
    radius = mixture_radius(variance=variance, prior_variance=prior, alpha=alpha)
    statistic = mixture_statistic(gap=radius, variance=variance, prior_variance=prior)
    # Then it is exactly the Ville threshold 1/α
    assert math.isclose(statistic, 1 / alpha, rel_tol=1e-6)


def test_mixture_statistic__closed_form__matches_numerical_integration_over_the_prior():
    # Given θ̂ − θ = 0.01, V = 4e-5, τ = 0.01: Λ = ∫ N(θ̂; θ', V) / N(θ̂; θ, V) dN(θ'; θ, τ²)
    gap, variance, tau = 0.01, 4e-5, 0.01

    def density(x: float, sd: float) -> float:
        return math.exp(-(x**2) / (2 * sd**2)) / (sd * math.sqrt(2 * math.pi))

    steps, span = 20_000, 10 * tau
    width = 2 * span / steps
    integral = sum(
        math.exp((-((gap - d) ** 2) + gap**2) / (2 * variance)) * density(d, tau) * width
        for d in (-span + (i + 0.5) * width for i in range(steps))
    )
    assert math.isclose(
        mixture_statistic(gap=gap, variance=variance, prior_variance=tau**2), integral, rel_tol=1e-6
    )


def test_rate_difference__known_counts__estimate_and_width_as_computed_by_hand():
    # Given 300 of 1,000 candidate and 250 of 1,000 stable events in the cloud
    interval = rate_difference(candidate=(300, 1000), stable=(250, 1000), alpha=0.05, prior_sd=0.05)
    # Then the estimate is +5 points and the radius is the mixture's with the shrunk variance
    p_c, p_s = 300.5 / 1001, 250.5 / 1001
    variance = p_c * (1 - p_c) / 1000 + p_s * (1 - p_s) / 1000
    radius = math.sqrt(
        variance
        * (variance + 0.0025)
        / 0.0025
        * math.log((variance + 0.0025) / (variance * 0.05**2))
    )
    assert math.isclose(interval.estimate, 0.05)
    assert math.isclose(interval.upper - interval.estimate, radius)
    assert 0.05 < radius < 0.07  # wider than the fixed-sample 1.96·sd (0.039): the price of peeking


def test_rate_difference__zero_baseline_against_many_candidate_events__regressed():
    # Given stable never violated in 5,000 events and the candidate did 40 times in 2,000
    interval = rate_difference(candidate=(40, 2000), stable=(0, 5000), alpha=0.05, prior_sd=0.01)
    # Then the interval has a width (the zero baseline is shrunk) and lies beyond a 0.5-pt tolerance
    assert interval.upper > interval.lower
    assert interval.verdict(0.005) == "regressed"


def test_rate_difference__zero_against_zero__inconclusive_then_healthy_with_more_events():
    small = rate_difference(candidate=(0, 20), stable=(0, 20), alpha=0.05, prior_sd=0.01)
    large = rate_difference(candidate=(0, 50_000), stable=(0, 50_000), alpha=0.05, prior_sd=0.01)
    assert small.verdict(0.01) == "inconclusive"
    assert large.verdict(0.01) == "healthy"


def test_rate_difference__lower_is_worse__sign_turned():
    interval = rate_difference(
        candidate=(600, 1000), stable=(700, 1000), alpha=0.05, prior_sd=0.05, worse_when="lower"
    )
    assert math.isclose(interval.estimate, 0.1)


def test_interval_verdict__each_side_of_the_tolerance():
    assert Interval(0.1, 0.06, 0.14).verdict(0.05) == "regressed"
    assert Interval(0.0, -0.02, 0.02).verdict(0.05) == "healthy"
    assert Interval(0.04, 0.01, 0.07).verdict(0.05) == "inconclusive"


def test_sample_ratio__chi_square_at_the_textbook_critical_value__p_is_one_in_a_thousand():
    # Given 1 df: χ² = 10.828 is p = 0.001 (any chi-square table)
    # 10,000 events expected 50/50, 5,165 observed: χ² = 2 · 165² / 5,000 = 10.89 (p < 0.001)
    check = sample_ratio(observed=5165, total=10_000, expected_share=0.5)
    assert math.isclose(check.chi_square, 2 * 165**2 / 5000)
    assert math.isclose(check.p_value, math.erfc(math.sqrt(check.chi_square / 2)))
    assert math.isclose(math.erfc(math.sqrt(10.828 / 2)), 0.001, rel_tol=1e-3)
    assert check.mismatched()


def test_sample_ratio__on_target__no_mismatch():
    assert not sample_ratio(observed=510, total=10_000, expected_share=0.05).mismatched()


def test_sample_ratio__half_the_telemetry_dropped__mismatch_beyond_the_floor():
    check = sample_ratio(observed=250, total=9750, expected_share=0.05)
    assert check.mismatched(relative_floor=0.2)


def test_quantile_bounds__many_values__hold_the_exact_p95_and_narrow_with_more():
    rng = random.Random(7)
    values = [rng.lognormvariate(5, 0.5) for _ in range(20_000)]
    exact = sorted(values)[int(0.95 * len(values))]
    few = quantile_bounds(LatencySketch.of(values[:2000]).to_json(), q=0.95, alpha=0.05)
    many = quantile_bounds(LatencySketch.of(values).to_json(), q=0.95, alpha=0.05)
    assert few is not None
    assert many is not None
    assert many[0] <= exact <= many[1]
    assert many[1] - many[0] < few[1] - few[0]


def test_quantile_bounds__too_few_values_for_the_upper_rank__none():
    assert quantile_bounds(LatencySketch.of([100.0] * 10).to_json(), q=0.95, alpha=0.05) is None


def test_quantile_ratio__candidate_twice_as_slow__interval_around_plus_100_percent():
    rng = random.Random(3)
    stable = LatencySketch.of(rng.lognormvariate(5, 0.4) for _ in range(20_000))
    candidate = LatencySketch.of(2 * rng.lognormvariate(5, 0.4) for _ in range(20_000))
    estimate = (candidate.quantile(0.95) or 0.0, stable.quantile(0.95) or 0.0)
    interval = quantile_ratio(
        candidate.to_json(), stable.to_json(), q=0.95, alpha=0.05, estimate=estimate
    )
    assert interval is not None
    assert interval.lower < 1.0 < interval.upper
    assert interval.verdict(0.2) == "regressed"


# --- anytime validity: the false alarm rate under repeated looks --------------------------------

RUNS = 400
LOOKS = 60


def _aa_false_alarms(*, rate: float, per_look: int, alpha: float, seed: int) -> int:
    """A/A runs in which the interval excluded the true difference (0) at any of the looks."""
    rng = random.Random(seed)
    alarms = 0
    for _ in range(RUNS):
        c_part = s_part = c_whole = s_whole = 0
        for _ in range(LOOKS):
            c_whole += per_look
            s_whole += 4 * per_look  # the candidate is the smaller cohort, as at an early stage
            c_part += sum(rng.random() < rate for _ in range(per_look))
            s_part += sum(rng.random() < rate for _ in range(4 * per_look))
            interval = rate_difference(
                candidate=(c_part, c_whole), stable=(s_part, s_whole), alpha=alpha, prior_sd=0.02
            )
            if interval.lower > 0 or interval.upper < 0:
                alarms += 1
                break
    return alarms


def _allowed(alpha: float) -> float:
    # Nominal plus three binomial standard errors of the estimated rate.
    return RUNS * alpha + 3 * math.sqrt(RUNS * alpha * (1 - alpha))


def test_rate_difference__aa_streams_looked_at_sixty_times__false_alarms_at_most_nominal():
    # Given 400 A/A runs of a 30% rate, looked at after each of 60 batches
    alarms = _aa_false_alarms(rate=0.3, per_look=20, alpha=0.05, seed=11)
    # Then the interval ever missed the truth in no more than α of the runs (within sampling)
    assert alarms <= _allowed(0.05)


def test_rate_difference__aa_streams_of_a_rare_rate__false_alarms_at_most_nominal():
    alarms = _aa_false_alarms(rate=0.02, per_look=40, alpha=0.05, seed=12)
    assert alarms <= _allowed(0.05)


def test_fixed_sample_interval__same_aa_streams__false_alarms_far_above_nominal():
    # The contrast that motivates the sequence: a 95% z-interval looked at 60 times.
    rng = random.Random(11)
    alarms = 0
    for _ in range(RUNS):
        c = s = n_c = n_s = 0
        for _ in range(LOOKS):
            n_c += 20
            n_s += 80
            c += sum(rng.random() < 0.3 for _ in range(20))
            s += sum(rng.random() < 0.3 for _ in range(80))
            p_c, p_s = c / n_c, s / n_s
            sd = math.sqrt(p_c * (1 - p_c) / n_c + p_s * (1 - p_s) / n_s)
            if abs(p_c - p_s) > 1.96 * sd:
                alarms += 1
                break
    assert alarms > 2 * _allowed(0.05)


def test_quantile_bounds__aa_looks__the_true_p95_escapes_at_most_nominal():
    # Given exponential latencies (true P95 = ln 20 · 100 ms), looked at after every 100 values
    true_p95 = math.log(20) * 100
    rng = random.Random(5)
    misses = 0
    for _ in range(200):
        sketch = LatencySketch()
        for _ in range(30):
            for _ in range(100):
                sketch.add(rng.expovariate(1 / 100))
            bounds = quantile_bounds(sketch.to_json(), q=0.95, alpha=0.05)
            if bounds is not None and not bounds[0] <= true_p95 <= bounds[1]:
                misses += 1
                break
    assert misses <= 200 * 0.05 + 3 * math.sqrt(200 * 0.05 * 0.95)
