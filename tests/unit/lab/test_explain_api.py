"""`POST /api/v1/fleets/<slug>/lab/explain`: the decision trace, its bad input, and its
agreement with the SDK's `Router.route` on random inputs."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from edge_sdk import PolicyStore, Router, Task
from edge_sdk.task import Readings
from routing_policies.models import AuditEntry, Device, PolicyVersion
from routing_policies.selectors import version_document
from routing_policies.services import policy_draft_create, policy_draft_update_cells
from telemetry.ingest.services import landed_drain, telemetry_batch_ingest
from tests.factories import make_event
from tests.hostile_json import HOSTILE_PARAMS, Hostile, assert_names, with_field

pytestmark = pytest.mark.django_db

URL = "/api/v1/fleets/fleet-a/lab/explain"
TEXT_NORMAL = {"task_type": "text", "latency_budget": "interactive", "privacy_tier": "normal"}
SEED_TASK_2 = {"tokens": 180, "intent_conf": 0.85, "lm_conf": 0.72, "upload_bytes": 0}
GOOD_DEVICE = {
    "rtt_ms": 80,
    "bandwidth_kbps": 5000,
    "device_load": 0.3,
    "online": True,
    "cloud_pressure": 0.0,
    "cloud_infer_ms": 250,
}


def body(**changes: Any) -> dict[str, Any]:
    """The seed's second task in text/interactive/normal of v1 on a good network."""
    return {
        "version": 1,
        "cell": TEXT_NORMAL,
        "task": SEED_TASK_2,
        "device": GOOD_DEVICE,
        **changes,
    }


@pytest.fixture
def viewer_client(client_as: Callable[[Any], APIClient], fleet: Any, viewer: Any) -> APIClient:
    return client_as(viewer)


def _post(client: APIClient, payload: Any) -> Any:
    return client.post(URL, payload, format="json")


def _fields(response: Any) -> list[str]:
    assert 400 <= response.status_code < 500, response.content
    return [d["field"] for d in response.json()["error"]["details"]]


# --- the trace ---------------------------------------------------------------------------------


def test_explain__seed_task_easy__device_by_threshold_with_each_term(
    viewer_client: APIClient,
) -> None:
    # When a viewer explains the seed's second task (score 0.27 < θ 0.6)
    answer = _post(viewer_client, body()).json()

    # Then the device takes it at step 6, and the terms are the seed's weights × signals
    assert answer["decision"]["route"] == "device"
    assert answer["decision"]["decided_by"] == "threshold"
    assert answer["decision"]["step"] == 6
    terms = {t["name"]: t["term"] for t in answer["score"]["terms"]}
    assert terms == pytest.approx({"length": 0.18, "intent": 0.045, "lm": 0.084})
    assert answer["score"]["value"] == pytest.approx(0.309)
    assert answer["threshold"] == {
        "reached": True,
        "base": 0.6,
        "adjustments": [],
        "effective": 0.6,
        "score_below": True,
    }
    assert answer["version_label"] == "v1"
    assert answer["cost"]["amount"] == 0


def test_explain__weak_network_busy_device_pressure__each_adjustment_named(
    viewer_client: APIClient,
) -> None:
    # Given a slow network (RTT 300 > 200), a busy device (0.9 >= 0.8) and a +0.1 pressure
    device = {**GOOD_DEVICE, "rtt_ms": 300, "device_load": 0.9, "cloud_pressure": 0.1}

    # When explained
    answer = _post(viewer_client, body(device=device)).json()

    # Then θ = 0.6 + 0.15 − 0.10 + 0.1, each adjustment in protocol order
    threshold = answer["threshold"]
    assert [(a["name"], a["delta"]) for a in threshold["adjustments"]] == [
        ("network", pytest.approx(0.15)),
        ("load", pytest.approx(-0.10)),
        ("cloud_pressure", pytest.approx(0.1)),
    ]
    assert threshold["effective"] == pytest.approx(0.75)


def test_explain__optional_upload_bytes_and_pressure_left_out__read_as_zero(
    viewer_client: APIClient,
) -> None:
    # Given a task without upload_bytes and a device without cloud_pressure (both optional)
    task = {k: v for k, v in SEED_TASK_2.items() if k != "upload_bytes"}
    device = {k: v for k, v in GOOD_DEVICE.items() if k != "cloud_pressure"}

    # When explained, and explained again with both at 0
    short = _post(viewer_client, body(task=task, device=device))
    full = _post(viewer_client, body(task={**task, "upload_bytes": 0}, device=GOOD_DEVICE))

    # Then both answer the same trace: no pressure adjustment, nothing to upload
    assert short.status_code == 200, short.content
    assert short.json() == full.json()
    assert short.json()["threshold"]["adjustments"] == []


def test_explain__hard_task_slow_cloud__device_by_latency_against_budget(
    viewer_client: APIClient,
) -> None:
    # Given the seed's fifth task (score 0.79) with 500 kB to upload at 5 Mbit/s
    task = {"tokens": 700, "intent_conf": 0.4, "lm_conf": 0.3, "upload_bytes": 500_000}

    # When explained: 500000·8/5000 + 80 + 250 = 1130 ms against a 1000 ms budget
    answer = _post(viewer_client, body(task=task)).json()

    # Then the device keeps it at step 7, and the prediction is shown against the budget
    assert answer["decision"]["decided_by"] == "latency"
    assert answer["decision"]["step"] == 7
    assert answer["latency"]["predicted_cloud_ms"] == pytest.approx(1130)
    assert answer["latency"]["upload_ms"] == pytest.approx(800)
    assert answer["latency"]["budget_ms"] == 1000
    assert answer["latency"]["within_budget"] is False


def test_explain__hard_task__cloud_and_priced(
    client_as: Callable[[Any], APIClient], fleet: Any, viewer: Any
) -> None:
    # Given a cloud price of 0.002 per 1k tokens and 0.01 per call
    fleet.cloud_price_per_call = 0.01
    fleet.save()
    task = {"tokens": 700, "intent_conf": 0.4, "lm_conf": 0.3, "upload_bytes": 0}

    # When the seed's fifth task is explained
    answer = _post(client_as(viewer), body(task=task)).json()

    # Then it goes to the cloud at step 8 and costs 0.7 × 0.002 + 0.01
    assert (answer["decision"]["route"], answer["decision"]["step"]) == ("cloud", 8)
    assert answer["cost"] == {
        "cloud_calls": 1,
        "amount": pytest.approx(0.0114),
        "currency": "USD",
    }


def test_explain__mode_switched_to_cloud_only_on_sensitive_cell__violation_shown(
    viewer_client: APIClient,
) -> None:
    # Given the voice/interactive/sensitive cell (device_only, upload forbidden)
    cell = {"task_type": "voice", "latency_budget": "interactive", "privacy_tier": "sensitive"}

    # When its mode is switched to cloud_only, and back to auto
    cloud = _post(viewer_client, body(cell=cell, override={"mode": "cloud_only"})).json()
    auto = _post(viewer_client, body(cell=cell, override={"mode": "auto"})).json()

    # Then cloud_only sends the data off the device (a violation); auto stops at privacy
    assert cloud["decision"]["route"] == "cloud"
    assert cloud["privacy"]["violation"] is True
    assert cloud["cell"]["overridden"] is True
    assert (auto["decision"]["decided_by"], auto["decision"]["step"]) == ("privacy", 2)
    assert auto["privacy"]["violation"] is False
    assert auto["score"]["reached"] is False


def test_explain__threshold_override__route_follows(viewer_client: APIClient) -> None:
    # When θ is lowered below the task's score (0.309)
    answer = _post(viewer_client, body(override={"threshold": 0.3})).json()

    # Then the cloud takes it
    assert answer["decision"]["route"] == "cloud"
    assert answer["threshold"]["base"] == 0.3


def test_explain__matrix__one_answer_per_cell_with_the_policy(viewer_client: APIClient) -> None:
    # When the same task is asked across the matrix
    answer = _post(viewer_client, body(matrix=True)).json()

    # Then each of the 12 cells answers as its own policy says
    by_cell = {
        (c["task_type"], c["latency_budget"], c["privacy_tier"]): c for c in answer["matrix"]
    }
    assert len(by_cell) == 12
    assert by_cell["voice", "interactive", "sensitive"]["decided_by"] == "policy"
    assert by_cell["image", "background", "normal"]["route"] == "cloud"
    assert by_cell["text", "interactive", "normal"]["route"] == "device"


def test_explain__seed_samples__five_tasks_two_to_the_cloud(viewer_client: APIClient) -> None:
    # When the seed's five tasks are streamed through text/interactive/normal (θ 0.6)
    answer = _post(viewer_client, body(samples="seed")).json()

    # Then, as in the seed's printout, the 3rd and 5th go to the cloud
    assert [s["route"] for s in answer["samples"]] == [
        "device",
        "device",
        "cloud",
        "device",
        "cloud",
    ]
    assert answer["samples"][0]["latency_ms"] == 30
    assert answer["samples"][2]["latency_ms"] == pytest.approx(330)


def test_explain__recorded_samples__the_cells_recorded_tasks(
    viewer_client: APIClient, phone: tuple[Device, str]
) -> None:
    # Given recorded events of the cell: a hard task, then one sent without its signals,
    # and one of another cell
    events = [
        make_event(tokens=600, intent_conf=0.3, lm_conf=0.2),
        make_event(tokens=None, intent_conf=None, lm_conf=None),
        make_event(task_type="voice", tokens=10),
    ]
    telemetry_batch_ingest(device=phone[0], body=json.dumps({"events": events}).encode())
    landed_drain()

    # When the recorded stream is asked
    answer = _post(viewer_client, body(samples="recorded")).json()

    # Then the cell's one task with signals is decided: to the cloud (score 0.71 >= 0.6)
    assert [(s["source"], s["tokens"], s["route"]) for s in answer["samples"]] == [
        ("recorded", 600, "cloud")
    ]


def test_explain__draft__decided_by_the_draft(
    client_as: Callable[[Any], APIClient], fleet: Any, viewer: Any, publisher: Any
) -> None:
    # Given a draft with θ 0.2 on text/interactive/normal
    draft = policy_draft_create(actor=publisher, fleet=fleet)
    policy_draft_update_cells(
        actor=publisher,
        fleet=fleet,
        revision=draft.revision,
        edits=[{**TEXT_NORMAL, "values": {"threshold": 0.2}}],
    )

    # When the draft and v1 are explained
    on_draft = _post(client_as(viewer), body(version="draft")).json()
    on_v1 = _post(client_as(viewer), body(version=1)).json()
    default = _post(client_as(viewer), {k: v for k, v in body().items() if k != "version"})

    # Then the draft sends the task to the cloud, v1 keeps it; the default is the draft
    assert (on_draft["version_label"], on_draft["decision"]["route"]) == ("draft", "cloud")
    assert on_v1["decision"]["route"] == "device"
    assert default.json()["version_label"] == "draft"


def test_explain__changes_nothing(viewer_client: APIClient) -> None:
    before = (PolicyVersion.objects.count(), AuditEntry.objects.count())
    _post(viewer_client, body(matrix=True, samples="seed", override={"mode": "cloud_only"}))
    assert (PolicyVersion.objects.count(), AuditEntry.objects.count()) == before


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"task": {**SEED_TASK_2, "tokens": -1}}, "task.tokens"),
        ({"task": {**SEED_TASK_2, "tokens": 10**8}}, "task.tokens"),
        ({"task": {**SEED_TASK_2, "tokens": 1.5}}, "task.tokens"),
        ({"task": {**SEED_TASK_2, "intent_conf": 1.01}}, "task.intent_conf"),
        ({"task": {**SEED_TASK_2, "lm_conf": "0.5"}}, "task.lm_conf"),
        ({"task": {**SEED_TASK_2, "upload_bytes": 2**41}}, "task.upload_bytes"),
        ({"task": {"tokens": 1, "intent_conf": 0.5}}, "task.lm_conf"),
        ({"device": {**GOOD_DEVICE, "rtt_ms": -5}}, "device.rtt_ms"),
        ({"device": {**GOOD_DEVICE, "bandwidth_kbps": 1e12}}, "device.bandwidth_kbps"),
        ({"device": {**GOOD_DEVICE, "device_load": 2}}, "device.device_load"),
        ({"device": {**GOOD_DEVICE, "online": "yes"}}, "device.online"),
        ({"device": {**GOOD_DEVICE, "cloud_pressure": 1.5}}, "device.cloud_pressure"),
        ({"device": {**GOOD_DEVICE, "cloud_infer_ms": True}}, "device.cloud_infer_ms"),
        ({"device": {**GOOD_DEVICE, "rtt": 5}}, "device.rtt"),
        ({"override": {"mode": "sometimes"}}, "override.mode"),
        ({"override": {"threshold": -0.1}}, "override.threshold"),
        ({"cell": {**TEXT_NORMAL, "task_type": "Text!"}}, "cell.task_type"),
        ({"cell": "text"}, "cell"),
        ({"version": 0}, "version"),
        ({"version": "v1"}, "version"),
        ({"samples": "all"}, "samples"),
        ({"matrix": 1}, "matrix"),
        ({"device_ms": -1}, "device_ms"),
        ({"extra": 1}, "extra"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_explain__bad_field__400_names_it(
    viewer_client: APIClient, changes: dict[str, Any], field: str
) -> None:
    # When one field is wrong; Then 400 names it (and only it)
    response = _post(viewer_client, body(**changes))
    assert response.status_code == 400, response.content
    assert _fields(response) == [field]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"cell": {**TEXT_NORMAL, "task_type": "code"}}, "cell"),
        ({"version": 99}, "version"),
        ({"version": "draft"}, "version"),  # the fleet has no draft
    ],
)
def test_explain__unknown_version_or_cell__404_names_it(
    viewer_client: APIClient, changes: dict[str, Any], field: str
) -> None:
    # When the body is well formed but names a version or cell the fleet does not have
    response = _post(viewer_client, body(**changes))

    # Then 404, naming which
    assert response.status_code == 404, response.content
    assert _fields(response) == [field]


@pytest.mark.parametrize("raw", ["[]", "null", '"explain"', "7", "{"])
def test_explain__body_not_an_object__400(viewer_client: APIClient, raw: str) -> None:
    response = viewer_client.generic("POST", URL, raw, content_type="application/json")
    assert response.status_code == 400


@pytest.mark.parametrize("hostile", HOSTILE_PARAMS)
def test_explain__hostile_json__400_names_the_field(
    viewer_client: APIClient, hostile: Hostile
) -> None:
    # When a field holds NaN, Infinity, 1e999, a NUL, a lone surrogate, or is nested 1,000 deep
    raw = with_field(body(), "device_ms", hostile.raw)
    response = viewer_client.generic("POST", URL, raw, content_type="application/json")

    # Then 400 names the field
    assert response.status_code == 400, response.content
    assert_names(response.json()["error"], "device_ms", hostile)


def test_explain__oversized_body__413(viewer_client: APIClient) -> None:
    raw = json.dumps({**body(), "pad": "x" * 3_000_000})
    response = viewer_client.generic("POST", URL, raw, content_type="application/json")
    assert response.status_code == 413


def test_explain__anonymous__refused(api_client: APIClient, fleet: Any) -> None:
    assert _post(api_client, body()).status_code in (401, 403)


def test_explain__user_without_role__403(
    client_as: Callable[[Any], APIClient], fleet: Any, make_user: Callable[..., Any]
) -> None:
    assert _post(client_as(make_user()), body()).status_code == 403


def test_explain__unknown_fleet__404(viewer_client: APIClient) -> None:
    response = viewer_client.post("/api/v1/fleets/nope/lab/explain", body(), format="json")
    assert response.status_code == 404


# --- the same decision as the SDK ------------------------------------------------------------

unit = st.floats(min_value=0.0, max_value=1.0)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    cell_index=st.integers(min_value=0, max_value=11),
    mode=st.sampled_from([None, "device_only", "cloud_only", "auto", "draft_refine"]),
    threshold=st.one_of(st.none(), unit),
    tokens=st.integers(min_value=0, max_value=5000),
    intent_conf=unit,
    lm_conf=unit,
    upload_bytes=st.integers(min_value=0, max_value=5_000_000),
    rtt_ms=st.floats(min_value=0, max_value=2000),
    bandwidth_kbps=st.floats(min_value=0, max_value=100_000),
    device_load=unit,
    online=st.booleans(),
    cloud_pressure=st.floats(min_value=-1, max_value=1),
    cloud_infer_ms=st.floats(min_value=0, max_value=20_000),
)
def test_explain__random_inputs__equals_router_route(
    viewer_client: APIClient,
    cell_index: int,
    mode: str | None,
    threshold: float | None,
    tokens: int,
    intent_conf: float,
    lm_conf: float,
    upload_bytes: int,
    rtt_ms: float,
    bandwidth_kbps: float,
    device_load: float,
    online: bool,
    cloud_pressure: float,
    cloud_infer_ms: float,
) -> None:
    # Given v1's document as a device receives it, with the same mode / θ override applied
    document = version_document(version=PolicyVersion.objects.get(number=1))
    cell = dict(document["cells"][cell_index])
    override = {k: v for k, v in (("mode", mode), ("threshold", threshold)) if v is not None}
    cell.update(override)
    key: dict[str, Any] = {k: cell[k] for k in ("task_type", "latency_budget", "privacy_tier")}
    task: dict[str, Any] = {
        "tokens": tokens,
        "intent_conf": intent_conf,
        "lm_conf": lm_conf,
        "upload_bytes": upload_bytes,
    }
    device = {
        "rtt_ms": rtt_ms,
        "bandwidth_kbps": bandwidth_kbps,
        "device_load": device_load,
        "online": online,
        "cloud_pressure": cloud_pressure,
        "cloud_infer_ms": cloud_infer_ms,
    }

    # When the API explains it, and an SDK router with that one cell routes it
    answer = _post(viewer_client, body(cell=key, task=task, device=device, override=override))
    assert answer.status_code == 200, answer.content
    store = PolicyStore()
    store.apply({**document, "cells": [cell]})
    router = Router(store)
    router.set_cloud_pressure(cloud_pressure, 600)
    routed = router.route(
        Task(**key, **task),
        Readings(
            rtt_ms=rtt_ms,
            bandwidth_kbps=bandwidth_kbps,
            device_load=device_load,
            online=online,
            cloud_infer_ms=cloud_infer_ms,
        ),
    )

    # Then both say the same route, step, score, θ, adjustments and cloud latency
    got = answer.json()
    assert got["decision"]["route"] == routed.route
    assert got["decision"]["decided_by"] == routed.decided_by
    assert got["decision"]["queue_until_online"] == routed.queue_until_online
    assert got["threshold"]["base"] == routed.base_threshold
    if routed.score is not None:
        assert got["score"]["value"] == routed.score
        assert got["threshold"]["effective"] == routed.threshold
        assert [(a["name"], a["delta"]) for a in got["threshold"]["adjustments"]] == list(
            routed.adjustments
        )
    if routed.predicted_cloud_ms is not None:
        assert got["latency"]["predicted_cloud_ms"] == (
            routed.predicted_cloud_ms if routed.predicted_cloud_ms != float("inf") else None
        )


def test_explain__matrix_and_samples__queries_bounded(
    viewer_client: APIClient, django_assert_max_num_queries: Any
) -> None:
    # The viewer's groups, the fleet, the version, its cells (and the recorded tasks): a slider
    # move costs a handful of queries, however many cells the matrix has.
    with django_assert_max_num_queries(6):
        response = _post(viewer_client, body(matrix=True, samples="recorded"))
    assert response.status_code == 200


def test_explain__recorded_samples__device_latency_is_the_fleets_observed_p50(
    viewer_client: APIClient, phone: tuple[Device, str]
) -> None:
    # Given the cell's devices answered in 50, 57 and 64 ms, and a hard task went to the cloud
    events = [
        make_event(latency_ms=50.0),
        make_event(latency_ms=57.0),
        make_event(latency_ms=64.0),
        make_event(tokens=600, intent_conf=0.3, lm_conf=0.2, route="cloud", latency_ms=400.0),
    ]
    telemetry_batch_ingest(device=phone[0], body=json.dumps({"events": events}).encode())
    landed_drain()

    # When the recorded stream is asked without a device latency
    answer = _post(viewer_client, body(samples="recorded")).json()

    # Then a device answer in the stream takes the observed device P50 (57 ms, the sketch's
    # 0.5%), not the seed's 30 ms, and the answer says where that came from
    used = answer["samples_device_ms"]
    assert used["value"] == pytest.approx(57.0, rel=0.01)
    assert "device P50 of text/interactive/normal's 3 device answers" in used["source"]
    device_answers = [s for s in answer["samples"] if s["route"] == "device"]
    assert device_answers
    assert all(s["latency_ms"] == pytest.approx(used["value"]) for s in device_answers)


def test_explain__seed_samples__device_latency_the_seeds_and_said_so(
    viewer_client: APIClient,
) -> None:
    # When the seed's tasks are streamed
    answer = _post(viewer_client, body(samples="seed")).json()

    # Then a device answer takes the seed's 30 ms, and the answer says so
    assert answer["samples_device_ms"] == {
        "value": 30.0,
        "source": "the seed's on-device latency (30 ms)",
    }
