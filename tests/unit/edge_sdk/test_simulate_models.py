"""The simulator's pure models: links, load, device latency, the shared cloud queue, scenarios."""

import math
import random
import statistics

import pytest

from edge_sdk.simulate.models import (
    DEVICE_PROFILES,
    LINK_PROFILES,
    CloudQueue,
    Link,
    Load,
    NetworkConditions,
    device_infer_ms,
    modality,
    upload_ms,
)
from edge_sdk.simulate.scenarios import (
    CALM_S,
    CYCLE_S,
    RAMP_S,
    SCENARIOS,
    BuggyRule,
    disturbance,
    scenario_named,
)

MOBILE = next(p for p in LINK_PROFILES if p.name == "mobile")
WIFI = next(p for p in LINK_PROFILES if p.name == "wifi")
WEAK = next(p for p in LINK_PROFILES if p.name == "weak")


def test_link__mobile_profile__typical_rtt_within_the_seeds_50_to_200_ms() -> None:
    # Given many mobile links
    rng = random.Random(3)
    links = [Link(MOBILE, rng) for _ in range(2000)]
    # Then each one's typical RTT lies in the seed's mobile range
    assert all(50 <= link.rtt_ms <= 200 for link in links)
    assert min(link.rtt_ms for link in links) < 60
    assert max(link.rtt_ms for link in links) > 190


def test_link__weak_versus_wifi__weak_is_slower_and_drops_more_often() -> None:
    # Given a wifi and a weak link observed each second for a day
    rng = random.Random(5)
    wifi, weak = Link(WIFI, rng), Link(WEAK, rng)
    calm = NetworkConditions()
    wifi_offline = sum(not wifi.online(t, calm) for t in range(86_400))
    weak_offline = sum(not weak.online(t, calm) for t in range(86_400))
    # Then the weak link is slower and offline for far longer
    assert weak.rtt_ms > wifi.rtt_ms
    assert weak.bandwidth_kbps < wifi.bandwidth_kbps
    assert weak_offline > 5 * max(1, wifi_offline)
    # and offline spells are spells: the weak link is offline about rate x mean of the time
    expected = WEAK.offline_per_hour * 24 * WEAK.offline_mean_s
    assert 0.5 * expected < weak_offline < 1.5 * expected


def test_link__degraded_conditions__rtt_up_bandwidth_down_offline_more() -> None:
    # Given the same link read in calm and in degraded conditions
    degraded = NetworkConditions(rtt_factor=3.0, bandwidth_factor=0.25, offline_factor=6.0)
    calm_link, bad_link = Link(MOBILE, random.Random(7)), Link(MOBILE, random.Random(7))
    calm = [calm_link.reading(t, NetworkConditions()) for t in range(0, 36_000, 5)]
    bad = [bad_link.reading(t, degraded) for t in range(0, 36_000, 5)]
    # Then RTT is about three times higher, bandwidth a quarter, and it is offline more often
    ratio_rtt = statistics.median(r.rtt_ms for r in bad) / statistics.median(r.rtt_ms for r in calm)
    ratio_bw = statistics.median(r.bandwidth_kbps for r in bad) / statistics.median(
        r.bandwidth_kbps for r in calm
    )
    assert 2.5 < ratio_rtt < 3.5
    assert 0.2 < ratio_bw < 0.3
    assert sum(not r.online for r in bad) > 2 * sum(not r.online for r in calm)


def test_load__over_an_hour__stays_in_unit_range_and_sometimes_busy() -> None:
    # Given a device's load read every second for four hours
    loads = [Load(random.Random(seed)) for seed in range(20)]
    readings = [load.reading(t) for load in loads for t in range(14_400)]
    # Then it stays within [0, 1], varies, and is busy (>= 0.8) some of the time, not most
    assert all(0.0 <= value <= 1.0 for value in readings)
    busy = sum(value >= 0.8 for value in readings) / len(readings)
    assert 0.01 < busy < 0.3
    assert statistics.pstdev(readings) > 0.05


def test_device_infer_ms__typical_phone__tens_of_milliseconds_slower_when_loaded() -> None:
    # Given a flagship and a budget phone
    rng = random.Random(1)
    flagship, budget = DEVICE_PROFILES[0], max(DEVICE_PROFILES, key=lambda p: p.speed)
    # When each runs a short voice intent, idle and loaded
    idle = statistics.median(device_infer_ms(flagship, "voice", 20, 0.1, rng) for _ in range(500))
    loaded = statistics.median(
        device_infer_ms(flagship, "voice", 20, 0.95, rng) for _ in range(500)
    )
    slow = statistics.median(device_infer_ms(budget, "voice", 20, 0.1, rng) for _ in range(500))
    # Then it takes tens of ms (the seed), more under load and on older hardware
    assert 10 < idle < 100
    assert loaded > 1.4 * idle
    assert slow > 1.5 * idle


def test_modality__operator_added_task_type__treated_as_text() -> None:
    assert modality("code") == "text"
    assert modality("image") == "image"


def test_upload_ms__seed_formula__bytes_times_8_over_kbps() -> None:
    assert upload_ms(100_000, 8_000) == 100.0
    assert upload_ms(1, 0) == math.inf


def _feed(queue: CloudQueue, rate_rps: float, seconds: float) -> float:
    """Even arrivals at `rate_rps` for `seconds`; returns the clock at the end."""
    moment, step = 0.0, 1.0 / rate_rps
    while moment < seconds:
        queue.arrival(moment)
        moment += step
    return moment


def test_cloud_queue__more_of_the_fleet_sends_work__inference_slows_and_estimate_follows() -> None:
    # Given the same cloud under a light and a heavy load
    light, heavy = CloudQueue(capacity_rps=10), CloudQueue(capacity_rps=10)
    end_light = _feed(light, 3, 60)
    end_heavy = _feed(heavy, 8, 60)
    rng = random.Random(2)
    # When a text task is inferred under each
    t_light = statistics.median(light.infer_ms("text", 150, end_light, rng) for _ in range(300))
    t_heavy = statistics.median(heavy.infer_ms("text", 150, end_heavy, rng) for _ in range(300))
    # Then utilisation tracks the arrival rate, and the heavy cloud is several times slower
    assert light.utilisation(end_light) == pytest.approx(0.3, abs=0.08)
    assert heavy.utilisation(end_heavy) == pytest.approx(0.8, abs=0.12)
    assert t_heavy > 2.5 * t_light
    # and the devices' estimate moves with it
    assert heavy.estimate_ms(end_heavy) > 2.5 * light.estimate_ms(end_light)


def test_cloud_queue__past_capacity__refuses_some_work_and_caps_slowdown() -> None:
    # Given a cloud receiving twice its capacity
    queue = CloudQueue(capacity_rps=5)
    end = _feed(queue, 10, 60)
    # Then it refuses a share of requests and is at most 20x slower than idle
    assert queue.failure_rate(end) > 0.1
    assert queue.slowdown(end) == 20.0
    # When the work stops, it recovers within a few time constants
    assert queue.slowdown(end + 30) < 1.1
    assert queue.failure_rate(end + 30) == queue.base_failure_rate


def test_cloud_queue__capacity_factor__lower_capacity_is_slower() -> None:
    queue = CloudQueue(capacity_rps=10)
    end = _feed(queue, 3, 60)
    assert queue.slowdown(end, capacity_factor=0.25) > 3 * queue.slowdown(end)


def test_disturbance__cycle__calm_ramp_disturbed_recover_repeat() -> None:
    assert disturbance(0) == 0.0
    assert disturbance(CALM_S + RAMP_S / 2) == pytest.approx(0.5)
    assert disturbance(CALM_S + RAMP_S + 1) == 1.0
    assert disturbance(CYCLE_S - 1e-9) == pytest.approx(0.0, abs=1e-6)
    assert disturbance(CYCLE_S + CALM_S + RAMP_S + 1) == 1.0


def test_scenarios__by_name__each_disturbs_what_it_says() -> None:
    peak = CALM_S + RAMP_S + 1
    steady = scenario_named("steady")
    assert steady.network(peak) == NetworkConditions()
    assert steady.cloud_capacity(peak) == 1.0
    network = scenario_named("network-degradation")
    assert network.network(peak).rtt_factor == 3.0
    assert network.cloud_capacity(peak) == 1.0
    overload = scenario_named("cloud-overload")
    assert overload.cloud_capacity(peak) == 0.25
    assert overload.network(peak) == NetworkConditions()
    assert scenario_named("buggy-candidate").buggy_candidate
    assert set(SCENARIOS) == {
        "steady",
        "network-degradation",
        "cloud-overload",
        "buggy-candidate",
        "degraded-model",
    }


def test_scenario_named__unknown__error_lists_the_choices() -> None:
    with pytest.raises(ValueError, match="steady"):
        scenario_named("earthquake")


def test_buggy_rule__explicit_version_or_newer_than_stable() -> None:
    assert BuggyRule(version=3).is_buggy(3)
    assert not BuggyRule(version=3).is_buggy(4)
    assert BuggyRule(stable=2).is_buggy(3)
    assert not BuggyRule(stable=2).is_buggy(2)
    assert not BuggyRule().is_buggy(5)
    assert not BuggyRule(stable=2).is_buggy(None)
