"""The simulator's device-quality model (the chance the cloud keeps a draft, per cell and
score), its late feedback, shadow refines on a simulated fleet, and the degraded-model
scenario. The fleets run on the virtual clock, without a server."""

from __future__ import annotations

import math
import random
from collections import defaultdict
from typing import Any

import msgspec
import pytest

from edge_sdk.simulate.fleet import FleetConfig
from edge_sdk.simulate.quality import (
    DEGRADED_DROP,
    DEGRADED_QUALITY,
    KEEP_CURVES,
    STABLE_QUALITY,
    KeepCurve,
    QualityModel,
    true_kept_rate,
)
from edge_sdk.simulate.scenarios import SCENARIOS, scenario_named
from edge_sdk.simulate.virtual import VirtualFleet

from .sdk_helpers import policy_document

CELLS = [
    ("voice", "interactive", "normal"),
    ("text", "background", "normal"),
    ("image", "interactive", "sensitive"),
]


def _within(observed: float, expected: float, n: int, sigmas: float = 4.0) -> bool:
    """|observed - expected| within `sigmas` standard errors of a proportion over n draws."""
    p = min(max(expected, 1e-3), 1 - 1e-3)
    return abs(observed - expected) <= sigmas * math.sqrt(p * (1 - p) / n)


# --- the curve ---------------------------------------------------------------------------------


def test_true_kept_rate__score_rises__keep_rate_falls_per_task_type() -> None:
    # Given the default curves
    # When the true keep rate is read along the score
    for cell in CELLS:
        rates = [true_kept_rate(cell, score / 10) for score in range(11)]

        # Then it falls as tasks get harder, within [0, 1], as the task type's line says
        assert rates == sorted(rates, reverse=True)
        assert all(0.0 <= r <= 1.0 for r in rates)
        curve = KEEP_CURVES[cell[0]]
        assert rates[5] == pytest.approx(curve.a - curve.b * 0.5)


def test_true_kept_rate__operator_task_type_or_cell_override__text_curve_or_its_own() -> None:
    # Given an operator's task type, and a model with its own curve for one cell
    model = QualityModel(cells={("code", "interactive", "normal"): KeepCurve(0.5, 0.0)})

    # Then an unknown type is judged as text, and the named cell by its own curve
    assert true_kept_rate(("code", "background", "normal"), 0.3) == true_kept_rate(
        ("text", "background", "normal"), 0.3
    )
    assert true_kept_rate(("code", "interactive", "normal"), 0.9, model) == 0.5


def test_true_kept_rate__beyond_the_line__clamped_to_0_1() -> None:
    assert QualityModel(curves={"text": KeepCurve(1.4, 0.1)}).kept_rate(NORMAL_TEXT, 0.0) == 1.0
    assert QualityModel(curves={"text": KeepCurve(0.2, 1.0)}).kept_rate(NORMAL_TEXT, 1.0) == 0.0


NORMAL_TEXT = ("text", "interactive", "normal")


def test_draw_refine__per_score_decile__sampled_keep_rate_matches_true_curve() -> None:
    # Given many refines of drafts per cell, with scores spread over every decile
    rng = random.Random(2026)
    per_decile = 3000
    for model in (STABLE_QUALITY, DEGRADED_QUALITY):
        for cell in CELLS:
            for decile in range(10):
                kept = 0
                truth = 0.0
                for _ in range(per_decile):
                    score = (decile + rng.random()) / 10
                    changed, ratio = model.draw_refine(rng, cell, score)
                    kept += not changed
                    truth += true_kept_rate(cell, score, model)
                    # an unchanged draft has ratio 0; an edited one a ratio in (0, 1]
                    assert (ratio == 0.0) if not changed else (0.0 < ratio <= 1.0)

                # Then the sampled keep rate of the decile is the true curve's, within
                # sampling error (4 standard errors)
                assert _within(kept / per_decile, truth / per_decile, per_decile), (
                    model.drop,
                    cell,
                    decile,
                )


def test_degraded_quality__every_score__kept_30_points_less_often() -> None:
    # Given the stable and the degraded device model
    for cell in CELLS:
        for score in (0.0, 0.1, 0.2, 0.3):
            # Then the degraded one's drafts are kept DEGRADED_DROP less often (above 0)
            stable = true_kept_rate(cell, score)
            degraded = true_kept_rate(cell, score, DEGRADED_QUALITY)
            assert degraded == pytest.approx(max(0.0, stable - DEGRADED_DROP))


def test_draw_quality__device_answers__rated_around_the_keep_rate() -> None:
    # Given many ratings of device answers at score 0.5, and of cloud answers
    rng = random.Random(5)
    cell = ("text", "interactive", "normal")
    device = [STABLE_QUALITY.draw_quality(rng, cell, 0.5, on_device=True) for _ in range(5000)]
    cloud = [STABLE_QUALITY.draw_quality(rng, cell, 0.5, on_device=False) for _ in range(5000)]

    # Then device answers are rated near p_keep(0.5), cloud ones higher; all within [0, 1]
    assert sum(device) / len(device) == pytest.approx(true_kept_rate(cell, 0.5), abs=0.01)
    assert sum(cloud) / len(cloud) > 0.88
    assert all(0.0 <= q <= 1.0 for q in device + cloud)


# --- the scenario ------------------------------------------------------------------------------


def test_scenarios__degraded_model__listed_with_a_candidate_and_no_network_change() -> None:
    scenario = scenario_named("degraded-model")
    assert scenario.degraded_candidate
    assert scenario.has_candidate
    assert not scenario.buggy_candidate
    assert scenario.cloud_capacity(60.0) == 1.0
    assert "degraded-model" in SCENARIOS


# --- on a simulated fleet ---------------------------------------------------------------------


def _fleet_document(version: int, shadow_rate: float) -> dict[str, Any]:
    """The seed's 12 cells: voice and text auto, image draft_refine, all uploading (text
    sensitive de-identified), each shadow-refining `shadow_rate`."""
    cells: dict[str, dict[str, Any]] = {}
    for task_type in ("voice", "text", "image"):
        for budget in ("interactive", "background"):
            for tier in ("sensitive", "normal"):
                overrides: dict[str, Any] = {"cloud_timeout_ms": 5000, "latency_budget_ms": 5000}
                if task_type == "image":
                    overrides["mode"] = "draft_refine"
                if tier == "sensitive":
                    overrides["upload_deidentify"] = True
                cells[f"{task_type}/{budget}/{tier}"] = overrides
    document = policy_document(version, **cells)
    for cell in document["cells"]:
        cell["shadow_refine_rate"] = shadow_rate
    return document


def _run(
    *, scenario: str = "steady", version: int = 1, stable: int | None = None, seconds: int = 240
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], VirtualFleet]:
    config = FleetConfig(
        base_url="http://127.0.0.1:9",
        fleet_key="fk",
        devices=150,
        rate=60.0,
        scenario=scenario,
        stable_version=stable,
        offline_spells=False,
        seed=17,
    )
    fleet = VirtualFleet(config, _fleet_document(version, 0.05), wall_start=1.8e9)
    events: list[dict[str, Any]] = []
    try:
        for _ in range(seconds // 30):
            for _, body in fleet.advance(30):
                events.extend(msgspec.json.decode(body)["events"])
        # the feedback of the last ratings has come due by now
        for _, body in fleet.advance(40):
            events.extend(msgspec.json.decode(body)["events"])
        feedback = [
            item
            for _, body in fleet.take_feedback()
            for item in msgspec.json.decode(body)["feedback"]
        ]
    finally:
        fleet.close()
    return events, feedback, fleet


@pytest.fixture(scope="module")
def steady_run() -> tuple[list[dict[str, Any]], list[dict[str, Any]], VirtualFleet]:
    return _run()


def test_simulated_fleet__shadow_refines__rate_of_device_answers_privacy_kept(
    steady_run: Any,
) -> None:
    # Given a simulated fleet whose every cell shadow-refines 5%
    events, _, fleet = steady_run

    # When its device answers are counted
    eligible = [
        e
        for e in events
        if e["route"] == "device" and e["fallback"] == "none" and e["ok"] and not e["cache_hit"]
    ]
    shadowed = [e for e in eligible if e.get("shadow_refine")]
    drawn = sum(
        s.device.shadow_started + s.device.shadow_over_budget for s in fleet.fleet.devices.values()
    )

    # Then about 5% were drawn (sampling error), each event says its draft left the device,
    # de-identified where its cell asks, and no other event claims a shadow refine
    assert len(eligible) > 5000
    assert _within(drawn / len(eligible), 0.05, len(eligible))
    assert len(shadowed) >= 0.9 * drawn
    assert all(e["uploaded"] for e in shadowed)
    assert all(e["deidentified"] == (e["privacy_tier"] == "sensitive") for e in shadowed)
    assert not any(e.get("shadow_refine") for e in events if e not in eligible)
    assert sum("refine_changed" in e for e in shadowed) >= 0.95 * len(shadowed)


def test_simulated_fleet__draft_refine_events__kept_rate_per_decile_near_true_curve(
    steady_run: Any,
) -> None:
    # Given the refines of the simulated fleet (draft_refine and shadow), with their scores
    events, _, _ = steady_run
    refined = [e for e in events if "refine_changed" in e and e.get("score") is not None]
    by_decile: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for event in refined:
        by_decile[min(9, int(event["score"] * 10))].append(event)

    # Then in every decile with enough events, the measured keep rate is the true curve's
    # mean at those events' scores, within sampling error
    checked = 0
    for decile_events in by_decile.values():
        n = len(decile_events)
        if n < 100:
            continue
        kept = sum(not e["refine_changed"] for e in decile_events) / n
        truth = (
            sum(
                true_kept_rate((e["task_type"], e["latency_budget"], e["privacy_tier"]), e["score"])
                for e in decile_events
            )
            / n
        )
        assert _within(kept, truth, n)
        checked += 1
    assert checked >= 3


def test_simulated_fleet__late_feedback__about_30_percent_keyed_by_event_id(
    steady_run: Any,
) -> None:
    # Given the fleet's events and the feedback its app sent later
    events, feedback, fleet = steady_run
    ids = {e["event_id"] for e in events}

    # Then about 30% of answers were rated, each item names a sent event, and no event
    # carries its quality inline
    assert feedback
    assert {item["event_id"] for item in feedback} <= ids
    share = len(feedback) / len(events)
    assert 0.25 < share < 0.33
    assert all(0.0 <= item["quality"] <= 1.0 for item in feedback)
    assert fleet.fleet.stats.feedback == len(feedback)


def test_degraded_model_scenario__candidate_cohort__drafts_kept_less_same_routing(
    steady_run: Any,
) -> None:
    # Given the steady fleet, and the same fleet where every device runs the candidate (v2
    # over stable v1) of the degraded-model scenario
    steady, _, _ = steady_run
    degraded, _, fleet = _run(scenario="degraded-model", version=2, stable=1)

    def kept(events: list[dict[str, Any]]) -> float:
        refined = [e for e in events if "refine_changed" in e]
        return sum(e["refine_changed"] is False for e in refined) / len(refined)

    def cloud_share(events: list[dict[str, Any]]) -> float:
        return sum(e["route"] in ("cloud", "draft_refine") for e in events) / len(events)

    # Then the candidate's drafts are kept far less often, while its routing looks the same
    assert fleet.fleet.stats.degraded_tasks > 0
    assert kept(steady) - kept(degraded) > 0.2
    assert abs(cloud_share(steady) - cloud_share(degraded)) < 0.03
