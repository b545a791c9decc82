"""Router.route: the decision of `decide`, field for field, from per-cell plans."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_sdk import NO_POLICY_DECISION, Decision, PolicyStore, Router, Task, decide
from edge_sdk import router as router_module
from edge_sdk.decision import DeviceState

from .sdk_helpers import policy_document, readings, task
from .test_decision import cell_documents

unit = st.floats(min_value=0.0, max_value=1.0)


def _router(document: dict[str, Any]) -> Router:
    store = PolicyStore()
    store.apply(document)
    return Router(store)


@settings(max_examples=400, deadline=None)
@given(
    document=cell_documents(
        mode=st.sampled_from(["device_only", "cloud_only", "auto", "draft_refine"])
    ),
    tokens=st.integers(min_value=0, max_value=10_000),
    intent_conf=unit,
    lm_conf=unit,
    upload_bytes=st.integers(min_value=0, max_value=10_000_000),
    rtt_ms=st.floats(min_value=0, max_value=5000),
    bandwidth_kbps=st.floats(min_value=0, max_value=1_000_000),
    device_load=unit,
    online=st.booleans(),
    cloud_infer_ms=st.floats(min_value=0, max_value=10_000),
    pressure=st.floats(min_value=-1.0, max_value=1.0),
)
def test_route__any_cell_task_and_readings__equals_decide_field_for_field(
    document: dict[str, Any],
    tokens: int,
    intent_conf: float,
    lm_conf: float,
    upload_bytes: int,
    rtt_ms: float,
    bandwidth_kbps: float,
    device_load: float,
    online: bool,
    cloud_infer_ms: float,
    pressure: float,
) -> None:
    # Given a one-cell policy, a task of that cell, live readings and a pushed pressure
    router = _router({"version": 1, "cells": [document]})
    router.set_cloud_pressure(pressure, 600)
    the_task = Task(
        task_type=document["task_type"],
        latency_budget=document["latency_budget"],
        privacy_tier=document["privacy_tier"],
        tokens=tokens,
        intent_conf=intent_conf,
        lm_conf=lm_conf,
        upload_bytes=upload_bytes,
    )
    reading = readings(
        rtt_ms=rtt_ms,
        bandwidth_kbps=bandwidth_kbps,
        device_load=device_load,
        online=online,
        cloud_infer_ms=cloud_infer_ms,
    )

    # When it routes; Then it decides exactly as decide() does, as a real Decision
    routed = router.route(the_task, reading)
    expected = decide(router.cell(the_task), the_task, reading.device_state(pressure))  # type: ignore[arg-type]
    assert type(routed) is Decision
    assert dataclasses.astuple(routed) == dataclasses.astuple(expected)
    assert routed == expected
    assert hash(routed) == hash(expected)


def test_route__decision__is_frozen_like_any_decision() -> None:
    decision = _router(policy_document()).route(task(), readings())

    with pytest.raises(dataclasses.FrozenInstanceError):
        decision.score = 0.0  # type: ignore[misc]
    assert decision.explain() == "cloud: score 0.70 >= theta 0.60"


def test_route__no_policy__answers_on_the_device_as_offline() -> None:
    router = Router(PolicyStore())

    decision = router.route(task(), readings())

    assert decision is NO_POLICY_DECISION
    assert (decision.route, decision.decided_by) == ("device", "offline")


def test_route__task_of_a_cell_the_policy_lacks__answers_on_the_device() -> None:
    router = _router(policy_document())

    assert router.route(task(task_type="code"), readings()) is NO_POLICY_DECISION


def test_route__new_policy_applied__routes_by_the_new_cells_at_once() -> None:
    # Given a router that planned v1 (θ 0.6: the 0.70 task goes to the cloud)
    store = PolicyStore()
    store.apply(policy_document())
    router = Router(store)
    assert router.route(task(), readings()).route == "cloud"

    # When v2 raises θ to 0.9
    store.apply(policy_document(2, **{"text/interactive/normal": {"threshold": 0.9}}))

    # Then the next decision uses it
    decision = router.route(task(), readings())
    assert (decision.route, decision.threshold) == ("device", 0.9)


def test_route__cloud_pressure__applies_until_its_ttl_then_lapses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The router's clock, moved by hand: a real 50 ms TTL lapsed before the first route when a
    # loaded machine paused the test between the two calls.
    now = [1000.0]
    monkeypatch.setattr(router_module, "time", SimpleNamespace(monotonic=lambda: now[0]))
    router = _router(policy_document())
    router.set_cloud_pressure(0.2, 0.05)

    now[0] += 0.04
    held = router.route(task(), readings())
    assert (held.route, held.adjustments) == ("device", (("cloud_pressure", 0.2),))

    now[0] += 0.02
    lapsed = router.route(task(), readings())
    assert (lapsed.route, lapsed.adjustments) == ("cloud", ())
    assert router.cloud_pressure == 0.0


def test_route__no_readings_given__reads_the_routers_source() -> None:
    store = PolicyStore()
    store.apply(policy_document())
    calls: list[int] = []

    def source() -> Any:
        calls.append(1)
        return readings(online=False)

    decision = Router(store, readings=source).route(task())

    assert (decision.route, decision.decided_by, len(calls)) == ("device", "offline", 1)


def test_route__no_readings_and_no_source__is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="needs readings"):
        _router(policy_document()).route(task())


def test_route__offline_background_task_the_cloud_should_take__is_queued() -> None:
    document = policy_document(**{"text/background/normal": {"latency_budget_ms": 10_000}})

    decision = _router(document).route(task(latency_budget="background"), readings(online=False))

    assert (decision.route, decision.decided_by, decision.queue_until_online) == (
        "device",
        "offline",
        True,
    )


def test_route__sensitive_cell_without_uploads__device_by_privacy_whatever_the_signals() -> None:
    document = policy_document(**{"text/interactive/sensitive": {"upload_allowed": False}})
    router = _router(document)

    for tokens in (0, 400, 4000):
        decision = router.route(
            task(privacy_tier="sensitive", tokens=tokens, intent_conf=0, lm_conf=0), readings()
        )
        assert (decision.route, decision.decided_by) == ("device", "privacy")


def test_route__interpreter_refusing_the_class_switch__same_decisions_the_plain_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import edge_sdk.router

    router = _router(policy_document())
    fast = [router.route(task(tokens=t), readings(rtt_ms=t // 2)) for t in range(0, 800, 50)]

    monkeypatch.setattr(edge_sdk.router, "_DRAFTS_WORK", False)
    plain = [router.route(task(tokens=t), readings(rtt_ms=t // 2)) for t in range(0, 800, 50)]

    assert plain == fast
    assert {d.route for d in plain} == {"device", "cloud"}


def test_readings_device_state__the_app_s_readings__are_what_decide_reads() -> None:
    # Given the app's readings of a slow, busy, offline device
    given = readings(rtt_ms=310.0, bandwidth_kbps=120.0, device_load=0.85, online=False)

    # When turned into the decision's DeviceState under a pushed pressure of +0.1
    state = given.device_state(0.1)

    # Then every figure is the app's, and the pressure the one pushed
    assert state == DeviceState(
        rtt_ms=310.0,
        bandwidth_kbps=120.0,
        device_load=0.85,
        online=False,
        cloud_infer_ms=250.0,
        cloud_pressure=0.1,
    )
    assert given.device_state().cloud_pressure == 0.0
