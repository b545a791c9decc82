"""The lab's `segment` field (backtests, calibrations, apply): a segment of the fleet by name;
anything else is a 4xx naming `segment`, with nothing stored or changed."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rest_framework.test import APIClient

from lab.backtests.models import Backtest
from routing_policies.models import AuditEntry, PolicyVersion
from routing_policies.segments.services import segment_create
from routing_policies.services import policy_draft_create
from tests.factories import make_fleet
from tests.hostile_json import HOSTILE_PARAMS, Hostile, assert_names, with_field
from tests.lab_events import NPU_PHONES, PHONES, ingest, phones_with_segments, refined_events

pytestmark = pytest.mark.django_db

BACKTESTS = "/api/v1/fleets/fleet-a/lab/backtests"
CALIBRATIONS = "/api/v1/fleets/fleet-a/lab/calibrations"
APPLY = f"{CALIBRATIONS}/apply"
TEXT = {"task_type": "text", "latency_budget": "interactive", "privacy_tier": "normal"}
IMAGE = {"task_type": "image", "latency_budget": "interactive", "privacy_tier": "normal"}
ALPHA = {"target": {"kind": "alpha", "value": 0.7}, "cells": [TEXT]}


@pytest.fixture
def segments(fleet: Any, fleet_key: str, publisher: Any) -> None:
    """fleet-a's phones and segments (npu, gpu-or-npu, cars); fleet-b has a segment `theirs`."""
    phones_with_segments(fleet=fleet, fleet_key=fleet_key, actor=publisher)
    other = make_fleet(slug="fleet-b", actor=publisher)
    segment_create(
        actor=publisher, fleet=other, name="theirs", rule={"attribute": "region", "equals": "eu"}
    )


def _post(client: APIClient, url: str, body: Any) -> Any:
    return client.generic("POST", url, json.dumps(body), content_type="application/json")


def _stored() -> tuple[int, int, list[tuple[int, list[Any]]]]:
    """What a refusal must leave as it was: backtests, audit entries, the drafts' overrides."""
    drafts = PolicyVersion.objects.filter(number__isnull=True).order_by("pk")
    return (
        Backtest.objects.count(),
        AuditEntry.objects.count(),
        [(draft.revision, draft.overrides) for draft in drafts],
    )


BAD_SEGMENTS = [
    pytest.param("nope", id="unknown"),
    pytest.param("theirs", id="another-fleets"),
    pytest.param("NPU", id="upper-case-is-another-name"),
    pytest.param(" npu", id="leading-space"),
    pytest.param("npu\n", id="trailing-newline"),
    pytest.param("", id="blank"),
    pytest.param("n" * 65, id="oversized"),
    pytest.param("n" * 100_000, id="huge"),
    pytest.param(5, id="number"),
    pytest.param(True, id="bool"),
    pytest.param(None, id="null"),
    pytest.param(["npu"], id="list"),
    pytest.param({"name": "npu"}, id="object"),
]


def _bodies(segment: Any, draft: PolicyVersion | None = None) -> dict[str, dict[str, Any]]:
    bodies = {
        BACKTESTS: {"version": 1, "segment": segment},
        CALIBRATIONS: {**ALPHA, "segment": segment},
    }
    if draft is not None:
        bodies[APPLY] = {
            "revision": draft.revision,
            "cells": [{**TEXT, "threshold": 0.5}],
            "segment": segment,
        }
    return bodies


@pytest.mark.parametrize("segment", BAD_SEGMENTS)
def test_lab_segment__bad_value__400_names_segment_nothing_stored(
    segments: None, fleet: Any, editor: Any, client_as: Any, segment: Any
) -> None:
    # Given a fleet with segments and an open draft
    draft = policy_draft_create(actor=editor, fleet=fleet)
    before = _stored()

    for url, body in _bodies(segment, draft).items():
        # When a backtest, a calibration or an apply names a segment that is not one of its
        response = _post(client_as(editor), url, body)

        # Then 400 names `segment`, and nothing is stored or changed
        assert response.status_code == 400, (url, response.content)
        fields = [d["field"] for d in response.json()["error"]["details"]]
        assert fields == ["segment"], (url, fields)
        assert _stored() == before, url


@pytest.mark.parametrize("hostile", HOSTILE_PARAMS)
def test_lab_segment__hostile_json__400_names_segment_nothing_stored(
    segments: None, fleet: Any, editor: Any, client_as: Any, hostile: Hostile
) -> None:
    before = _stored()
    for url, body in _bodies("npu").items():
        raw = with_field(body, "segment", hostile.raw)
        response = client_as(editor).generic("POST", url, raw, content_type="application/json")

        assert response.status_code == 400, (url, response.content)
        assert_names(response.json()["error"], "segment", hostile)
    assert _stored() == before


def test_lab_segment__matches_no_device__409_names_segment_nothing_stored(
    segments: None, fleet: Any, editor: Any, client_as: Any
) -> None:
    # Given segment cars, which no phone of the fleet is in
    draft = policy_draft_create(actor=editor, fleet=fleet)
    before = _stored()

    for url, body in _bodies("cars", draft).items():
        # When a backtest, a calibration or an apply is asked for it
        response = _post(client_as(editor), url, body)

        # Then 409 says it matches no device, naming `segment`; nothing is stored
        assert response.status_code == 409, (url, response.content)
        error = response.json()["error"]
        assert error["code"] == "segment_matches_none"
        assert [d["field"] for d in error["details"]] == ["segment"]
        assert _stored() == before, url


def test_lab_segment__quality_target_without_its_reports__409_as_for_the_fleet(
    segments: None, fleet: Any, viewer: Any, client_as: Any
) -> None:
    # Given draft reports of the image cell from the CPU and GPU phones only
    ingest(fleet, refined_events(900, devices=set(PHONES) - NPU_PHONES))
    before = _stored()

    # When the cell is calibrated for a device quality on segment npu, and on the fleet
    body = {"target": {"kind": "quality", "value": 0.6}, "cells": [IMAGE]}
    refused = _post(client_as(viewer), CALIBRATIONS, {**body, "segment": "npu"})
    whole = _post(client_as(viewer), CALIBRATIONS, body)

    # Then the segment's is the fleet's refusal without reports: 409 naming the cell and
    # the reports it needs, nothing stored; the fleet's, with its reports, answers
    assert refused.status_code == 409, refused.content
    error = refused.json()["error"]
    assert error["code"] == "too_few_quality_reports"
    assert [d["field"] for d in error["details"]] == ["cells"]
    assert "image/interactive/normal: too few draft reports" in error["details"][0]["message"]
    assert "0 scored reports in the window, 100 needed" in error["details"][0]["message"]
    assert _stored() == before
    assert whole.status_code == 200, whole.content
    assert whole.json()["cells"][0]["quality"]["refused"] == ""


def test_lab_segment__viewer__reads_a_calibration_but_starts_no_backtest(
    segments: None, viewer: Any, client_as: Any
) -> None:
    # When a viewer calibrates for segment npu and asks for its backtest
    calibrated = _post(client_as(viewer), CALIBRATIONS, {**ALPHA, "segment": "npu"})
    backtest = _post(client_as(viewer), BACKTESTS, {"version": 1, "segment": "npu"})

    # Then the calibration answers, naming the segment; the backtest is refused, nothing kept
    assert calibrated.status_code == 200, calibrated.content
    assert calibrated.json()["segment"]["name"] == "npu"
    assert calibrated.json()["segment"]["devices"] == 5
    assert backtest.status_code == 403
    assert not Backtest.objects.exists()


def test_lab_segment__backtest_asked_twice__one_kept_and_its_segment_in_filters(
    segments: None, editor: Any, client_as: Any
) -> None:
    first = _post(client_as(editor), BACKTESTS, {"version": 1, "segment": "npu"})
    again = _post(client_as(editor), BACKTESTS, {"version": 1, "segment": "npu"})

    assert (first.status_code, again.status_code) == (202, 200)
    assert first.json()["id"] == again.json()["id"]
    assert first.json()["filters"]["segment"] == {
        "name": "npu",
        "rule": {"attribute": "accelerator", "equals": "npu"},
        "overridden": [],
        "devices_other_table": 0,
    }
    assert Backtest.objects.count() == 1
