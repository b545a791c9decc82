"""Anytime-valid comparisons of two cohorts: pure math, no database, no Django.

A guard looks after every rollup; a fixed-sample test looked at that often raises false alarms
far above its nominal level. These intervals are confidence *sequences*: with probability at
least `1 - alpha` they hold the true value at every look at once, so looking after every
rollup costs nothing (docs/alerts.md, "Statistical guards").

- Rates (cloud share, α, fallback, error, cache hit, privacy violations, draft kept; mean
  quality, a mean of values in [0, 1], as a rate: its variance is at most μ(1 − μ)): the
  normal-mixture sequential probability ratio test (mSPRT) of Johari, Koomen, Pekelis & Walsh
  ("Always valid inference", Operations Research 2022; Optimizely's stats engine) on candidate
  − stable,
  inverted into a confidence sequence. The estimator's variance comes from the two cohorts'
  counts (a rate needs two integers per cohort, as in Lindon et al., KDD 2022); a count is
  shrunk by half an event towards ½ when the variance is estimated, so a zero baseline (0 of n
  on stable) still has a width and a non-zero candidate against it is judged, not waved
  through (Kayenta's weak spot). Asymptotically valid: the normal approximation holds once a
  cohort has some tens of events, which the guard's `min_samples` asks for.
- Latency quantiles: a confidence sequence for each cohort's P95 from its sketch, by the same
  mixture boundary on the empirical CDF at the quantile (Howard & Ramdas, "Sequential
  estimation of quantiles", Bernoulli 2022, in its asymptotic form): the true P95 lies between
  the order statistics at ranks n(p ± r). The sketch's relative error (sketch.ALPHA) widens
  each end; the ratio candidate/stable takes the outer ends of both.
- Sample ratio mismatch: Pearson's chi-square with one degree of freedom.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from ..rollups.sketch import ALPHA as SKETCH_ALPHA
from ..rollups.sketch import bucket_value

# Where a guard stands (docs/alerts.md): too little data yet, the interval wholly within the
# tolerance, straddling it, wholly beyond it; SRM is the guard set's, not a guard's.
Verdict = Literal["collecting", "healthy", "inconclusive", "regressed"]
SRM_P_VALUE: Final = 0.001
# A hold is released only once the ratio is clearly back (p at or above ten times the hold's
# threshold): a p-value wandering about 0.001 holds once, not once per look.
SRM_RELEASE_P_VALUE: Final = 0.01


@dataclass(frozen=True, slots=True)
class Interval:
    """An estimate of "how much worse the candidate is" with its anytime-valid interval.

    For rates: points (candidate − stable, signed so that positive is worse); for latency: the
    ratio candidate P95 / stable P95 minus one (0.2 is 20% slower).
    """

    estimate: float
    lower: float
    upper: float

    def verdict(self, tolerance: float) -> Verdict:
        """Regressed when wholly beyond the tolerated regression, healthy when wholly within."""
        if self.lower > tolerance:
            return "regressed"
        if self.upper <= tolerance:
            return "healthy"
        return "inconclusive"


def mixture_radius(*, variance: float, prior_variance: float, alpha: float) -> float:
    """Half-width of the normal-mixture confidence sequence for an estimate with this variance.

    The mSPRT statistic of an estimate θ̂ ~ N(θ, V) against θ, mixed over θ' ~ N(θ, τ²), is
        Λ = sqrt(V / (V + τ²)) · exp(τ² (θ̂ − θ)² / (2 V (V + τ²)));
    Λ is a (super)martingale under θ, so by Ville's inequality it exceeds 1/α at some look with
    probability ≤ α. Solving Λ = 1/α for |θ̂ − θ| gives
        r = sqrt(V (V + τ²) / τ² · ln((V + τ²) / (V α²))).
    """
    if variance <= 0:
        return 0.0
    if not 0 < alpha < 1 or prior_variance <= 0:
        raise ValueError("alpha is in (0, 1) and the prior variance is > 0")
    total = variance + prior_variance
    return math.sqrt(variance * total / prior_variance * math.log(total / (variance * alpha**2)))


def mixture_statistic(*, gap: float, variance: float, prior_variance: float) -> float:
    """Λ itself for an observed gap θ̂ − θ (the direct computation `mixture_radius` inverts)."""
    total = variance + prior_variance
    return math.sqrt(variance / total) * math.exp(prior_variance * gap**2 / (2 * variance * total))


def _shrunk(part: float, whole: float) -> float:
    """A rate for its variance: half an event towards ½ (never exactly 0 or 1)."""
    return (part + 0.5) / (whole + 1)


def rate_difference(
    *,
    candidate: tuple[float, float],
    stable: tuple[float, float],
    alpha: float,
    prior_sd: float,
    worse_when: Literal["higher", "lower"] = "higher",
) -> Interval:
    """Candidate − stable of a rate from (part, whole) counts, as an anytime-valid interval.

    `worse_when="lower"` (α, cache hit rate, draft-kept rate) turns the sign so that positive
    is always worse. A part may be a sum of values in [0, 1] (mean quality): their variance is
    at most the Bernoulli one used here, so the interval stays valid, if wider.
    """
    (c_part, c_whole), (s_part, s_whole) = candidate, stable
    if c_whole <= 0 or s_whole <= 0:
        raise ValueError("both cohorts need events")
    gap = c_part / c_whole - s_part / s_whole
    p_c, p_s = _shrunk(c_part, c_whole), _shrunk(s_part, s_whole)
    variance = p_c * (1 - p_c) / c_whole + p_s * (1 - p_s) / s_whole
    radius = mixture_radius(variance=variance, prior_variance=prior_sd**2, alpha=alpha)
    if worse_when == "lower":
        gap = -gap
    return Interval(gap, gap - radius, gap + radius)


# The quantile's mixture is on the proportion scale (the empirical CDF at the quantile), whose
# drifts that matter are a few points: one prior for every quantile guard.
QUANTILE_PRIOR_SD: Final = 0.02


def quantile_bounds(
    counts: Mapping[str, int], *, q: float, alpha: float
) -> tuple[float, float] | None:
    """Anytime-valid bounds on the q-quantile of the values a stored sketch counts.

    The number of values at or below the true quantile is Binomial(n, q); its proportion's
    confidence sequence (`mixture_radius` with variance q(1−q)/n) puts the quantile between
    the order statistics at ranks n(q − r) and n(q + r). Each end is widened by the sketch's
    relative error. None when the sketch is empty or too small for the upper rank to exist.
    """
    ordered = sorted((int(key), count) for key, count in counts.items() if count > 0)
    total = sum(count for _, count in ordered)
    if total == 0:
        return None
    radius = mixture_radius(
        variance=q * (1 - q) / total, prior_variance=QUANTILE_PRIOR_SD**2, alpha=alpha
    )
    low_rank = math.floor(total * (q - radius))  # 1-based ranks; ≤ 0: no lower bound but 0
    high_rank = math.ceil(total * (q + radius))
    if high_rank > total:
        return None
    low = _value_at_rank(ordered, low_rank) * (1 - SKETCH_ALPHA) if low_rank >= 1 else 0.0
    high = _value_at_rank(ordered, high_rank) * (1 + SKETCH_ALPHA)
    return low, high


def _value_at_rank(ordered: list[tuple[int, int]], rank: int) -> float:
    seen = 0
    for index, count in ordered:
        seen += count
        if seen >= rank:
            return bucket_value(index)
    return bucket_value(ordered[-1][0])


def quantile_ratio(
    candidate: Mapping[str, int],
    stable: Mapping[str, int],
    *,
    q: float,
    alpha: float,
    estimate: tuple[float, float],
) -> Interval | None:
    """Candidate's q-quantile / stable's − 1 (0.2: 20% slower), each cohort at α/2.

    `estimate` is (candidate, stable) quantile as the sketch reads them, for the point value.
    None when either cohort cannot bound its quantile yet.
    """
    mine = quantile_bounds(candidate, q=q, alpha=alpha / 2)
    theirs = quantile_bounds(stable, q=q, alpha=alpha / 2)
    if mine is None or theirs is None or theirs[0] <= 0 or estimate[1] <= 0:
        return None
    return Interval(estimate[0] / estimate[1] - 1, mine[0] / theirs[1] - 1, mine[1] / theirs[0] - 1)


@dataclass(frozen=True, slots=True)
class RatioCheck:
    """A sample-ratio check: observed candidate share against the expected one."""

    observed: int
    total: int
    expected_share: float
    chi_square: float
    p_value: float

    @property
    def share(self) -> float:
        """The candidate's observed share."""
        return self.observed / self.total if self.total else 0.0

    def mismatched(self, *, relative_floor: float = 0.0, p_value: float = SRM_P_VALUE) -> bool:
        """p below `p_value` (0.001) and, when a floor is given, off by more than that share
        of expected."""
        if self.p_value >= p_value:
            return False
        return abs(self.share - self.expected_share) > relative_floor * self.expected_share


def sample_ratio(*, observed: int, total: int, expected_share: float) -> RatioCheck:
    """Pearson's chi-square (1 degree of freedom) of `observed` of `total` against a share."""
    if total <= 0 or not 0 < expected_share < 1:
        return RatioCheck(observed, total, expected_share, 0.0, 1.0)
    expected = total * expected_share
    rest = total - expected
    statistic = (observed - expected) ** 2 / expected + (total - observed - rest) ** 2 / rest
    return RatioCheck(
        observed, total, expected_share, statistic, math.erfc(math.sqrt(statistic / 2))
    )
