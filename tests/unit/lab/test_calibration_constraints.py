"""Calibration says when its chosen point breaks the cell's latency budget, the α-within-budget
target keeps both, and the lab opens on what the devices run and names it."""

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from routing_policies.models import Device
from routing_policies.services import policy_draft_create, policy_draft_update_cells, rollout_start
from telemetry.ingest.services import landed_batches_process, telemetry_batch_ingest
from tests.factories import PASSWORD, make_event
from tests.lab_events import slow_device_events

pytestmark = pytest.mark.django_db

API = "/api/v1/fleets/fleet-a/lab/calibrations"
PAGE = "/fleets/fleet-a/lab/calibrate/"
LAB = "/fleets/fleet-a/lab/"
VOICE = {"task_type": "voice", "latency_budget": "interactive", "privacy_tier": "normal"}
VOICE_KEY = ("voice", "interactive", "normal")
Clients = Callable[[Any], APIClient]


def _login(user: Any) -> Client:
    client = Client()
    assert client.login(username=user.username, password=PASSWORD)
    return client


@pytest.fixture
def slow_devices(phone: tuple[Device, Any]) -> int:
    """400 events of voice/interactive/normal (budget 300 ms) decided by v1: a device answer
    takes 600 ms, a cloud answer 140 ms."""
    events = slow_device_events()
    telemetry_batch_ingest(device=phone[0], body=json.dumps({"events": events}).encode())
    landed_batches_process()
    return len(events)


def _voice(answer: dict[str, Any]) -> dict[str, Any]:
    return next(
        c for c in answer["cells"] if (c["task_type"], c["privacy_tier"]) == ("voice", "normal")
    )


def test_calibration_api__alpha_target_over_the_budget__constraints_broken_names_it(
    fleet: Any, viewer: Any, client_as: Clients, slow_devices: int
) -> None:
    # Given a cell whose devices answer in 600 ms against its 300 ms budget
    # When α 70% is asked for
    body = {"target": {"kind": "alpha", "value": 0.7}, "cells": [VOICE]}
    response = client_as(viewer).post(API, body, format="json")

    # Then α is met, and the answer says the chosen point breaks the latency budget
    assert response.status_code == 200, response.content
    cell = _voice(response.json())
    assert cell["reached"] is True
    assert cell["chosen"]["p95_ms"] > 300
    assert [b["constraint"] for b in cell["constraints_broken"]] == ["latency_budget"]
    broken = cell["constraints_broken"][0]
    assert broken["limit"] == 300
    assert broken["value"] == pytest.approx(cell["chosen"]["p95_ms"])


def test_calibration_api__alpha_within_budget__best_theta_keeping_both(
    fleet: Any, viewer: Any, client_as: Clients, slow_devices: int
) -> None:
    # Given the same cell
    # When α 70% within the budget is asked for
    body = {"target": {"kind": "alpha_within_budget", "value": 0.7}, "cells": [VOICE]}
    response = client_as(viewer).post(API, body, format="json")

    # Then the chosen θ keeps the budget, has the most α of every curve point that does
    # (none reaches 70%: not met), and breaks nothing
    assert response.status_code == 200, response.content
    cell = _voice(response.json())
    chosen = cell["chosen"]
    assert chosen["p95_ms"] <= 300
    within = [p for p in cell["curve"] if p["p95_ms"] is not None and p["p95_ms"] <= 300]
    assert chosen["alpha"] == pytest.approx(max(p["alpha"] for p in within))
    assert cell["reached"] is False
    assert cell["constraints_broken"] == []


def test_calibration_page__alpha_target_over_the_budget__badge_says_it_breaks_the_budget(
    fleet: Any, viewer: Any, slow_devices: int
) -> None:
    # Given the same cell
    # When the page calibrates it for α 70%
    response = _login(viewer).get(
        PAGE, {"kind": "alpha", "value": "70", "hours": "24", "cells": "voice/interactive/normal"}
    )

    # Then its badge does not say a plain green "target met": it says the budget is broken
    text = response.content.decode()
    assert response.status_code == 200
    assert "target met, breaks the 300 ms budget" in text
    assert 'class="chip chip-stable" data-field="badge"' not in text
    assert "latency budget: pick" in text


def test_calibration__published_version_no_device_runs__opens_on_stable_and_names_it(
    fleet: Any, viewer: Any, client_as: Clients, publish_version: Callable[..., Any]
) -> None:
    # Given v1 stable (voice θ 0.65 on the devices) and v2 published (θ 0.70), no draft
    publish_version(fleet, threshold=0.7)

    # When the calibration API and page are asked without a version
    body = {"target": {"kind": "alpha", "value": 0.7}, "cells": [VOICE]}
    answer = client_as(viewer).post(API, body, format="json").json()
    page = _login(viewer).get(PAGE, {"kind": "alpha", "value": "70"}).content.decode()

    # Then both calibrate v1, what devices run, with its θ now, and say so
    assert answer["base"]["label"] == "v1"
    assert _voice(answer)["current_threshold"] == 0.65
    assert "on v1" in page
    assert "what devices run (stable)" in page
    assert '<option value="1" selected>v1 · stable: devices run it</option>' in page
    assert '<option value="2">v2</option>' in page


def test_calibration_page__another_version_picked__calibrates_that_one(
    fleet: Any, viewer: Any, publish_version: Callable[..., Any]
) -> None:
    # Given v1 stable and v2 published
    publish_version(fleet, threshold=0.7)

    # When the operator picks v2
    page = _login(viewer).get(PAGE, {"kind": "alpha", "value": "70", "hours": "24", "version": "2"})

    # Then v2 is calibrated, and the page says no device runs it
    text = page.content.decode()
    assert page.status_code == 200
    assert "on v2" in text
    assert "no device runs it" in text
    assert "devices run v1 (stable)" in text


def test_calibration_page__during_a_rollout__names_the_cohort(
    fleet: Any, viewer: Any, publisher: Any, publish_version: Callable[..., Any]
) -> None:
    # Given v2 rolling out at 5%
    publish_version(fleet, threshold=0.7)
    rollout_start(actor=publisher, fleet=fleet, version=2)

    # When the calibration page opens
    text = _login(viewer).get(PAGE).content.decode()

    # Then it is on v1 and says it is the stable cohort's, v2 the candidate's
    assert "on v1" in text
    assert "the stable cohort runs it (95% of devices; v2 is rolling out to the rest)" in text
    assert '<option value="1" selected>v1 · stable cohort (95%)</option>' in text
    assert '<option value="2">v2 · candidate cohort (5%)</option>' in text


def test_lab_page__published_version_no_device_runs__opens_on_stable_and_names_it(
    fleet: Any, viewer: Any, publish_version: Callable[..., Any]
) -> None:
    # Given v1 stable (text θ as v1 has it, voice 0.65) and v2 published, no draft
    publish_version(fleet, threshold=0.7)

    # When the playground opens
    text = _login(viewer).get(LAB).content.decode()

    # Then it is on v1, named as what devices run, and v2 can be picked
    assert "Opened on v1: what devices run (stable)." in text
    assert '<option value="1" selected>v1 · stable: devices run it</option>' in text
    assert '<option value="2">v2</option>' in text


def test_calibration__a_draft_is_open__opens_on_it_and_says_what_devices_run(
    fleet: Any, editor: Any, publish_version: Callable[..., Any]
) -> None:
    # Given a draft
    policy_draft_create(actor=editor, fleet=fleet)

    # When the calibration page opens
    text = _login(editor).get(PAGE).content.decode()

    # Then it is on the draft, and says what the devices run beside it
    assert "on the draft" in text
    assert "devices run v1 (stable)" in text


def test_calibration_api__cell_never_ran_draft_refine__p95_its_device_plus_cloud_residual(
    fleet: Any, editor: Any, client_as: Clients, phone: tuple[Device, Any]
) -> None:
    # Given the voice cell's devices answer in 600 ms and its cloud calls in 140 ms (40 ms
    # round trip, 100 ms beyond it), it never ran draft_refine, and another cell's draft-refine
    # runs took 3,000 ms
    image = [
        make_event(
            task_type="image",
            route="draft_refine",
            decided_by="threshold",
            latency_ms=3_000.0,
            rtt_ms=80,
            upload_bytes=0,
        )
        for _ in range(200)
    ]
    body = json.dumps({"events": [*slow_device_events(), *image]}).encode()
    telemetry_batch_ingest(device=phone[0], body=body)
    landed_batches_process()
    # and a draft that turns the voice cell to draft_refine
    draft = policy_draft_create(actor=editor, fleet=fleet)
    policy_draft_update_cells(
        actor=editor,
        fleet=fleet,
        revision=draft.revision,
        edits=[{**VOICE, "values": {"mode": "draft_refine"}}],
    )

    # When the draft's voice cell is calibrated
    body_in = {"target": {"kind": "alpha", "value": 0.5}, "cells": [VOICE]}
    answer = client_as(editor).post(API, body_in, format="json").json()

    # Then at θ 0, where every task drafts and refines (the cloud answers in 140 ms, within
    # the budget), the predicted P95 is the documented rule: 600 + 100 + 40 = 740 ms
    cell = _voice(answer)
    assert answer["base"]["is_draft"] is True
    at_zero = cell["curve"][0]
    assert at_zero["draft_refine_share"] == 1.0
    assert at_zero["p95_ms"] == pytest.approx(740.0, rel=0.01)
