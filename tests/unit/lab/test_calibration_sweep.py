"""The θ sweep of a cell over generated recorded events, against `decide` run event by event."""

from dataclasses import replace

import pytest

from edge_sdk.decision import Cell, DeviceState, TaskSignals, decide
from lab.calibration.sweep import STEPS, CellSweep, SweepResult
from lab.calibration.targets import Target
from lab.estimate import LatencyModel
from lab.replay import RecordedEvent
from routing_policies.pricing import CloudPrice
from tests.factories import demo_cell, recorded_sample

TEXT = ("text", "interactive", "normal")
PRICE = CloudPrice(per_1k_tokens=0.002, per_call=0.0001)


def sweep(
    cell: Cell, events: list[RecordedEvent], target: Target, hours: float = 1.0
) -> SweepResult:
    model = LatencyModel()
    model.observe_all(events)
    cell_sweep = CellSweep(cell=cell)
    for event in events:
        cell_sweep.add(event.task, event.device, cache_hit=event.cache_hit)
    return cell_sweep.result(target=target, model=model, hours=hours, price=PRICE)


def replayed(cell: Cell, events: list[RecordedEvent], threshold: float) -> list[str]:
    """Each event's route under `cell` at `threshold`, straight from decide."""
    at = replace(cell, threshold=threshold)
    return [decide(at, e.task, e.device).route for e in events]


def alpha_of(routes: list[str]) -> float:
    return routes.count("device") / len(routes)


@pytest.mark.parametrize("wanted", [0.2, 0.45, 0.62, 0.8])
def test_calibration_sweep__alpha_target_on_generated_sample__reached_within_one_point(
    wanted: float,
) -> None:
    # Given 4,000 generated events of the text cell (weak networks, busy devices, nudges)
    cell = demo_cell(TEXT)
    events = recorded_sample(cell, 4000)

    # When θ is calibrated for α
    result = sweep(cell, events, Target(kind="alpha", value=wanted))

    # Then the chosen θ reaches it within one point, and decide agrees at that θ exactly
    assert result.reached
    assert abs(result.chosen.alpha - wanted) <= 0.01
    assert alpha_of(replayed(cell, events, result.chosen.threshold)) == result.chosen.alpha
    assert result.verified_matching == result.verified_events == 1000


def test_calibration_sweep__every_curve_point__equals_decide_replayed_event_by_event() -> None:
    # Given a draft_refine cell (routes device / draft_refine) and its events
    cell = demo_cell(("image", "interactive", "normal"))
    events = recorded_sample(cell, 1500, seed=3)

    result = sweep(cell, events, Target(kind="alpha", value=0.5))

    # Then α, the cloud share and the refine share of every curve point are decide's
    for point in result.curve[::7]:
        routes = replayed(cell, events, point.threshold)
        assert point.alpha == alpha_of(routes)
        assert point.draft_refine_share == routes.count("draft_refine") / len(routes)
        assert point.cloud_share == (routes.count("cloud") + routes.count("draft_refine")) / len(
            routes
        )


def test_calibration_sweep__breakpoint_exactly_on_a_candidate__settled_by_decide() -> None:
    # Given tasks whose score minus θ adjustments lands exactly on candidate θs, where the
    # float sum decide makes (θ + 0.15 raise, - 0.1 load) may fall either side
    cell = demo_cell(TEXT, threshold=0.5)
    template = replace(recorded_sample(cell, 1)[0], cache_hit=False)
    events = []
    for tokens in range(0, 401, 8):
        for rtt, load in ((80.0, 0.1), (260.0, 0.1), (260.0, 0.9), (80.0, 0.9)):
            task = TaskSignals(tokens=tokens, intent_conf=0.5, lm_conf=0.5)
            device = DeviceState(
                rtt_ms=rtt, bandwidth_kbps=8000, device_load=load, online=True, cloud_infer_ms=200
            )
            events.append(replace(template, task=task, device=device))

    result = sweep(cell, events, Target(kind="alpha", value=0.5))

    # Then every candidate near those breakpoints counts what decide says
    for k in range(300, 800, 4):
        threshold = k / STEPS
        sweep_alpha = next((p.alpha for p in result.curve if p.threshold == threshold), None)
        if sweep_alpha is not None:
            assert sweep_alpha == alpha_of(replayed(cell, events, threshold)), threshold
    assert result.verified_matching == result.verified_events


def test_calibration_sweep__cost_ceiling__most_cloud_use_at_or_under_it() -> None:
    # Given the text cell's events over a 2-hour window and a ceiling between the extremes
    cell = demo_cell(TEXT)
    events = recorded_sample(cell, 3000, seed=11)
    everything = sweep(cell, events, Target(kind="alpha", value=0.5), hours=2.0)
    ceiling = (everything.curve[0].cost_per_hour + everything.curve[-1].cost_per_hour) / 3

    result = sweep(cell, events, Target(kind="cost_ceiling", value=ceiling), hours=2.0)

    # Then the chosen θ costs at most the ceiling, a θ 0.001 lower costs more
    assert result.reached
    assert result.chosen.cost_per_hour <= ceiling
    routes = replayed(cell, events, result.chosen.threshold)
    cloud = [e for e, r in zip(events, routes, strict=True) if r != "device" and not e.cache_hit]
    assert result.chosen.cost_per_hour == pytest.approx(
        PRICE.cost(tokens=sum(e.tokens for e in cloud), calls=len(cloud)) / 2.0
    )
    lower = round(result.chosen.threshold - 0.001, 3)
    lower_routes = replayed(cell, events, lower)
    lower_cloud = [
        e for e, r in zip(events, lower_routes, strict=True) if r != "device" and not e.cache_hit
    ]
    assert PRICE.cost(tokens=sum(e.tokens for e in lower_cloud), calls=len(lower_cloud)) / 2 > (
        ceiling
    )


def test_calibration_sweep__p95_target_with_a_slow_device__highest_alpha_within_budget() -> None:
    # Given a cell whose device is slower than its cloud (600-1400 ms on the device, the
    # cloud about 300 ms) and a budget of 1,000 ms: P95 rises with α
    cell = demo_cell(TEXT, latency_budget_ms=1000)
    events = recorded_sample(
        cell, 3000, seed=5, device_ms=(600.0, 1400.0), cloud_infer_ms=(150.0, 250.0)
    )

    result = sweep(cell, events, Target(kind="p95_within_budget"))

    # Then the chosen point's predicted P95 is within the budget, and every curve point of
    # higher α whose P95 was predicted (the next one always is) is over it
    assert result.reached
    chosen_index = next(
        i for i, p in enumerate(result.curve) if p.threshold == result.chosen.threshold
    )
    assert result.chosen.p95_ms is not None
    assert result.chosen.p95_ms <= 1000
    higher = [p for p in result.curve[chosen_index + 1 :] if p.alpha > result.chosen.alpha]
    assert higher[0].p95_ms is not None
    assert all(p.p95_ms > 1000 for p in higher if p.p95_ms is not None)
    assert 0.0 < result.chosen.alpha < 1.0


def test_calibration_sweep__cloud_share_target__reached_within_one_point() -> None:
    cell = demo_cell(TEXT)
    events = recorded_sample(cell, 3000, seed=2)

    result = sweep(cell, events, Target(kind="cloud_share", value=0.3))

    assert result.reached
    routes = replayed(cell, events, result.chosen.threshold)
    assert abs((len(routes) - routes.count("device")) / len(routes) - 0.3) <= 0.01


def test_calibration_sweep__unreachable_alpha__closest_point_not_reached() -> None:
    # Given a cell where weak networks keep many tasks on the device whatever θ (step 7)
    cell = demo_cell(TEXT, latency_budget_ms=150)
    events = recorded_sample(cell, 1000, seed=9)

    result = sweep(cell, events, Target(kind="alpha", value=0.05))

    # Then the result says so and picks the lowest α there is
    assert not result.reached
    assert result.chosen.alpha == min(p.alpha for p in result.curve)


def _cost_of(cell: Cell, events: list[RecordedEvent]) -> float:
    """What `cell` costs on `events`, straight from decide (cache hits make no call)."""
    cloud = [
        e for e in events if not e.cache_hit and decide(cell, e.task, e.device).route != "device"
    ]
    return PRICE.cost(tokens=sum(e.tokens for e in cloud), calls=len(cloud))


@pytest.mark.parametrize(
    "stable_overrides",
    [
        pytest.param({"threshold": 0.41}, id="theta-only-on-the-curve"),
        pytest.param({"threshold": 0.4123}, id="theta-between-candidates"),
        pytest.param({"threshold": 0.5, "latency_budget_ms": 200}, id="other-fields-differ"),
    ],
)
def test_calibration_sweep__stable_cell__its_cost_on_the_same_events(
    stable_overrides: dict[str, float],
) -> None:
    # Given the text cell's events, and a stable version whose cell differs from the draft's
    cell = demo_cell(TEXT)
    stable = demo_cell(TEXT, **stable_overrides)
    events = recorded_sample(cell, 3000, seed=5)

    # When θ is calibrated with the stable cell beside it
    model = LatencyModel()
    model.observe_all(events)
    cell_sweep = CellSweep(cell=cell, stable=stable)
    for event in events:
        cell_sweep.add(event.task, event.device, cache_hit=event.cache_hit)
    result = cell_sweep.result(
        target=Target(kind="alpha", value=0.6), model=model, hours=2.0, price=PRICE
    )

    # Then the stable cost is decide's on the same events, and all-cloud is every event a call
    assert result.stable_cost == pytest.approx(_cost_of(stable, events))
    assert result.all_cloud_cost == pytest.approx(
        PRICE.cost(tokens=sum(e.tokens for e in events), calls=len(events))
    )


def test_calibration_sweep__no_stable_cell__no_stable_cost() -> None:
    cell = demo_cell(TEXT)
    result = sweep(cell, recorded_sample(cell, 200), Target(kind="alpha", value=0.5))
    assert result.stable_cost is None


def _shadow_cost_of(cell: Cell, events: list[RecordedEvent], rate: float) -> float:
    """`cell`'s routed cloud calls on `events`, plus `rate` of its device runs (not cache hits)
    refined in the background, straight from decide."""
    routed = [e for e in events if not e.cache_hit]
    cloud = [e for e in routed if decide(cell, e.task, e.device).route != "device"]
    on_device = [e for e in routed if decide(cell, e.task, e.device).route == "device"]
    return PRICE.cost(
        tokens=sum(e.tokens for e in cloud) + rate * sum(e.tokens for e in on_device),
        calls=len(cloud) + rate * len(on_device),
    )


@pytest.mark.parametrize(
    ("stable_overrides", "stable_rate"),
    [
        pytest.param({"threshold": 0.41}, 0.0, id="stable-on-the-curve-without-shadow"),
        pytest.param({"threshold": 0.41}, 0.02, id="stable-on-the-curve-with-its-own-rate"),
        pytest.param({"threshold": 0.5, "latency_budget_ms": 200}, 0.01, id="stable-decided"),
    ],
)
def test_calibration_sweep__shadow_refine_rate__device_runs_priced_at_every_theta(
    stable_overrides: dict[str, float], stable_rate: float
) -> None:
    # Given the text cell refining 5% of its device answers in the background, and a stable
    # cell with its own rate
    cell = demo_cell(TEXT)
    stable = demo_cell(TEXT, **stable_overrides)
    events = recorded_sample(cell, 2000, seed=8)

    # When θ is calibrated
    model = LatencyModel()
    model.observe_all(events)
    cell_sweep = CellSweep(
        cell=cell, stable=stable, shadow_rate=0.05, stable_shadow_rate=stable_rate
    )
    for event in events:
        cell_sweep.add(event.task, event.device, cache_hit=event.cache_hit)
    result = cell_sweep.result(
        target=Target(kind="alpha", value=0.6), model=model, hours=2.0, price=PRICE
    )

    # Then every curve point's cost adds 5% of its device runs as calls, and the stable cost
    # adds the stable cell's own rate of its device runs
    for point in result.curve[::17]:
        at = replace(cell, threshold=point.threshold)
        assert point.cost_per_hour == pytest.approx(_shadow_cost_of(at, events, 0.05) / 2.0)
    assert result.stable_cost == pytest.approx(_shadow_cost_of(stable, events, stable_rate))
