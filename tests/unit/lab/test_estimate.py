"""The lab's latency estimator on generated observations whose answer is known."""

from __future__ import annotations

import random

import pytest

from lab.estimate import LatencyModel, RouteLoad, weighted_quantiles

VOICE = ("voice", "interactive", "normal")
TEXT = ("text", "batch", "normal")


def test_latency_model__cell_never_ran_draft_refine__its_device_plus_its_cloud_residual() -> None:
    # Given a cell whose devices answer in 50 ms and whose cloud calls take 400 ms beyond their
    # 12 ms network part, and another cell whose draft-refine runs took 1,900 ms
    model = LatencyModel()
    rng = random.Random(3)
    for _ in range(300):
        model.observe_clean(VOICE, "device", 50.0, 0.0)
        network = rng.choice([8.0, 12.0, 16.0])
        model.observe_clean(VOICE, "cloud", network + 400.0, network)
        model.observe_clean(TEXT, "draft_refine", 1_900.0, 12.0)
        model.observe_clean(TEXT, "device", 300.0, 0.0)

    # When the voice cell's tasks (network part 12 ms) are predicted on draft_refine
    load = RouteLoad()
    for _ in range(50):
        load.add_task(VOICE, "draft_refine", 12.0)
    p50, p95 = weighted_quantiles(model.predict(load, "draft_refine"), (0.5, 0.95))

    # Then it is the documented rule, 50 + 400 + 12 = 462 ms (the sketch's 0.5% accuracy),
    # not the other cell's draft-refine figures
    assert p50 == pytest.approx(462.0, rel=0.01)
    assert p95 == pytest.approx(462.0, rel=0.01)


def test_latency_model__cell_without_cloud_runs__borrows_the_fleets_residual() -> None:
    # Given a cell seen only on the device (60 ms) and a fleet whose cloud residual is 300 ms
    model = LatencyModel()
    for _ in range(200):
        model.observe_clean(VOICE, "device", 60.0, 0.0)
        model.observe_clean(TEXT, "cloud", 320.0, 20.0)
        model.observe_clean(TEXT, "device", 500.0, 0.0)

    # When the voice cell's tasks (network part 10 ms) are predicted on draft_refine
    load = RouteLoad()
    for _ in range(20):
        load.add_task(VOICE, "draft_refine", 10.0)
    (p50,) = weighted_quantiles(model.predict(load, "draft_refine"), (0.5,))

    # Then its own device time, the fleet's cloud residual and its network part: 370 ms
    assert p50 == pytest.approx(370.0, rel=0.01)
