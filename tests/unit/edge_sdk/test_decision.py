"""The routing decision of PROTOCOL.md: each step by hand, the seed's demo, and properties."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from edge_sdk.decision import (
    SCORE_TERM_NAMES,
    Cell,
    CellDocumentError,
    DeviceState,
    TaskSignals,
    decide,
    effective_threshold,
    fallback_route,
    predicted_cloud_ms,
    score_terms,
)

# The cell printed in PROTOCOL.md, "Policy document".
PROTOCOL_CELL: dict[str, Any] = {
    "task_type": "voice",
    "latency_budget": "interactive",
    "privacy_tier": "sensitive",
    "mode": "device_only",
    "threshold": 0.6,
    "weights": {"length": 0.4, "intent": 0.3, "lm": 0.3},
    "length_norm_tokens": 400,
    "latency_budget_ms": 300,
    "cloud_timeout_ms": 800,
    "fallback": "other_side",
    "upload": {"allowed": False, "deidentify": True, "max_bytes": 65536},
    "network": {"rtt_high_ms": 200, "bandwidth_low_kbps": 500, "theta_raise": 0.15},
    "load": {"busy": 0.8, "theta_lower": 0.10},
    "cache_ttl_s": 3600,
}


def make_cell(**overrides: Any) -> dict[str, Any]:
    """A cell document: a normal-tier auto cell with the seed's weights, plus overrides.

    Overrides use the flat names of `Cell` fields (`upload_allowed`, `rtt_high_ms`, ...).
    """
    flat: dict[str, Any] = {
        "task_type": "text",
        "latency_budget": "interactive",
        "privacy_tier": "normal",
        "mode": "auto",
        "threshold": 0.6,
        "weight_length": 0.4,
        "weight_intent": 0.3,
        "weight_lm": 0.3,
        "length_norm_tokens": 400,
        "latency_budget_ms": 1000,
        "cloud_timeout_ms": 800,
        "fallback": "other_side",
        "upload_allowed": True,
        "upload_deidentify": False,
        "upload_max_bytes": 65536,
        "rtt_high_ms": 200,
        "bandwidth_low_kbps": 500,
        "theta_raise": 0.15,
        "load_busy": 0.8,
        "theta_lower": 0.10,
        "cache_ttl_s": 3600,
    }
    unknown = set(overrides) - set(flat)
    assert not unknown, f"make_cell got unknown fields {unknown}"
    flat.update(overrides)
    return {
        "task_type": flat["task_type"],
        "latency_budget": flat["latency_budget"],
        "privacy_tier": flat["privacy_tier"],
        "mode": flat["mode"],
        "threshold": flat["threshold"],
        "weights": {
            "length": flat["weight_length"],
            "intent": flat["weight_intent"],
            "lm": flat["weight_lm"],
        },
        "length_norm_tokens": flat["length_norm_tokens"],
        "latency_budget_ms": flat["latency_budget_ms"],
        "cloud_timeout_ms": flat["cloud_timeout_ms"],
        "fallback": flat["fallback"],
        "upload": {
            "allowed": flat["upload_allowed"],
            "deidentify": flat["upload_deidentify"],
            "max_bytes": flat["upload_max_bytes"],
        },
        "network": {
            "rtt_high_ms": flat["rtt_high_ms"],
            "bandwidth_low_kbps": flat["bandwidth_low_kbps"],
            "theta_raise": flat["theta_raise"],
        },
        "load": {"busy": flat["load_busy"], "theta_lower": flat["theta_lower"]},
        "cache_ttl_s": flat["cache_ttl_s"],
    }


def cell(**overrides: Any) -> Cell:
    return Cell.from_document(make_cell(**overrides))


def task(
    tokens: int = 400, intent_conf: float = 0.5, lm_conf: float = 0.5, upload_bytes: int = 0
) -> TaskSignals:
    """Defaults score 0.4*1 + 0.3*0.5 + 0.3*0.5 = 0.70 on the default cell."""
    return TaskSignals(
        tokens=tokens, intent_conf=intent_conf, lm_conf=lm_conf, upload_bytes=upload_bytes
    )


def device(
    rtt_ms: float = 80,
    bandwidth_kbps: float = 5000,
    device_load: float = 0.3,
    online: bool = True,
    cloud_infer_ms: float = 250,
    cloud_pressure: float = 0.0,
) -> DeviceState:
    """Defaults: a good network and an idle device; the cloud answers in 80 + 250 = 330 ms."""
    return DeviceState(
        rtt_ms=rtt_ms,
        bandwidth_kbps=bandwidth_kbps,
        device_load=device_load,
        online=online,
        cloud_infer_ms=cloud_infer_ms,
        cloud_pressure=cloud_pressure,
    )


class SeedTaskRouter:
    """The seed article's TaskRouter (routing part only), kept verbatim in its arithmetic."""

    def __init__(self, threshold: float = 0.6) -> None:
        self.threshold = threshold

    def complexity(self, tokens: int, intent_conf: float, lm_conf: float) -> float:
        length_score = min(1.0, tokens / 400.0)
        intent_score = 1.0 - intent_conf
        lm_score = 1.0 - lm_conf
        return 0.4 * length_score + 0.3 * intent_score + 0.3 * lm_score

    def route(self, tokens: int, intent_conf: float, lm_conf: float) -> tuple[str, float]:
        score = self.complexity(tokens, intent_conf, lm_conf)
        if score < self.threshold:
            return "end", score
        return "cloud", score


# --- Step 1: fixed modes ----------------------------------------------------------------


def test_decide__device_only_mode__routes_device_by_policy_without_scoring() -> None:
    # Given a device_only cell and a task that would score far above theta
    device_only = cell(mode="device_only")

    # When it is decided
    decision = decide(device_only, task(tokens=800, intent_conf=0.0, lm_conf=0.0), device())

    # Then it stays on the device by policy, and no score was computed
    assert (decision.route, decision.decided_by) == ("device", "policy")
    assert decision.score is None
    assert decision.threshold is None
    assert decision.predicted_cloud_ms is None


def test_decide__cloud_only_mode__routes_cloud_by_policy_without_scoring() -> None:
    # Given a cloud_only cell and a trivial task
    cloud_only = cell(mode="cloud_only")

    # When it is decided
    decision = decide(cloud_only, task(tokens=1, intent_conf=1.0, lm_conf=1.0), device())

    # Then it goes to the cloud by policy
    assert (decision.route, decision.decided_by) == ("cloud", "policy")
    assert decision.score is None
    assert decision.queue_until_online is False


def test_decide__cloud_only_mode_offline_background__routes_cloud_and_queues() -> None:
    # Given a cloud_only background cell and a device without network
    cloud_only = cell(mode="cloud_only", latency_budget="background")

    # When it is decided
    decision = decide(cloud_only, task(), device(online=False))

    # Then step 1 still answers cloud (it precedes step 3) and the task waits for the network
    assert (decision.route, decision.decided_by) == ("cloud", "policy")
    assert decision.queue_until_online is True


# --- Step 2: privacy --------------------------------------------------------------------


def test_decide__sensitive_cell_upload_not_allowed__routes_device_by_privacy() -> None:
    # Given a sensitive auto cell that may not upload, and a task that scores 0.70 >= 0.60
    private = cell(privacy_tier="sensitive", upload_allowed=False)

    # When it is decided
    decision = decide(private, task(), device())

    # Then it stays on the device for privacy, before any score
    assert (decision.route, decision.decided_by) == ("device", "privacy")
    assert decision.score is None


def test_decide__sensitive_cell_upload_allowed__is_scored_like_any_other() -> None:
    # Given a sensitive cell whose upload is allowed (e.g. after de-identification)
    sensitive_allowed = cell(privacy_tier="sensitive", upload_allowed=True)

    # When a task scoring 0.70 is decided
    decision = decide(sensitive_allowed, task(), device())

    # Then the privacy step lets it through to the score, and it goes to the cloud
    assert (decision.route, decision.decided_by) == ("cloud", "threshold")
    assert decision.score == pytest.approx(0.70)


def test_decide__sensitive_cell_upload_not_allowed_offline_background__never_queues() -> None:
    # Given a sensitive background cell that may not upload, on a device that is offline
    private = cell(privacy_tier="sensitive", upload_allowed=False, latency_budget="background")

    # When a cloud-worthy task is decided
    decision = decide(private, task(), device(online=False))

    # Then privacy decides (step 2 precedes step 3), and nothing is queued for the cloud
    assert (decision.route, decision.decided_by) == ("device", "privacy")
    assert decision.queue_until_online is False


# --- Step 3: offline --------------------------------------------------------------------


def test_decide__offline_interactive__routes_device_without_queueing() -> None:
    # Given an interactive auto cell and a device without network
    interactive = cell(latency_budget="interactive")

    # When a task scoring 0.70 (cloud when online) is decided
    decision = decide(interactive, task(), device(online=False))

    # Then it is answered on the device at once; an interactive task cannot wait
    assert (decision.route, decision.decided_by) == ("device", "offline")
    assert decision.queue_until_online is False
    assert decision.score is None


def test_decide__offline_background_cloud_worthy__routes_device_and_queues() -> None:
    # Given a background auto cell and a device without network
    background = cell(latency_budget="background")

    # When a task that online would go to the cloud (0.70 >= 0.60, 330 ms <= 1000 ms) is decided
    decision = decide(background, task(), device(online=False))

    # Then it is held on the device and queued for the cloud, with the online reasoning kept
    assert (decision.route, decision.decided_by) == ("device", "offline")
    assert decision.queue_until_online is True
    assert decision.score == pytest.approx(0.70)
    assert decision.threshold == pytest.approx(0.60)


def test_decide__offline_background_easy_task__routes_device_without_queueing() -> None:
    # Given a background auto cell and a device without network
    background = cell(latency_budget="background")

    # When a task that online would stay on the device is decided
    # (score 0.4*0.05 + 0.3*0.02 + 0.3*0.05 = 0.041 < 0.60)
    decision = decide(
        background, task(tokens=20, intent_conf=0.98, lm_conf=0.95), device(online=False)
    )

    # Then it runs on the device and nothing is queued
    assert (decision.route, decision.decided_by) == ("device", "offline")
    assert decision.queue_until_online is False


def test_decide__offline_background_draft_refine__queues_the_refinement() -> None:
    # Given a background draft_refine cell and a device without network
    background = cell(mode="draft_refine", latency_budget="background")

    # When a task that online would reach step 8 is decided
    decision = decide(background, task(), device(online=False))

    # Then the device drafts now and the cloud part waits for the network
    assert (decision.route, decision.decided_by) == ("device", "offline")
    assert decision.queue_until_online is True


# --- Steps 4, 6, 8: score against theta ---------------------------------------------------


def test_decide__auto_score_below_theta__routes_device_by_threshold() -> None:
    # Given the default auto cell (theta 0.60)
    auto = cell()

    # When a task scoring 0.4*0.45 + 0.3*0.15 + 0.3*0.28 = 0.309 is decided
    decision = decide(auto, task(tokens=180, intent_conf=0.85, lm_conf=0.72), device())

    # Then it stays on the device
    assert (decision.route, decision.decided_by) == ("device", "threshold")
    assert decision.score == pytest.approx(0.309)
    assert decision.threshold == pytest.approx(0.60)
    assert decision.adjustments == ()
    assert decision.predicted_cloud_ms is None


def test_decide__auto_score_above_theta__routes_cloud_by_threshold() -> None:
    # Given the default auto cell (theta 0.60, budget 1000 ms)
    auto = cell()

    # When a task scoring 0.70 is decided on a good network (80 + 250 = 330 ms to the cloud)
    decision = decide(auto, task(), device())

    # Then it goes to the cloud
    assert (decision.route, decision.decided_by) == ("cloud", "threshold")
    assert decision.score == pytest.approx(0.70)
    assert decision.predicted_cloud_ms == pytest.approx(330.0)


def test_decide__score_equal_to_theta__routes_cloud() -> None:
    # Given weights and a theta that make the score exactly representable: 0.5*1 + 0 + 0 = 0.5
    exact = cell(threshold=0.5, weight_length=0.5, weight_intent=0.25, weight_lm=0.25)

    # When a task scoring exactly theta is decided
    decision = decide(exact, task(tokens=400, intent_conf=1.0, lm_conf=1.0), device())

    # Then the tie goes to the cloud ("score < theta" is the only way to the device)
    assert decision.score == 0.5
    assert (decision.route, decision.decided_by) == ("cloud", "threshold")


def test_decide__tokens_beyond_length_norm__length_share_caps_at_one() -> None:
    # Given the default cell normalising length over 400 tokens
    auto = cell()

    # When 4000 tokens with full confidence are decided
    decision = decide(auto, task(tokens=4000, intent_conf=1.0, lm_conf=1.0), device())

    # Then length counts as 1, not 10: score 0.4
    assert decision.score == pytest.approx(0.4)


def test_decide__draft_refine_above_theta__routes_draft_refine() -> None:
    # Given a draft_refine cell
    draft_refine = cell(mode="draft_refine")

    # When a task scoring 0.70 >= 0.60 within the latency budget is decided
    decision = decide(draft_refine, task(), device())

    # Then the device drafts and the cloud refines
    assert (decision.route, decision.decided_by) == ("draft_refine", "threshold")


def test_decide__draft_refine_below_theta__routes_device() -> None:
    # Given a draft_refine cell
    draft_refine = cell(mode="draft_refine")

    # When a task scoring 0.309 < 0.60 is decided
    decision = decide(draft_refine, task(tokens=180, intent_conf=0.85, lm_conf=0.72), device())

    # Then the device answers alone
    assert (decision.route, decision.decided_by) == ("device", "threshold")


# --- Step 5: theta adjustments ------------------------------------------------------------


def test_decide__rtt_above_rtt_high__raises_theta_and_keeps_task_on_device() -> None:
    # Given the default cell (theta 0.60, raise 0.15 above 200 ms)
    auto = cell()

    # When a task scoring 0.70 is decided at rtt 250 ms
    decision = decide(auto, task(), device(rtt_ms=250))

    # Then theta is 0.75 and the task stays on the device
    assert decision.threshold == pytest.approx(0.75)
    assert decision.adjustments == (("network", 0.15),)
    assert (decision.route, decision.decided_by) == ("device", "threshold")


def test_decide__rtt_equal_to_rtt_high__does_not_raise_theta() -> None:
    # Given the default cell (raise only when rtt > 200 ms)
    auto = cell()

    # When a task is decided at exactly 200 ms
    decision = decide(auto, task(), device(rtt_ms=200))

    # Then theta stays 0.60 and the 0.70 task goes to the cloud
    assert decision.threshold == pytest.approx(0.60)
    assert decision.route == "cloud"


def test_decide__bandwidth_below_low__raises_theta() -> None:
    # Given the default cell (raise 0.15 below 500 kbps)
    auto = cell()

    # When a task scoring 0.70 is decided at 400 kbps
    decision = decide(auto, task(), device(bandwidth_kbps=400))

    # Then theta is 0.75 and the task stays on the device
    assert decision.threshold == pytest.approx(0.75)
    assert decision.adjustments == (("network", 0.15),)
    assert decision.route == "device"


def test_decide__rtt_high_and_bandwidth_low__raises_theta_once() -> None:
    # Given the default cell
    auto = cell()

    # When both network signals are bad
    decision = decide(auto, task(), device(rtt_ms=400, bandwidth_kbps=100))

    # Then theta is raised once, to 0.75, not twice
    assert decision.threshold == pytest.approx(0.75)
    assert decision.adjustments == (("network", 0.15),)


def test_decide__device_load_at_busy__lowers_theta_and_sends_task_to_cloud() -> None:
    # Given the default cell (theta 0.60, lower 0.10 at load >= 0.8)
    auto = cell()

    # When a task scoring 0.4*0.5 + 0.3*0.5 + 0.3*0.7 = 0.56 is decided at load exactly 0.8
    decision = decide(auto, task(tokens=200, intent_conf=0.5, lm_conf=0.3), device(device_load=0.8))

    # Then theta is 0.50 and the busy device hands the task to the cloud
    assert decision.score == pytest.approx(0.56)
    assert decision.threshold == pytest.approx(0.50)
    assert decision.adjustments == (("load", -0.10),)
    assert (decision.route, decision.decided_by) == ("cloud", "threshold")


def test_decide__cloud_pressure__raises_theta_by_the_pushed_offset() -> None:
    # Given the default cell and a pushed cloud_pressure offset of 0.2
    auto = cell()

    # When a task scoring 0.70 is decided
    decision = decide(auto, task(), device(cloud_pressure=0.2))

    # Then theta is 0.80 and the task stays on the device to spare the cloud
    assert decision.threshold == pytest.approx(0.80)
    assert decision.adjustments == (("cloud_pressure", 0.2),)
    assert (decision.route, decision.decided_by) == ("device", "threshold")


def test_decide__all_adjustments__apply_in_protocol_order() -> None:
    # Given the default cell
    auto = cell()

    # When network is bad, the device busy and the cloud under pressure
    decision = decide(auto, task(), device(rtt_ms=300, device_load=0.9, cloud_pressure=0.05))

    # Then theta = 0.60 + 0.15 - 0.10 + 0.05 = 0.70, listed in step order
    assert decision.threshold == pytest.approx(0.70)
    assert [name for name, _ in decision.adjustments] == ["network", "load", "cloud_pressure"]


def test_decide__theta_above_one__clamps_to_one() -> None:
    # Given a cell at theta 0.95 on a slow network (0.95 + 0.15 = 1.10)
    high = cell(threshold=0.95)

    # When a task with the maximum score 1.0 is decided
    decision = decide(high, task(tokens=400, intent_conf=0.0, lm_conf=0.0), device(rtt_ms=300))

    # Then theta is clamped to 1.0 and the maximum score still reaches the cloud
    assert decision.threshold == 1.0
    assert decision.adjustments[0] == ("network", 0.15)
    name, delta = decision.adjustments[1]
    assert name == "clamp"
    assert delta == pytest.approx(-0.10)
    assert decision.route == "cloud"


def test_decide__theta_below_zero__clamps_to_zero() -> None:
    # Given a cell at theta 0.05 on a busy device (0.05 - 0.10 = -0.05)
    low = cell(threshold=0.05)

    # When a task with the minimum score 0.0 is decided
    decision = decide(low, task(tokens=0, intent_conf=1.0, lm_conf=1.0), device(device_load=0.9))

    # Then theta is clamped to 0.0 and even a zero score goes to the cloud
    assert decision.threshold == 0.0
    name, delta = decision.adjustments[-1]
    assert name == "clamp"
    assert delta == pytest.approx(0.05)
    assert decision.route == "cloud"


# --- Step 7: latency ------------------------------------------------------------------------


def test_decide__predicted_cloud_latency_over_budget__routes_device_by_latency() -> None:
    # Given a cell with a 300 ms budget
    tight = cell(latency_budget_ms=300)

    # When a 0.70 task uploads 50,000 bytes at 1000 kbps:
    # 400,000 bits / 1000 kbps = 400 ms, + 80 ms rtt + 250 ms inference = 730 ms
    decision = decide(tight, task(upload_bytes=50_000), device(bandwidth_kbps=1000))

    # Then the cloud cannot answer in time and the device does
    assert decision.predicted_cloud_ms == pytest.approx(730.0)
    assert (decision.route, decision.decided_by) == ("device", "latency")
    assert decision.score == pytest.approx(0.70)


def test_decide__predicted_cloud_latency_equal_to_budget__routes_cloud() -> None:
    # Given a cell whose budget equals the prediction: 0 upload + 80 rtt + 250 inference
    exact = cell(latency_budget_ms=330)

    # When a 0.70 task is decided
    decision = decide(exact, task(), device())

    # Then only a prediction above the budget keeps it on the device
    assert decision.predicted_cloud_ms == 330.0
    assert decision.route == "cloud"


def test_decide__zero_bandwidth__predicts_infinite_latency_and_routes_device() -> None:
    # Given the default cell, and a maximum-score task that clears even the raised theta 0.75
    auto = cell()

    # When it is decided with 0 kbps of bandwidth while nominally online
    decision = decide(
        auto, task(tokens=400, intent_conf=0.0, lm_conf=0.0), device(bandwidth_kbps=0)
    )

    # Then the upload can never finish: infinite prediction, device by latency
    assert decision.predicted_cloud_ms == math.inf
    assert (decision.route, decision.decided_by) == ("device", "latency")


# --- The seed's demo -------------------------------------------------------------------------

# The seed article's main() routes these five tasks (tokens, intent_conf, lm_conf) with
# TaskRouter(threshold=0.6), weights 0.4/0.3/0.3 over 400 tokens. Scores worked by hand.
SEED_TASKS = [
    # 0.4*0.05   + 0.3*0.02 + 0.3*0.05 = 0.041
    (20, 0.98, 0.95, 0.041, "device"),
    # 0.4*0.45   + 0.3*0.15 + 0.3*0.28 = 0.309
    (180, 0.85, 0.72, 0.309, "device"),
    # 0.4*1      + 0.3*0.38 + 0.3*0.55 = 0.679
    (420, 0.62, 0.45, 0.679, "cloud"),
    # 0.4*0.1375 + 0.3*0.07 + 0.3*0.12 = 0.112
    (55, 0.93, 0.88, 0.112, "device"),
    # 0.4*1      + 0.3*0.60 + 0.3*0.70 = 0.790
    (700, 0.40, 0.30, 0.790, "cloud"),
]


@pytest.mark.parametrize(("tokens", "intent_conf", "lm_conf", "score", "route"), SEED_TASKS)
def test_decide__seed_demo_tasks_on_good_network__route_as_the_seed_does(
    tokens: int, intent_conf: float, lm_conf: float, score: float, route: str
) -> None:
    # Given the seed's router as a normal-tier auto cell, on a good network
    seed_cell = cell(threshold=0.6, weight_length=0.4, weight_intent=0.3, weight_lm=0.3)

    # When one of the seed's demo tasks is decided
    decision = decide(seed_cell, task(tokens, intent_conf, lm_conf), device())

    # Then score and route match the hand-worked values and the seed's own router
    assert decision.score == pytest.approx(score)
    assert decision.route == route
    seed_route, seed_score = SeedTaskRouter(threshold=0.6).route(tokens, intent_conf, lm_conf)
    assert decision.score == seed_score
    assert {"end": "device", "cloud": "cloud"}[seed_route] == decision.route


def test_decide__seed_demo_tasks__give_device_device_cloud_device_cloud() -> None:
    # Given the seed's router as a normal-tier auto cell, on a good network
    seed_cell = cell()

    # When its five demo tasks are decided in order
    routes = [decide(seed_cell, task(t, i, lm), device()).route for t, i, lm, _, _ in SEED_TASKS]

    # Then two of five go to the cloud, as the seed prints: device, device, cloud, device, cloud
    assert routes == ["device", "device", "cloud", "device", "cloud"]


@given(
    tokens=st.integers(min_value=0, max_value=5000),
    intent_conf=st.floats(min_value=0.0, max_value=1.0),
    lm_conf=st.floats(min_value=0.0, max_value=1.0),
)
def test_decide__seed_cell_on_good_network__agrees_with_seed_router_everywhere(
    tokens: int, intent_conf: float, lm_conf: float
) -> None:
    # Given the seed's parameters as an auto cell, a good network, an idle device
    seed_cell = cell()

    # When any task is decided by both
    decision = decide(seed_cell, task(tokens, intent_conf, lm_conf), device())
    seed_route, seed_score = SeedTaskRouter(threshold=0.6).route(tokens, intent_conf, lm_conf)

    # Then they agree exactly, float for float
    assert decision.score == seed_score
    assert {"end": "device", "cloud": "cloud"}[seed_route] == decision.route


# --- explain() -------------------------------------------------------------------------------


def test_explain__cloud_with_network_raise__shows_score_theta_and_base() -> None:
    # Given a 0.79 task (the seed's fifth) on a slow network: theta 0.60 + 0.15 = 0.75
    decision = decide(cell(), task(700, 0.40, 0.30), device(rtt_ms=250))

    # When it is explained
    text = decision.explain()

    # Then the line names route, comparison, base and each adjustment
    assert text == "cloud: score 0.79 >= theta 0.75 (base 0.60, +0.15 network)"


def test_explain__device_by_threshold__shows_score_below_theta() -> None:
    # Given a 0.309 task on a good network
    decision = decide(cell(), task(180, 0.85, 0.72), device())

    # When it is explained
    text = decision.explain()

    # Then without adjustments there is no base in brackets
    assert text == "device: score 0.31 < theta 0.60"


def test_explain__device_by_latency__shows_prediction_and_budget() -> None:
    # Given a 0.70 task predicted at 730 ms against a 300 ms budget
    decision = decide(
        cell(latency_budget_ms=300), task(upload_bytes=50_000), device(bandwidth_kbps=1000)
    )

    # When it is explained
    text = decision.explain()

    # Then the line says the cloud would be too slow
    assert text == "device: predicted cloud 730 ms > budget 300 ms (score 0.70 >= theta 0.60)"


def test_explain__early_steps__name_the_deciding_rule() -> None:
    # Given decisions settled by policy, privacy and connectivity
    by_policy = decide(cell(mode="device_only"), task(), device())
    by_privacy = decide(cell(privacy_tier="sensitive", upload_allowed=False), task(), device())
    offline = decide(cell(), task(), device(online=False))
    queued = decide(cell(latency_budget="background"), task(), device(online=False))
    cloud_only_queued = decide(
        cell(mode="cloud_only", latency_budget="background"), task(), device(online=False)
    )

    # When they are explained
    texts = [d.explain() for d in (by_policy, by_privacy, offline, queued, cloud_only_queued)]

    # Then each names its rule
    assert texts == [
        "device: fixed by policy mode device_only",
        "device: sensitive data and upload not allowed",
        "device: offline",
        "device: offline, queued for the cloud until online (score 0.70 >= theta 0.60)",
        "cloud: fixed by policy mode cloud_only; offline, queued until back online",
    ]


# --- fallback_route --------------------------------------------------------------------------


def test_fallback_route__other_side_cloud_failure__falls_back_to_device() -> None:
    # Given a cell falling back to the other side
    other_side = cell(fallback="other_side")

    # When a cloud call fails or times out
    kind = fallback_route(other_side, "cloud", "cloud")

    # Then the device answers
    assert kind == "cloud_to_device"


def test_fallback_route__other_side_device_failure__falls_back_to_cloud() -> None:
    # Given a normal cell falling back to the other side
    other_side = cell(fallback="other_side")

    # When on-device inference fails
    kind = fallback_route(other_side, "device", "device")

    # Then the cloud answers
    assert kind == "device_to_cloud"


def test_fallback_route__sensitive_upload_not_allowed_device_failure__never_goes_to_cloud() -> None:
    # Given a sensitive cell that may not upload, even with fallback other_side
    private = cell(privacy_tier="sensitive", upload_allowed=False, fallback="other_side")

    # When on-device inference fails
    kind = fallback_route(private, "device", "device")

    # Then there is no fallback: the data must not leave the device
    assert kind == "none"


def test_fallback_route__fallback_none__never_falls_back() -> None:
    # Given a cell without fallback
    no_fallback = cell(fallback="none")

    # When either side fails
    kinds = {
        fallback_route(no_fallback, "cloud", "cloud"),
        fallback_route(no_fallback, "device", "device"),
    }

    # Then the failure stands
    assert kinds == {"none"}


def test_fallback_route__draft_refine__falls_back_from_either_side() -> None:
    # Given a draft_refine route, which uses both sides
    other_side = cell(mode="draft_refine")

    # When the cloud refinement fails, or the device draft fails
    from_cloud = fallback_route(other_side, "draft_refine", "cloud")
    from_device = fallback_route(other_side, "draft_refine", "device")

    # Then each falls back to the other side
    assert (from_cloud, from_device) == ("cloud_to_device", "device_to_cloud")


def test_fallback_route__failed_side_not_on_route__raises() -> None:
    # Given a task routed to the device only
    other_side = cell()

    # When a cloud failure is reported for it
    # Then the caller is told the report is impossible
    with pytest.raises(ValueError, match="does not run on the cloud"):
        fallback_route(other_side, "device", "cloud")


# --- Cell documents --------------------------------------------------------------------------


def test_cell_from_document__protocol_example__round_trips_to_the_same_document() -> None:
    # Given the cell printed in PROTOCOL.md
    # When it is parsed and written back
    parsed = Cell.from_document(PROTOCOL_CELL)
    written = parsed.to_document()

    # Then the document is unchanged, and parsing it again gives an equal cell
    assert written == PROTOCOL_CELL
    assert list(written) == list(PROTOCOL_CELL)
    assert Cell.from_document(written) == parsed


def test_cell_from_document__protocol_example__flattens_nested_objects() -> None:
    # Given the cell printed in PROTOCOL.md
    # When it is parsed
    parsed = Cell.from_document(PROTOCOL_CELL)

    # Then the nested weights, upload, network and load are flat fields
    assert (parsed.weight_length, parsed.weight_intent, parsed.weight_lm) == (0.4, 0.3, 0.3)
    assert (parsed.upload_allowed, parsed.upload_deidentify, parsed.upload_max_bytes) == (
        False,
        True,
        65536,
    )
    assert (parsed.rtt_high_ms, parsed.bandwidth_low_kbps, parsed.theta_raise) == (200, 500, 0.15)
    assert (parsed.load_busy, parsed.theta_lower) == (0.8, 0.10)
    assert parsed.keeps_data_on_device is True


def test_cell_from_document__missing_nested_field__names_it() -> None:
    # Given a cell document without upload.allowed
    document = make_cell()
    del document["upload"]["allowed"]

    # When it is parsed
    # Then the error names the dotted field
    with pytest.raises(CellDocumentError, match=r"'upload\.allowed'"):
        Cell.from_document(document)


def test_cell_from_document__upload_allowed_as_string__is_refused() -> None:
    # Given a document whose upload.allowed is the (truthy) string "false"
    document = make_cell(upload_allowed="false")

    # When it is parsed
    # Then it is refused rather than read as "allowed"
    with pytest.raises(CellDocumentError, match=r"'upload\.allowed' must be true or false"):
        Cell.from_document(document)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"mode": "sometimes"}, "mode"),
        ({"fallback": "retry"}, "fallback"),
        ({"length_norm_tokens": 0}, "length_norm_tokens"),
        ({"threshold": "0.6"}, "threshold"),
        ({"threshold": True}, "threshold"),
        ({"latency_budget_ms": 300.5}, "latency_budget_ms"),
    ],
)
def test_cell_from_document__bad_value__is_refused_naming_the_field(
    overrides: dict[str, Any], field: str
) -> None:
    # Given a cell document with one bad value
    document = make_cell(**overrides)

    # When it is parsed
    # Then the error names that field
    with pytest.raises(CellDocumentError, match=f"'{field}'"):
        Cell.from_document(document)


# --- Properties ------------------------------------------------------------------------------

unit = st.floats(min_value=0.0, max_value=1.0)
modes_reaching_the_score = st.sampled_from(["auto", "draft_refine"])


@st.composite
def weights_summing_to_one(draw: st.DrawFn) -> tuple[float, float, float]:
    raw = [draw(st.floats(min_value=0.0, max_value=1.0)) for _ in range(3)]
    assume(sum(raw) > 0.01)
    total = sum(raw)
    return raw[0] / total, raw[1] / total, raw[2] / total


@st.composite
def cell_documents(draw: st.DrawFn, /, **fixed: Any) -> dict[str, Any]:
    length, intent, lm = draw(weights_summing_to_one())
    drawn: dict[str, Any] = {
        "mode": draw(st.sampled_from(["device_only", "auto", "draft_refine"])),
        "latency_budget": draw(st.sampled_from(["interactive", "background"])),
        "privacy_tier": draw(st.sampled_from(["sensitive", "normal"])),
        "upload_allowed": draw(st.booleans()),
        "fallback": draw(st.sampled_from(["other_side", "none"])),
        "threshold": draw(unit),
        "weight_length": length,
        "weight_intent": intent,
        "weight_lm": lm,
        "length_norm_tokens": draw(st.integers(min_value=1, max_value=4000)),
        "latency_budget_ms": draw(st.integers(min_value=0, max_value=10_000)),
        "rtt_high_ms": draw(st.floats(min_value=0, max_value=2000)),
        "bandwidth_low_kbps": draw(st.floats(min_value=0, max_value=100_000)),
        "theta_raise": draw(unit),
        "load_busy": draw(unit),
        "theta_lower": draw(unit),
    }
    for name, value in fixed.items():
        drawn[name] = draw(value) if isinstance(value, st.SearchStrategy) else value
    return make_cell(**drawn)


tasks = st.builds(
    TaskSignals,
    tokens=st.integers(min_value=0, max_value=10_000),
    intent_conf=unit,
    lm_conf=unit,
    upload_bytes=st.integers(min_value=0, max_value=10_000_000),
)


def device_states(online: st.SearchStrategy[bool]) -> st.SearchStrategy[DeviceState]:
    return st.builds(
        DeviceState,
        rtt_ms=st.floats(min_value=0, max_value=5000),
        bandwidth_kbps=st.floats(min_value=0, max_value=1_000_000),
        device_load=unit,
        online=online,
        cloud_infer_ms=st.floats(min_value=0, max_value=10_000),
        cloud_pressure=st.floats(min_value=-1.0, max_value=1.0),
    )


devices = device_states(online=st.booleans())
online_devices = device_states(online=st.just(True))


@given(
    document=cell_documents(mode=modes_reaching_the_score, privacy_tier="normal"),
    task_signals=tasks,
    device_state=online_devices,
)
def test_decide__any_input_reaching_step_5__effective_theta_within_unit_interval(
    document: dict[str, Any], task_signals: TaskSignals, device_state: DeviceState
) -> None:
    # Given any scored cell (threshold, raise, lower in [0, 1]), task and online device,
    # with a cloud_pressure offset anywhere in [-1, 1]
    # When it is decided
    decision = decide(Cell.from_document(document), task_signals, device_state)

    # Then the effective theta lies in [0, 1]
    assert decision.threshold is not None
    assert 0.0 <= decision.threshold <= 1.0


@given(
    document=cell_documents(privacy_tier="sensitive", upload_allowed=False),
    task_signals=tasks,
    device_state=devices,
)
def test_decide__sensitive_upload_not_allowed__never_reaches_the_cloud(
    document: dict[str, Any], task_signals: TaskSignals, device_state: DeviceState
) -> None:
    # Given a sensitive cell that may not upload, in any mode the control plane accepts for it
    # (it refuses cloud_only there), and any task and device
    private = Cell.from_document(document)

    # When it is decided
    decision = decide(private, task_signals, device_state)

    # Then it runs on the device and is never queued for the cloud
    assert decision.route == "device"
    assert decision.queue_until_online is False


@given(
    document=cell_documents(),
    higher=unit,
    task_signals=tasks,
    device_state=devices,
)
def test_decide__raising_the_threshold__never_moves_a_task_from_device_to_cloud(
    document: dict[str, Any], higher: float, task_signals: TaskSignals, device_state: DeviceState
) -> None:
    # Given a cell and the same cell with a threshold at least as high
    assume(higher >= document["threshold"])
    lower_cell = Cell.from_document(document)
    higher_cell = Cell.from_document({**document, "threshold": higher})

    # When the same task on the same device is decided under both
    at_lower = decide(lower_cell, task_signals, device_state)
    at_higher = decide(higher_cell, task_signals, device_state)

    # Then a task kept on the device stays there, and is not newly queued for the cloud
    if at_lower.route == "device":
        assert at_higher.route == "device"
    if not at_lower.queue_until_online:
        assert not at_higher.queue_until_online


@given(
    document=cell_documents(mode=modes_reaching_the_score, privacy_tier="normal"),
    task_signals=tasks,
    device_state=online_devices,
)
def test_decide__weights_summing_to_one__score_within_unit_interval(
    document: dict[str, Any], task_signals: TaskSignals, device_state: DeviceState
) -> None:
    # Given weights summing to 1 and confidences in [0, 1]
    # When a task is scored (normal tier and online, so that step 4 is reached)
    decision = decide(Cell.from_document(document), task_signals, device_state)

    # Then the score lies in [0, 1], up to the rounding of normalised weights
    assert decision.score is not None
    assert -1e-9 <= decision.score <= 1.0 + 1e-9


# --- the decision trace: the parts a playground shows --------------------------------------


def test_score_terms__seed_task__weighted_terms_as_the_seed_computes_them() -> None:
    # Given the seed's second task (180 tokens, intent 0.85, lm 0.72) on the seed's weights
    # When its terms are taken
    length, intent, lm = score_terms(cell(), task(tokens=180, intent_conf=0.85, lm_conf=0.72))

    # Then each is its weight times its signal's share, and they add up to the seed's score
    assert (length, intent, lm) == pytest.approx((0.4 * 0.45, 0.3 * 0.15, 0.3 * 0.28))
    assert length + intent + lm == SeedTaskRouter().complexity(180, 0.85, 0.72)
    assert SCORE_TERM_NAMES == ("length", "intent", "lm")


@given(
    document=cell_documents(mode=modes_reaching_the_score, privacy_tier="normal"),
    task_signals=tasks,
    device_state=online_devices,
)
def test_decision_trace__any_scored_input__terms_theta_and_latency_equal_the_decision(
    document: dict[str, Any], task_signals: TaskSignals, device_state: DeviceState
) -> None:
    # Given any input that reaches step 4
    the_cell = Cell.from_document(document)

    # When it is decided, and its trace taken part by part
    decision = decide(the_cell, task_signals, device_state)
    length, intent, lm = score_terms(the_cell, task_signals)
    theta, adjustments = effective_threshold(the_cell, device_state)

    # Then the parts are exactly (bit for bit) what the decision used
    assert decision.score == length + intent + lm
    assert (decision.threshold, decision.adjustments) == (theta, adjustments)
    if decision.predicted_cloud_ms is not None:
        assert decision.predicted_cloud_ms == predicted_cloud_ms(task_signals, device_state)
