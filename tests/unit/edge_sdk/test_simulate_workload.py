"""The simulated task mix, and the tuning it promises: on the demo fleet's table a cloud share
near 30% with the stable model and near 70% with the buggy candidate's (the seed's alarm)."""

import random
import statistics
from typing import Any

import pytest

from edge_sdk.decision import Cell
from edge_sdk.simulate.estimate import nominal_cloud_estimate_ms, route_shares
from edge_sdk.simulate.models import NetworkConditions
from edge_sdk.simulate.workload import BUGGY_MODEL, STABLE_MODEL, Workload
from routing_policies.cell_schema import SEED_DIMENSIONS
from routing_policies.demo import demo_table
from routing_policies.documents import build_document


@pytest.fixture(scope="module")
def demo_document() -> dict[str, Any]:
    """The policy document the demo fleet's devices receive (v1)."""
    return build_document(
        fleet_slug="voice-assistant-android",
        number=1,
        published_at=None,
        dimensions={name: list(values) for name, values in SEED_DIMENSIONS.items()},
        table=demo_table(),
    )


def test_workload__dimensions_of_the_document__every_cell_gets_tasks(
    demo_document: dict[str, Any],
) -> None:
    # Given the demo document's 12 cells
    workload = Workload.from_document(demo_document)
    rng = random.Random(1)
    # When the fleet produces tasks
    seen = {workload.draw(rng).cell for _ in range(5000)}
    # Then every cell of the table sees some
    assert seen == {
        (c["task_type"], c["latency_budget"], c["privacy_tier"]) for c in demo_document["cells"]
    }
    assert sum(workload.cell_shares().values()) == pytest.approx(1.0)


def test_workload__operator_added_task_type__gets_its_share() -> None:
    # Given a fleet whose operators added task type `code`
    workload = Workload(
        {
            "task_type": ["voice", "text", "code"],
            "latency_budget": ["interactive"],
            "privacy_tier": ["normal"],
        }
    )
    rng = random.Random(2)
    # Then `code` tasks appear, with text-like signals
    code = [t for t in (workload.draw(rng) for _ in range(3000)) if t.cell[0] == "code"]
    assert len(code) > 100
    assert statistics.median(t.tokens for t in code) > 50


def test_workload__missing_dimension__clear_error() -> None:
    with pytest.raises(ValueError, match="privacy_tier"):
        Workload({"task_type": ["text"], "latency_budget": ["interactive"], "privacy_tier": []})
    with pytest.raises(ValueError, match="dimensions"):
        Workload.from_document({"cells": []})


def test_workload__kinds__short_confident_intents_and_long_uncertain_requests(
    demo_document: dict[str, Any],
) -> None:
    # Given many tasks of the demo mix
    rng = random.Random(3)
    tasks = [Workload.from_document(demo_document).draw(rng) for _ in range(20_000)]
    intents = [t for t in tasks if t.kind == "intent"]
    requests = [t for t in tasks if t.kind == "request"]
    # Then intents are short and confident, requests long and uncertain (the seed's examples)
    assert statistics.median(t.tokens for t in intents) < 40
    assert statistics.median(t.intent_conf for t in intents) > 0.88
    assert statistics.median(t.tokens for t in requests) > 300
    assert statistics.median(t.lm_conf for t in requests) < 0.6
    # and all signals are in range; some intents repeat (cache keys), requests never do
    assert all(0 <= t.intent_conf <= 1 and 0 <= t.lm_conf <= 1 and t.tokens >= 1 for t in tasks)
    assert any(t.cache_key for t in intents)
    assert not any(t.cache_key for t in requests)


def test_workload__buggy_model__less_confident_on_the_same_draws(
    demo_document: dict[str, Any],
) -> None:
    workload = Workload.from_document(demo_document)
    stable = [workload.draw(random.Random(9), STABLE_MODEL) for _ in range(1)]
    buggy = [workload.draw(random.Random(9), BUGGY_MODEL) for _ in range(1)]
    assert buggy[0].tokens == stable[0].tokens
    assert buggy[0].lm_conf < stable[0].lm_conf
    assert buggy[0].intent_conf < stable[0].intent_conf


def test_route_shares__demo_table_stable_model__cloud_share_near_30_percent(
    demo_document: dict[str, Any],
) -> None:
    # Given the demo fleet's v1 and the stable on-device model, at the cloud's usual load
    # When a large sample of the fleet's tasks is routed
    shares = route_shares(demo_document, model=STABLE_MODEL, samples=30_000, seed=11)
    # Then about 30% go to the cloud and most of the rest stays on the device
    assert 0.25 <= shares.cloud <= 0.35
    assert shares.device > 0.6


def test_route_shares__demo_table_buggy_candidate__cloud_share_near_70_percent(
    demo_document: dict[str, Any],
) -> None:
    # Given the same table and the buggy candidate's less confident model
    shares = route_shares(demo_document, model=BUGGY_MODEL, samples=30_000, seed=11)
    # Then its cohort sends about 70% of its tasks to the cloud: the seed's alarm case
    assert 0.65 <= shares.cloud <= 0.75


def test_route_shares__cloud_pressure_or_higher_theta__more_stays_on_device(
    demo_document: dict[str, Any],
) -> None:
    # Given the steady fleet, with and without a cloud-pressure nudge of +0.1 on θ
    calm = route_shares(demo_document, samples=20_000, seed=4)
    nudged = route_shares(demo_document, samples=20_000, seed=4, cloud_pressure=0.1)
    # Then the nudge keeps visibly more work on the devices
    assert nudged.device > calm.device + 0.05


def test_route_shares__overloaded_cloud_or_degraded_network__alpha_rises(
    demo_document: dict[str, Any],
) -> None:
    calm = route_shares(demo_document, samples=20_000, seed=5)
    slow_cloud = route_shares(
        demo_document, samples=20_000, seed=5, cloud_infer_ms=nominal_cloud_estimate_ms(0.95)
    )
    bad_network = route_shares(
        demo_document,
        samples=20_000,
        seed=5,
        conditions=NetworkConditions(rtt_factor=3.0, bandwidth_factor=0.25, offline_factor=6.0),
    )
    # A slow cloud fails the latency budget more often; a bad network raises θ
    assert slow_cloud.device > calm.device + 0.05
    assert bad_network.device > calm.device + 0.05


def test_route_shares__sensitive_cells_that_may_not_upload__never_cloud(
    demo_document: dict[str, Any],
) -> None:
    # Given a table where every cell is sensitive with uploads forbidden, and auto mode
    locked = {
        **demo_document,
        "cells": [
            {
                **c,
                "mode": "auto",
                "upload": {**c["upload"], "allowed": False},
                "privacy_tier": "sensitive",
            }
            for c in demo_document["cells"]
            if c["privacy_tier"] == "sensitive"
        ],
        "dimensions": {**demo_document["dimensions"], "privacy_tier": ["sensitive"]},
    }
    assert all(Cell.from_document(c).keeps_data_on_device for c in locked["cells"])
    # Then even the buggy model sends nothing to the cloud
    shares = route_shares(locked, model=BUGGY_MODEL, samples=5_000, seed=6)
    assert shares.cloud == 0.0
    assert shares.draft_refine == 0.0
