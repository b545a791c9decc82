"""The calibration API: compute (readers) and apply to the draft (editors), and what both
refuse (malformed, oversized, deep, NUL, out of range, unknown cell, unauthorised, duplicate,
stale) with the one error shape and nothing changed."""

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from lab.backtests.models import Backtest
from routing_policies.models import AuditEntry, Device, PolicyCell
from routing_policies.services import policy_draft_create
from telemetry.ingest.services import landed_batches_process, telemetry_batch_ingest
from tests.factories import demo_cell, iso, protocol_event, recorded_sample
from tests.hostile_json import HOSTILE_PARAMS, Hostile, assert_names, with_field

pytestmark = pytest.mark.django_db

BASE = "/api/v1/fleets/fleet-a/lab/calibrations"
APPLY = f"{BASE}/apply"
TEXT = {"task_type": "text", "latency_budget": "interactive", "privacy_tier": "normal"}
TEXT_KEY = ("text", "interactive", "normal")
ALPHA_70 = {"target": {"kind": "alpha", "value": 0.7}, "cells": [TEXT]}
Client = Callable[[Any], APIClient]


def assert_error(response: Any, status: int, code: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.content
    error: dict[str, Any] = response.json()["error"]
    if code is not None:
        assert error["code"] == code, error
    return error


def _fields(error: dict[str, Any]) -> list[str]:
    """The fields an error names, as the API writes them."""
    return [detail["field"] for detail in error["details"]]


def _state() -> tuple[int, int, list[float]]:
    thresholds = list(PolicyCell.objects.order_by("pk").values_list("threshold", flat=True))
    return AuditEntry.objects.count(), Backtest.objects.count(), thresholds


@pytest.fixture
def recorded(phone: tuple[Device, Any]) -> int:
    """600 generated events of the text cell, one a second over the 10 minutes to an hour ago,
    ingested as phone-1 sent them and processed."""
    cell = demo_cell(TEXT_KEY)
    last = datetime.now(UTC) - timedelta(hours=1)
    events = [
        {**protocol_event(e), "ts": iso(last - timedelta(seconds=599 - index))}
        for index, e in enumerate(recorded_sample(cell, 600, seed=4))
    ]
    for start in range(0, len(events), 500):
        batch = {"events": events[start : start + 500]}
        telemetry_batch_ingest(device=phone[0], body=json.dumps(batch).encode())
    landed_batches_process()
    return len(events)


@pytest.fixture
def draft(fleet: Any, editor: Any) -> Any:
    return policy_draft_create(actor=editor, fleet=fleet)


def test_calibration_api__viewer_alpha_target__chosen_theta_within_one_point_nothing_stored(
    recorded: int, viewer: Any, client_as: Client
) -> None:
    # Given a fleet with a day of text-cell events and no draft
    before = _state()

    # When a viewer calibrates the text cell for α 70%
    response = client_as(viewer).post(BASE, ALPHA_70, format="json")

    # Then the chosen θ reaches it within a point, on the latest published version, with a
    # curve of 101 points and the sampled check agreeing; nothing is written
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["base"] == {"version": 1, "label": "v1", "is_draft": False, "revision": None}
    assert body["events"] == recorded
    assert body["unreplayable_events"] == 0
    (cell,) = body["cells"]
    assert cell["calibrated"]
    assert cell["reached"]
    assert abs(cell["chosen"]["alpha"] - 0.7) <= 0.01
    assert len(cell["curve"]) == 101
    assert cell["curve"][0]["alpha"] <= cell["chosen"]["alpha"] <= cell["curve"][-1]["alpha"]
    assert cell["verified"]["matching"] == cell["verified"]["events"] == recorded
    # and its cost at the chosen θ, per day, against all-cloud and the stable version (v1,
    # whose θ is the current one: the curve's cost there)
    cost = cell["cost"]
    assert body["stable_version"] == 1
    assert cost["per_day"] == pytest.approx(cell["chosen"]["cost_per_hour"] * 24)
    assert cost["stable"]["per_hour"] == pytest.approx(cell["current"]["cost_per_hour"])
    # (the saving over the window: per hour times the span that holds data, 599 s; it was
    # times the nominal 24 h before costs were taken over the span of data, issue 22)
    assert cost["hours"] == pytest.approx(599 / 3600)
    assert cost["saving_vs_stable"]["amount"] == pytest.approx(
        (cell["current"]["cost_per_hour"] - cell["chosen"]["cost_per_hour"]) * 599 / 3600
    )
    assert cost["all_cloud"]["per_hour"] >= cell["curve"][0]["cost_per_hour"]
    assert body["cost"]["window"] == pytest.approx(cost["window"])
    assert _state() == before


def test_calibration_api__every_cell__fixed_cells_listed_with_the_reason(
    recorded: int, viewer: Any, client_as: Client
) -> None:
    response = client_as(viewer).post(
        BASE, {"target": {"kind": "p95_within_budget"}}, format="json"
    )

    assert response.status_code == 200, response.content
    cells = {
        (c["task_type"], c["latency_budget"], c["privacy_tier"]): c
        for c in response.json()["cells"]
    }
    assert len(cells) == 12
    assert cells[TEXT_KEY]["calibrated"]
    fixed = cells[("voice", "interactive", "sensitive")]
    assert not fixed["calibrated"]
    assert "device_only" in fixed["skipped"]
    assert cells[("image", "background", "normal")]["skipped"].startswith("mode cloud_only")


def test_calibration_api__editor_applies__draft_updated_audited_revision_bumped(
    draft: Any, editor: Any, client_as: Client
) -> None:
    # Given a draft at revision 1
    # When an editor applies θ 0.58 to the text cell
    response = client_as(editor).post(
        APPLY, {"revision": 1, "cells": [{**TEXT, "threshold": 0.58}]}, format="json"
    )

    # Then the draft holds it, at revision 2, with an audit entry of the change, and the
    # backtest of revision 2 is started
    assert response.status_code == 200, response.content
    assert response.json()["revision"] == 2
    backtest = Backtest.objects.get()
    assert response.json()["backtest"] == backtest.pk
    assert (backtest.subject, backtest.revision) == ("draft", 2)
    cell = PolicyCell.objects.get(version=draft, **TEXT)
    assert cell.threshold == 0.58
    entry = AuditEntry.objects.filter(action="policy_cells.updated").get()
    assert entry.before == {"text/interactive/normal.threshold": 0.6}
    assert entry.after == {"text/interactive/normal.threshold": 0.58}
    assert entry.actor_name == editor.username


def test_calibration_api__apply_with_a_stale_revision__409_nothing_changed(
    draft: Any, editor: Any, client_as: Client
) -> None:
    client = client_as(editor)
    first = client.post(
        APPLY, {"revision": 1, "cells": [{**TEXT, "threshold": 0.5}]}, format="json"
    )
    assert first.status_code == 200
    before = _state()

    # When a second apply still names revision 1
    response = client.post(
        APPLY, {"revision": 1, "cells": [{**TEXT, "threshold": 0.7}]}, format="json"
    )

    # Then 409 stale_revision, and the draft keeps the first θ
    assert_error(response, 409, "stale_revision")
    assert _state() == before
    assert PolicyCell.objects.get(version=draft, **TEXT).threshold == 0.5


def test_calibration_api__viewer_applies__403_nothing_changed(
    draft: Any, viewer: Any, client_as: Client
) -> None:
    before = _state()
    response = client_as(viewer).post(
        APPLY, {"revision": 1, "cells": [{**TEXT, "threshold": 0.5}]}, format="json"
    )
    assert_error(response, 403)
    assert _state() == before


@pytest.mark.parametrize("path", [BASE, APPLY])
def test_calibration_api__anonymous__refused(fleet: Any, path: str) -> None:
    response = APIClient().post(path, ALPHA_70, format="json")
    assert response.status_code in (401, 403)


def test_calibration_api__unknown_fleet__404(viewer: Any, client_as: Client) -> None:
    response = client_as(viewer).post(
        "/api/v1/fleets/nope/lab/calibrations", ALPHA_70, format="json"
    )
    assert_error(response, 404)


BAD_COMPUTE = [
    pytest.param([ALPHA_70], "body", id="array-body"),
    pytest.param({"cells": [TEXT]}, "target", id="no-target"),
    pytest.param({**ALPHA_70, "window": 3}, "window", id="unknown-field"),
    pytest.param(
        {**ALPHA_70, "target": {"kind": "alpha", "value": 0.7, "x": 1}},
        "target.x",
        id="unknown-target-field",
    ),
    pytest.param(
        {**ALPHA_70, "target": {"kind": "trust", "value": 0.9}}, "target.kind", id="unknown-kind"
    ),
    pytest.param(
        {**ALPHA_70, "target": {"kind": "quality", "value": 1.2}},
        "target.value",
        id="quality-above-1",
    ),
    pytest.param(
        {**ALPHA_70, "target": {"kind": "quality"}}, "target.value", id="quality-no-value"
    ),
    pytest.param(
        {**ALPHA_70, "target": {"kind": "alpha", "value": 1.5}}, "target.value", id="alpha-above-1"
    ),
    pytest.param(
        {**ALPHA_70, "target": {"kind": "alpha", "value": -0.1}},
        "target.value",
        id="alpha-negative",
    ),
    pytest.param(
        {**ALPHA_70, "target": {"kind": "alpha", "value": "0.7"}},
        "target.value",
        id="value-as-string",
    ),
    pytest.param({**ALPHA_70, "target": {"kind": "alpha"}}, "target.value", id="no-value"),
    pytest.param(
        {**ALPHA_70, "target": {"kind": "cost_ceiling", "value": 1e12}},
        "target.value",
        id="ceiling-too-high",
    ),
    pytest.param(
        {**ALPHA_70, "target": {"kind": "p95_within_budget", "value": 1}},
        "target.value",
        id="p95-with-value",
    ),
    pytest.param({**ALPHA_70, "hours": 0}, "hours", id="hours-zero"),
    pytest.param({**ALPHA_70, "hours": 24 * 8}, "hours", id="hours-over-a-week"),
    pytest.param({**ALPHA_70, "hours": True}, "hours", id="hours-bool"),
    pytest.param({**ALPHA_70, "cells": []}, "cells", id="no-cells"),
    pytest.param(
        {**ALPHA_70, "cells": [{**TEXT, "task_type": "code"}]}, "cells[0]", id="unknown-cell"
    ),
    pytest.param({**ALPHA_70, "cells": [TEXT, TEXT]}, "cells[1]", id="duplicate-cell"),
    pytest.param(
        {**ALPHA_70, "cells": [{**TEXT, "task_type": "Text\n"}]},
        "cells[0].task_type",
        id="bad-dimension-value",
    ),
    pytest.param({**ALPHA_70, "cells": [TEXT] * 2000}, "cells", id="too-many-cells"),
    pytest.param({**ALPHA_70, "version": 9}, "version", id="no-such-version"),
]


@pytest.mark.parametrize(("body", "field"), BAD_COMPUTE)
def test_calibration_api__bad_compute_body__4xx_names_the_field(
    fleet: Any, viewer: Any, client_as: Client, body: Any, field: str
) -> None:
    before = _state()
    response = client_as(viewer).post(BASE, body, format="json")
    assert 400 <= response.status_code < 500, response.content
    error = response.json()["error"]
    assert any(f == field or f.startswith((f"{field}.", f"{field}[")) for f in _fields(error)) or (
        field == "version" and response.status_code == 404
    ), error
    assert _state() == before


BAD_APPLY = [
    pytest.param({"cells": [{**TEXT, "threshold": 0.5}]}, "revision", id="no-revision"),
    pytest.param(
        {"revision": "1", "cells": [{**TEXT, "threshold": 0.5}]},
        "revision",
        id="revision-as-string",
    ),
    pytest.param(
        {"revision": 1, "cells": [{**TEXT, "threshold": 1.5}]},
        "cells[0].threshold",
        id="theta-above-1",
    ),
    pytest.param(
        {"revision": 1, "cells": [{**TEXT, "threshold": -0.01}]},
        "cells[0].threshold",
        id="theta-negative",
    ),
    pytest.param(
        {"revision": 1, "cells": [{**TEXT, "threshold": 0.5, "mode": "auto"}]},
        "cells[0].mode",
        id="other-cell-field",
    ),
    pytest.param(
        {"revision": 1, "cells": [{**TEXT, "threshold": 0.5}] * 2}, "cells[1]", id="duplicate-cell"
    ),
    pytest.param({"revision": 1, "cells": []}, "cells", id="no-cells"),
]


@pytest.mark.parametrize(("body", "field"), BAD_APPLY)
def test_calibration_api__bad_apply_body__400_names_the_field_draft_unchanged(
    draft: Any, editor: Any, client_as: Client, body: Any, field: str
) -> None:
    before = _state()
    response = client_as(editor).post(APPLY, body, format="json")
    error = assert_error(response, 400)
    assert any(f == field or f.startswith((f"{field}.", f"{field}[")) for f in _fields(error)), (
        error
    )
    assert _state() == before


def test_calibration_api__apply_to_a_cell_the_draft_lacks__400_names_it_draft_unchanged(
    draft: Any, editor: Any, client_as: Client
) -> None:
    # Given a draft without a "code" task type
    before = _state()

    # When a well-formed θ is applied to text/…, then to code/…
    body = {
        "revision": 1,
        "cells": [{**TEXT, "threshold": 0.5}, {**TEXT, "task_type": "code", "threshold": 0.5}],
    }
    response = client_as(editor).post(APPLY, body, format="json")

    # Then it is refused, naming the second cell, and nothing is written (as a calibration
    # naming a cell its table lacks is: one answer for the same mistake)
    error = assert_error(response, 400)
    assert _fields(error) == ["cells[1]"], error
    assert _state() == before


@pytest.mark.parametrize("hostile", HOSTILE_PARAMS)
@pytest.mark.parametrize(
    ("path", "body"),
    [(BASE, ALPHA_70), (APPLY, {"revision": 1, "cells": [{**TEXT, "threshold": 0.5}]})],
    ids=["compute", "apply"],
)
def test_calibration_api__hostile_json_value__400_names_field_nothing_changed(
    draft: Any, editor: Any, client_as: Client, path: str, body: Any, hostile: Hostile
) -> None:
    before = _state()
    response = client_as(editor).generic(
        "POST", path, with_field(body, "hours", hostile.raw), content_type="application/json"
    )
    assert_names(assert_error(response, 400, "validation_failed"), "hours", hostile)
    assert _state() == before


@pytest.mark.parametrize("path", [BASE, APPLY])
def test_calibration_api__body_over_the_limit__413_nothing_changed(
    draft: Any, editor: Any, client_as: Client, settings: Any, path: str
) -> None:
    before = _state()
    big = json.dumps({**ALPHA_70, "pad": "x" * (settings.MAX_REQUEST_BYTES + 10)})
    response = client_as(editor).generic("POST", path, big, content_type="application/json")
    assert_error(response, 413)
    assert _state() == before


@pytest.mark.parametrize("path", [BASE, APPLY])
def test_calibration_api__not_json__400(
    draft: Any, editor: Any, client_as: Client, path: str
) -> None:
    response = client_as(editor).generic("POST", path, "{target:", content_type="application/json")
    assert_error(response, 400)


def test_calibration_api__a_cell_the_table_lacks__400_names_cells_0(
    fleet: Any, viewer: Any, client_as: Client
) -> None:
    # Given a table without a "code" task type
    # When a calibration names text/… and code/…
    body = {**ALPHA_70, "cells": [{**TEXT, "task_type": "code"}, TEXT]}
    response = client_as(viewer).post(BASE, body, format="json")

    # Then it is a bad request naming the first cell, as docs/lab.md says
    error = assert_error(response, 400, "validation_failed")
    assert _fields(error) == ["cells[0]"], error


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        (APPLY, {"revision": 1, "cells": [{**TEXT, "threshold": 1.5}]}, "cells[0].threshold"),
        (
            BASE,
            {**ALPHA_70, "cells": [{"task_type": "text", "privacy_tier": "normal"}]},
            "cells[0].latency_budget",
        ),
    ],
    ids=["apply-theta", "compute-missing-dimension"],
)
def test_calibration_api__bad_list_item__field_written_with_brackets(
    draft: Any, editor: Any, client_as: Client, path: str, body: Any, field: str
) -> None:
    # Given a draft
    # When a list item of the body is bad
    response = client_as(editor).post(path, body, format="json")

    # Then the error names it as the rest of the API does: `cells[0].field`, never `cells.0.field`
    error = assert_error(response, 400, "validation_failed")
    assert _fields(error) == [field], error
