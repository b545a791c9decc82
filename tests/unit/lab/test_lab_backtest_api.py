"""`POST /api/v1/fleets/{slug}/lab/backtests` and `GET …/{id}`: editors and up start a backtest,
any reader reads it with its progress and result; every bad input is a 4xx naming the field,
never a 5xx, and stores nothing."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from lab.backtests.models import Backtest
from lab.backtests.services import backtest_run
from routing_policies.policies.sdk_cells import table_cells
from routing_policies.selectors import version_table
from tests.factories import decided_events
from tests.hostile_json import HOSTILE_PARAMS, Hostile, assert_names, with_field

pytestmark = pytest.mark.django_db

URL = "/api/v1/fleets/fleet-a/lab/backtests"


def _post(client: APIClient, body: Any) -> Any:
    return client.generic("POST", URL, json.dumps(body), content_type="application/json")


def test_backtest_api__editor_starts_viewer_polls__progress_then_result(
    fleet: Any, editor: Any, viewer: Any, client_as: Any
) -> None:
    # Given 120 events decided by v1
    decided_events(fleet, table_cells(version_table(version=fleet.versions.get())), count=120)

    # When an editor starts a backtest of v1 and a viewer reads it before and after the run
    started = _post(client_as(editor), {"version": 1})
    url = started.json()["url"]
    before = client_as(viewer).get(url)
    backtest_run(backtest_id=started.json()["id"])
    after = client_as(viewer).get(url)

    # Then it is queued (202) with no progress, then done with its result
    assert started.status_code == 202, started.content
    assert (before.json()["status"], before.json()["progress"]) == ("queued", 0.0)
    body = after.json()
    assert (body["status"], body["progress"], body["events_done"]) == ("done", 1.0, 120)
    assert body["label"] == "v1"
    assert body["result"]["self_check"]["agreement"] == 1.0
    assert set(body["result"]) >= {"overall", "cells", "self_check", "privacy", "headline"}


def test_backtest_api__same_request_again__200_with_the_kept_backtest(
    fleet: Any, editor: Any, client_as: Any
) -> None:
    # Given a backtest of v1 up to a fixed end
    end = (datetime.now(UTC) - timedelta(minutes=3)).isoformat()
    first = _post(client_as(editor), {"version": 1, "end": end, "hours": 6})

    # When it is asked for again
    second = _post(client_as(editor), {"version": 1, "end": end, "hours": 6})

    # Then the same one answers, 200, and only one is kept
    assert (first.status_code, second.status_code) == (202, 200)
    assert first.json()["id"] == second.json()["id"]
    assert Backtest.objects.count() == 1


def test_backtest_api__viewer_starts__403_nothing_stored(
    fleet: Any, viewer: Any, client_as: Any
) -> None:
    response = _post(client_as(viewer), {"version": 1})

    assert response.status_code == 403
    assert not Backtest.objects.exists()


def test_backtest_api__anonymous__401_or_403(fleet: Any) -> None:
    assert _post(APIClient(), {"version": 1}).status_code in (401, 403)
    assert APIClient().get(f"{URL}/1").status_code in (401, 403)


def test_backtest_api__unknown_id_or_fleet__404(fleet: Any, viewer: Any, client_as: Any) -> None:
    client = client_as(viewer)
    assert client.get(f"{URL}/999").status_code == 404
    assert client.get("/api/v1/fleets/nope/lab/backtests/1").status_code == 404


def test_backtest_api__stale_draft_revision__409_names_revision(
    fleet: Any, publisher: Any, client_as: Any
) -> None:
    client = client_as(publisher)
    client.post(f"/api/v1/fleets/{fleet.slug}/draft/", {}, format="json")

    response = _post(client, {"version": "draft", "revision": 7})

    assert response.status_code == 409, response.content
    assert [d["field"] for d in response.json()["error"]["details"]] == ["revision"]
    assert not Backtest.objects.exists()


def test_backtest_api__version_with_another_revision__409_names_revision(
    fleet: Any, editor: Any, client_as: Any
) -> None:
    # Given v1, published at its own revision
    client = client_as(editor)
    published = fleet.versions.get(number=1).revision

    # When a backtest of v1 names a revision v1 was not published at
    response = _post(client, {"version": 1, "revision": published + 1})

    # Then it is refused as stale, naming the revision, and nothing is kept
    assert response.status_code == 409, response.content
    assert [d["field"] for d in response.json()["error"]["details"]] == ["revision"]
    assert not Backtest.objects.exists()

    # And with the revision v1 was published at it starts
    assert _post(client, {"version": 1, "revision": published}).status_code in (200, 202)
    assert Backtest.objects.count() == 1


BAD_BODIES = [
    pytest.param({"version": "v1"}, "version", id="version-not-draft-or-number"),
    pytest.param({"version": 0}, "version", id="version-zero"),
    pytest.param({"version": 2**31}, "version", id="version-out-of-range"),
    pytest.param({"version": True}, "version", id="version-bool"),
    pytest.param({"version": 1.5}, "version", id="version-fraction"),
    pytest.param({"hours": 0}, "hours", id="hours-zero"),
    pytest.param({"hours": 100_000}, "hours", id="hours-past-retention"),
    pytest.param({"hours": "24"}, "hours", id="hours-string"),
    pytest.param({"end": "yesterday"}, "end", id="end-garbage"),
    pytest.param({"end": "2026-11-29T15:00:00"}, "end", id="end-without-zone"),
    pytest.param({"end": 5}, "end", id="end-number"),
    pytest.param({"end": "2" * 10_000}, "end", id="end-oversized"),
    pytest.param({"versions": []}, "versions", id="versions-empty"),
    pytest.param({"versions": [1, "2"]}, "versions[1]", id="versions-string-item"),
    pytest.param({"versions": list(range(1, 200))}, "versions", id="versions-too-many"),
    pytest.param({"versions": {"a": 1}}, "versions", id="versions-object"),
    pytest.param({"cohort": "canary"}, "cohort", id="cohort-unknown"),
    pytest.param({"cells": ["x" * 5000]}, "cells[0]", id="cell-oversized"),
    pytest.param({"cells": [["text", "interactive", "normal"]]}, "cells[0]", id="cell-list"),
    pytest.param({"cells": "text/interactive/normal"}, "cells", id="cells-string"),
    pytest.param({"colour": "blue"}, "colour", id="unknown-field"),
]


@pytest.mark.parametrize(("body", "field"), BAD_BODIES)
def test_backtest_api__bad_input__400_or_409_names_field_nothing_stored(
    fleet: Any, editor: Any, client_as: Any, body: dict[str, Any], field: str
) -> None:
    # Given a fleet on v1 without a draft / When a backtest is asked for with a bad field
    response = _post(client_as(editor), {"version": 1, **body})

    # Then 400 names the field, and nothing is stored
    assert response.status_code == 400, response.content
    details = response.json()["error"]["details"]
    assert field in [d["field"] for d in details], details
    assert not Backtest.objects.exists()


STATE_REFUSALS = [
    pytest.param({"version": 9}, 404, "version", id="version-unpublished"),
    pytest.param({"version": "draft"}, 409, "version", id="no-draft"),
    pytest.param({"version": 1, "end": "2999-01-01T00:00:00Z"}, 409, "end", id="end-future"),
    pytest.param(
        {"version": 1, "end": "2000-01-01T00:00:00Z"}, 409, "end", id="end-before-retention"
    ),
    pytest.param({"version": 1, "cells": ["text/interactive"]}, 409, "cells[0]", id="cell-half"),
]


@pytest.mark.parametrize(("body", "status", "field"), STATE_REFUSALS)
def test_backtest_api__well_formed_but_not_servable__404_or_409_names_field_nothing_stored(
    fleet: Any, editor: Any, client_as: Any, body: dict[str, Any], status: int, field: str
) -> None:
    # Given a fleet on v1 without a draft / When a backtest asks for what the fleet lacks
    response = _post(client_as(editor), body)

    # Then 404 or 409 names the field, and nothing is stored
    assert response.status_code == status, response.content
    assert field in [d["field"] for d in response.json()["error"]["details"]]
    assert not Backtest.objects.exists()


@pytest.mark.parametrize("body", [[], "x", None, 5])
def test_backtest_api__body_not_an_object__400_names_body(
    fleet: Any, editor: Any, client_as: Any, body: Any
) -> None:
    response = _post(client_as(editor), body)

    assert response.status_code == 400, response.content
    assert [d["field"] for d in response.json()["error"]["details"]] == ["body"]
    assert not Backtest.objects.exists()


@pytest.mark.parametrize("hostile", HOSTILE_PARAMS)
@pytest.mark.parametrize("field", ["cohort", "versions"])
def test_backtest_api__hostile_json_value__400_names_field_nothing_stored(
    fleet: Any, editor: Any, client_as: Any, hostile: Hostile, field: str
) -> None:
    # When a body carries a field nested 1,000 deep, a NUL, a lone surrogate or NaN
    response = client_as(editor).generic(
        "POST", URL, with_field({"version": 1}, field, hostile.raw), content_type="application/json"
    )

    # Then 400 names the field (not a 500), and nothing is stored
    assert response.status_code == 400, response.content
    assert_names(response.json()["error"], field, hostile)
    assert not Backtest.objects.exists()
