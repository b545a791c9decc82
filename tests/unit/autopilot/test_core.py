"""The autopilot's decisions (autopilot/core.py) and cadence (autopilot/schedule.py)."""

from datetime import UTC, datetime, time

import pytest

from autopilot.core import (
    CurvePoint,
    Limits,
    Realized,
    Tolerance,
    bound_z,
    misses,
    propose,
    quality_low,
    reports_needed,
)
from autopilot.schedule import in_quiet_period, next_run


def curve(*, quality_at, sigma: float = 0.01, p95=lambda t: 100.0) -> list[CurvePoint]:
    """101 points: α = θ, quality falling as θ rises, a two-sided 95% interval of ±1.96σ."""
    points = []
    for k in range(101):
        theta = k / 100
        q = quality_at(theta)
        points.append(
            CurvePoint(
                threshold=theta,
                alpha=theta,
                cloud_share=1 - theta,
                p95_ms=p95(theta),
                cost_per_day=(1 - theta) * 10,
                quality=q,
                quality_high=q + 1.959964 * sigma,
                quality_low_2s=q - 1.959964 * sigma,
            )
        )
    return points


def test_bound_z__delta_five_percent__one_sided_95() -> None:
    assert bound_z(0.05) == pytest.approx(1.6449, abs=1e-4)


def test_reports_needed__kept_rate_and_resolution__z_squared_p_q_over_m_squared() -> None:
    # 1.645² · 0.85 · 0.15 / 0.02² = 862.4 → 863
    assert reports_needed(kept_rate=0.85, resolution=0.02, delta=0.05) == 863
    # never fewer than the lab's own minimum
    assert reports_needed(kept_rate=0.99, resolution=0.2, delta=0.05) == 100


def test_propose__room_above__the_highest_alpha_within_one_step() -> None:
    # Given quality 0.99 − 0.1θ (well above 0.85 up to θ 1), θ at 0.50, a step of 0.05
    points = curve(quality_at=lambda t: 0.99 - 0.1 * t)
    # When proposed
    proposal = propose(
        curve=points, current_threshold=0.5, events=20_000, limits=Limits(max_step=0.05)
    )
    # Then θ rises by the largest step allowed
    assert proposal.threshold_to == pytest.approx(0.55)
    assert proposal.gain_low is not None
    assert proposal.gain_low > 0.01


def test_propose__bound_binds__stops_where_the_lower_bound_meets_the_floor() -> None:
    # quality 1.0 − 0.3θ, σ 0.01: lower bound 1 − 0.3θ − 0.01645 ≥ 0.85 ⇔ θ ≤ 0.445
    points = curve(quality_at=lambda t: 1.0 - 0.3 * t)
    proposal = propose(
        curve=points,
        current_threshold=0.30,
        events=20_000,
        limits=Limits(max_step=0.2, hysteresis=0.0),
    )
    assert proposal.threshold_to == pytest.approx(0.44)
    assert quality_low(proposal.predicted, delta=0.05) >= 0.85  # type: ignore[arg-type]


def test_propose__inside_the_dead_zone__held() -> None:
    # quality 1.0 − 0.3θ, σ 0.01: at θ 0.40 the bound is 0.8636, within 2 × 0.02 of 0.85:
    # neither broken (not 0.02 below) nor with room to rise
    points = curve(quality_at=lambda t: 1.0 - 0.3 * t)
    proposal = propose(curve=points, current_threshold=0.40, events=20_000, limits=Limits())
    assert proposal.threshold_to is None
    assert proposal.reason.startswith("held")


def test_propose__gain_inside_its_noise__no_change() -> None:
    # A tiny sample: the α gain's interval reaches below the margin
    points = curve(quality_at=lambda t: 0.95)
    proposal = propose(curve=points, current_threshold=0.5, events=50, limits=Limits())
    assert proposal.threshold_to is None
    assert "does not clear" in proposal.reason


def test_propose__current_breaks_the_floor__moves_down_even_at_a_loss_of_alpha() -> None:
    points = curve(quality_at=lambda t: 1.0 - 0.3 * t)  # floor met up to θ 0.445
    proposal = propose(
        curve=points, current_threshold=0.6, events=20_000, limits=Limits(max_step=0.05)
    )
    assert proposal.threshold_to == pytest.approx(0.55)
    assert "breaks the objective" in proposal.reason


def test_propose__over_budget__not_taken() -> None:
    points = curve(quality_at=lambda t: 0.95, p95=lambda t: 100 + 1000 * max(0.0, t - 0.52))
    proposal = propose(
        curve=points,
        current_threshold=0.5,
        events=20_000,
        limits=Limits(max_step=0.05, budget_ms=115.0),
    )
    assert proposal.threshold_to == pytest.approx(0.53)


def test_propose__no_quality__no_change_saying_so() -> None:
    points = [
        CurvePoint(
            threshold=k / 100,
            alpha=k / 100,
            cloud_share=0,
            p95_ms=None,
            cost_per_day=None,
            quality=None,
        )
        for k in range(101)
    ]
    proposal = propose(curve=points, current_threshold=0.5, events=1000, limits=Limits())
    assert proposal.threshold_to is None
    assert "too few draft reports" in proposal.reason


def test_misses__alpha_far_and_quality_below_the_bound__both_named() -> None:
    predicted = CurvePoint(
        threshold=0.5, alpha=0.6, cloud_share=0.4, p95_ms=200, cost_per_day=1.0, quality=0.9
    )
    realized = Realized(
        events=5000,
        alpha=0.5,
        cloud_share=0.45,
        p95_ms=210,
        quality=0.7,
        quality_reports=1000,
        quality_kept=700,
        cost_per_day=1.1,
    )
    found = misses(
        predicted=predicted,
        predicted_quality_low=0.86,
        realized=realized,
        budget_ms=300,
        tolerance=Tolerance(),
    )
    assert any(m.startswith("α 0.500") for m in found)
    assert any(m.startswith("quality 0.700") for m in found)
    assert not any(m.startswith("cloud share") for m in found)


def test_misses__within_tolerance__none() -> None:
    predicted = CurvePoint(
        threshold=0.5, alpha=0.6, cloud_share=0.4, p95_ms=200, cost_per_day=1.0, quality=0.9
    )
    realized = Realized(
        events=5000,
        alpha=0.62,
        cloud_share=0.38,
        p95_ms=220,
        quality=0.88,
        quality_reports=500,
        quality_kept=440,
        cost_per_day=1.05,
    )
    assert (
        misses(
            predicted=predicted,
            predicted_quality_low=0.86,
            realized=realized,
            budget_ms=300,
            tolerance=Tolerance(),
        )
        == []
    )


def test_next_run__time_zone__daily_at_local_time() -> None:
    after = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    run = next_run(after=after, run_at=time(3, 0), time_zone="Europe/Berlin")
    assert run == datetime(2026, 3, 2, 2, 0, tzinfo=UTC)  # 03:00 CET


def test_next_run__inside_a_quiet_period__moved_to_its_end() -> None:
    after = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    quiet = [{"from": "02:00", "to": "05:30"}]
    run = next_run(after=after, run_at=time(3, 0), time_zone="UTC", quiet_periods=quiet)
    assert run == datetime(2026, 3, 2, 5, 30, tzinfo=UTC)
    assert in_quiet_period(
        datetime(2026, 3, 2, 23, 0, tzinfo=UTC),
        time_zone="UTC",
        quiet_periods=[{"from": "22:00", "to": "01:00"}],
    )


def test_curve_of__p95_between_predicted_points__interpolated_by_theta() -> None:
    class Point:
        def __init__(self, threshold: float, p95: float | None) -> None:
            self.threshold, self.p95_ms = threshold, p95
            self.alpha = self.cloud_share = self.cost_per_hour = 0.0
            self.device_quality = self.device_quality_high = self.device_quality_low = None

    class Result:
        curve = [
            Point(0.30, 100.0),
            Point(0.31, None),
            Point(0.34, None),
            Point(0.35, 200.0),
            Point(0.36, None),
        ]

    from autopilot.core import curve_of

    p95s = [p.p95_ms for p in curve_of(Result(), cost_per_day=False)]
    assert p95s[0] == 100.0
    assert p95s[1] == pytest.approx(120.0)
    assert p95s[2] == pytest.approx(180.0)
    assert p95s[3] == 200.0
    assert p95s[4] is None


def test_propose__p95_over_budget_everywhere__the_lowest_p95_in_reach() -> None:
    # P95 falls as θ rises (more answers on the device) and is over a 50 ms budget everywhere
    points = curve(quality_at=lambda t: 0.99, p95=lambda t: 200 - 100 * t)
    proposal = propose(
        curve=points,
        current_threshold=0.5,
        events=20_000,
        limits=Limits(max_step=0.05, budget_ms=50.0),
    )
    assert proposal.threshold_to == pytest.approx(0.55)
    assert "P95" in proposal.reason
