"""The autopilot's API and page: reads for viewers, changes for publishers; every bad input a
4xx naming the field with nothing stored (malformed, oversized, deep, NUL, out of range, unknown
cell, duplicate, unauthorised)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from autopilot.models import AutopilotCycle, AutopilotObjective
from routing_policies.models import AuditEntry, Device
from tests.autopilot_events import IMAGE, OBJECTIVE
from tests.hostile_json import HOSTILE_PARAMS, Hostile, assert_names, with_field

BASE = "/api/v1/fleets/fleet-a/autopilot"
Client = Callable[[Any], APIClient]


def _state() -> tuple[Any, ...]:
    return (
        AuditEntry.objects.count(),
        list(AutopilotObjective.objects.values()),
        AutopilotCycle.objects.count(),
    )


def _error(response: Any, status: int, code: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.content
    error: dict[str, Any] = response.json()["error"]
    if code is not None:
        assert error["code"] == code, error
    return error


def test_get__viewer__objective_off_by_default(fleet: Any, viewer: Any, client_as: Client) -> None:
    response = client_as(viewer).get(BASE)
    assert response.status_code == 200
    body = response.json()
    assert body["state"] == "off"
    assert body["objective"]["quality_floor"] == 0.85
    assert body["objective"]["delta"] == 0.05
    assert body["cycles"] == []
    assert not AutopilotObjective.objects.exists()  # reading stores nothing


def test_put__publisher__on_with_a_cycle_run_and_shown(
    reported: Device, fleet: Any, publisher: Any, client_as: Client
) -> None:
    client = client_as(publisher)
    body = {**OBJECTIVE, "run_at": "04:30", "time_zone": "Europe/Berlin"}
    response = client.put(BASE, body, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["state"] == "active"
    assert response.json()["next_run_at"] is not None
    run = client.post(f"{BASE}/run", format="json")
    assert run.status_code == 200, run.content
    (cycle,) = run.json()["cycles"]
    assert cycle["state"] == "rolling_out"
    assert cycle["cells"][0]["cell"] == IMAGE
    one = client.get(f"{BASE}/cycles/1")
    assert one.status_code == 200
    assert one.json()["rollout"] == cycle["rollout"]
    assert client.get(f"{BASE}/cycles/9").status_code == 404
    paused = client.post(f"{BASE}/pause")
    assert paused.json()["state"] == "paused"
    assert client.post(f"{BASE}/resume").json()["state"] == "active"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"quality_floor": 1.5}, "quality_floor"),
        ({"quality_floor": "0.9"}, "quality_floor"),
        ({"delta": 0}, "delta"),
        ({"max_step": -0.1}, "max_step"),
        ({"enabled": "yes"}, "enabled"),
        ({"holdback": 80}, "holdback"),
        ({"window_hours": 0}, "window_hours"),
        ({"run_at": "25:00"}, "run_at"),
        ({"run_at": "03:00\n"}, "run_at"),
        ({"time_zone": "Mars/Olympus"}, "time_zone"),
        ({"cells": ["image/interactive"]}, "cells[0]"),
        ({"cells": [IMAGE, IMAGE]}, "cells[1]"),
        ({"quiet_periods": [{"from": "01:00", "to": "01:00"}]}, "quiet_periods[0].to"),
        ({"quiet_periods": [{"from": "01:00"}]}, "quiet_periods[0].to"),
        ({"quiet_periods": [{"from": "01:00", "to": "02:00", "x": 1}]}, "quiet_periods[0].x"),
        ({"quiet_periods": [{"from": "00:00", "to": "01:00"}] * 13}, "quiet_periods"),
        ({"cells": [f"t{i}/interactive/normal" for i in range(4097)]}, "cells"),
        ({"cost_ceiling_per_day": -1}, "cost_ceiling_per_day"),
        ({"cost_ceiling_per_day": 1e10}, "cost_ceiling_per_day"),
        ({"cost_ceiling_per_day": "5"}, "cost_ceiling_per_day"),
        ({"cost_ceiling_per_day": {"usd": 5}}, "cost_ceiling_per_day"),
        ({"excluded_cells": ["image"]}, "excluded_cells[0]"),
        ({"excluded_cells": [IMAGE, IMAGE]}, "excluded_cells[1]"),
        ({"excluded_cells": IMAGE}, "excluded_cells"),
        ({"excluded_cells": [[IMAGE]]}, "excluded_cells[0]"),
        ({"excluded_cells": ["image/interactive/nor\u0000mal"]}, "excluded_cells[0]"),
        ({"quiet_periods": [{"from": "24:00", "to": "01:00"}]}, "quiet_periods[0].from"),
        ({"quiet_periods": [{"from": "01:00\u0000", "to": "02:00"}]}, "quiet_periods[0].from"),
        ({"quiet_periods": {"from": "01:00", "to": "02:00"}}, "quiet_periods"),
        ({"quiet_periods": ["01:00-02:00"]}, "quiet_periods[0]"),
        ({"color": "red"}, "color"),
    ],
)
def test_put__bad_field__400_naming_it_nothing_stored(
    fleet: Any, publisher: Any, client_as: Client, body: dict[str, Any], field: str
) -> None:
    before = _state()
    response = client_as(publisher).put(BASE, body, format="json")
    error = _error(response, 400)
    fields = [detail["field"] for detail in error["details"]]
    assert field in fields, error
    assert _state() == before


def test_put__every_bound__stored_shown_and_cleared(
    fleet: Any, publisher: Any, client_as: Client
) -> None:
    client = client_as(publisher)
    bounds = {
        "cost_ceiling_per_day": 12.5,
        "quiet_periods": [{"from": "22:00", "to": "06:00"}, {"from": "12:00", "to": "13:30"}],
        "excluded_cells": [IMAGE],
    }
    response = client.put(BASE, bounds, format="json")
    assert response.status_code == 200, response.content
    shown = client.get(BASE).json()["objective"]
    assert {name: shown[name] for name in bounds} == bounds
    entry = AuditEntry.objects.filter(action="autopilot.objective_set").latest("id")
    assert entry.before["excluded_cells"] == []
    assert entry.after["excluded_cells"] == [IMAGE]

    # A null ceiling and empty lists clear them
    cleared = client.put(
        BASE,
        {"cost_ceiling_per_day": None, "quiet_periods": [], "excluded_cells": []},
        format="json",
    )
    assert cleared.status_code == 200, cleared.content
    objective = cleared.json()["objective"]
    assert objective["cost_ceiling_per_day"] is None
    assert objective["quiet_periods"] == []
    assert objective["excluded_cells"] == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"cells": ["code/interactive/normal"]}, "cells[0]"),
        ({"excluded_cells": [IMAGE, "x/y/z"]}, "excluded_cells[1]"),
    ],
)
def test_put__a_cell_the_fleet_lacks__409_naming_it_nothing_stored(
    fleet: Any, publisher: Any, client_as: Client, body: dict[str, Any], field: str
) -> None:
    before = _state()
    error = _error(client_as(publisher).put(BASE, body, format="json"), 409, "no_such_cell")
    assert [detail["field"] for detail in error["details"]] == [field]
    assert _state() == before


@pytest.mark.parametrize("hostile", HOSTILE_PARAMS)
def test_put__hostile_json__400_naming_the_field_nothing_stored(
    fleet: Any, publisher: Any, client_as: Client, hostile: Hostile
) -> None:
    before = _state()
    response = client_as(publisher).generic(
        "PUT",
        BASE,
        with_field({"max_step": 0.05}, "margin", hostile.raw),
        content_type="application/json",
    )
    assert_names(_error(response, 400), "margin", hostile)
    assert _state() == before


def test_put__over_the_body_limit__413(
    fleet: Any, publisher: Any, client_as: Client, settings: Any
) -> None:
    before = _state()
    big = json.dumps({"margin": 0.01, "pad": "x" * (settings.MAX_REQUEST_BYTES + 10)})
    response = client_as(publisher).generic("PUT", BASE, big, content_type="application/json")
    _error(response, 413)
    assert _state() == before


@pytest.mark.parametrize("body", ["[]", "null", '"x"', "{margin:"])
def test_put__not_an_object__400(fleet: Any, publisher: Any, client_as: Client, body: str) -> None:
    response = client_as(publisher).generic("PUT", BASE, body, content_type="application/json")
    _error(response, 400)
    assert not AutopilotObjective.objects.exists()


@pytest.mark.parametrize("path", ["", "/pause", "/resume", "/run"])
def test_changes__editor_or_anonymous__403_nothing_stored(
    fleet: Any, editor: Any, client_as: Client, path: str
) -> None:
    before = _state()
    method = "put" if not path else "post"
    assert getattr(client_as(editor), method)(f"{BASE}{path}", {}, format="json").status_code == 403
    assert getattr(APIClient(), method)(f"{BASE}{path}", {}, format="json").status_code in (
        401,
        403,
    )
    assert _state() == before


def test_actions__a_field_sent__400_naming_it(
    fleet: Any, publisher: Any, client_as: Client
) -> None:
    response = client_as(publisher).post(f"{BASE}/pause", {"now": True}, format="json")
    assert [d["field"] for d in _error(response, 400)["details"]] == ["now"]


def test_pause__off__409(fleet: Any, publisher: Any, client_as: Client) -> None:
    _error(client_as(publisher).post(f"{BASE}/pause"), 409, "autopilot_off")


def test_put__on_twice__second_is_a_no_op_for_the_state(
    reported: Device, fleet: Any, publisher: Any, client_as: Client
) -> None:
    client = client_as(publisher)
    assert client.put(BASE, OBJECTIVE, format="json").status_code == 200
    again = client.put(BASE, OBJECTIVE, format="json")
    assert again.status_code == 200
    assert again.json()["state"] == "active"
    assert AutopilotObjective.objects.count() == 1


def test_unknown_fleet__404(publisher: Any, client_as: Client, db: None) -> None:
    assert client_as(publisher).get("/api/v1/fleets/nope/autopilot").status_code == 404
    assert (
        client_as(publisher).put("/api/v1/fleets/nope/autopilot", {}, format="json").status_code
        == 404
    )


def test_page__viewer_sees_it_publisher_sets_it(
    reported: Device, fleet: Any, viewer: Any, publisher: Any, client: Any
) -> None:
    client.force_login(viewer)
    page = client.get("/fleets/fleet-a/lab/autopilot/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "θ autopilot" in html
    assert 'href="/fleets/fleet-a/lab/autopilot/"' in html  # in the fleet's navigation
    assert "Set the objective" not in html  # a viewer has no controls
    client.force_login(publisher)
    posted = client.post(
        "/fleets/fleet-a/lab/autopilot/objective/",
        {
            "enabled": "true",
            "quality_floor": "0.5",
            "quality_resolution": "0.04",
            "cells": [IMAGE],
            "run_at": "03:00",
            "time_zone": "UTC",
            "p95_within_budget": "true",
        },
    )
    assert posted.status_code == 302, posted.content.decode()[:2000]
    assert AutopilotObjective.objects.get().state == "active"
    bad = client.post("/fleets/fleet-a/lab/autopilot/objective/", {"quality_floor": "2"})
    assert bad.status_code == 400
    assert "quality_floor" in bad.content.decode()
    run = client.post("/fleets/fleet-a/lab/autopilot/control/", {"action": "run"})
    assert run.status_code == 302
    shown = client.get("/fleets/fleet-a/lab/autopilot/").content.decode()
    assert "Cycle 1" in shown
    assert "predicted" in shown


def test_cycle__number_beyond_any_integer__404(fleet: Any, viewer: Any, client_as: Client) -> None:
    response = client_as(viewer).get(f"{BASE}/cycles/99999999999999999999999")
    assert response.status_code == 404


PAGE_SET = "/fleets/fleet-a/lab/autopilot/objective/"


def test_page__every_bound_edited_and_cleared(fleet: Any, publisher: Any, client: Any) -> None:
    client.force_login(publisher)
    # The form posts a blank beside each group of boxes (none ticked is an empty list)
    posted = client.post(
        PAGE_SET,
        {
            "cost_ceiling_per_day": "7.5",
            "quiet_periods": "22:00–06:00\r\n\r\n 12:00-13:30 ",
            "cells": ["", IMAGE],
            "excluded_cells": ["", "text/interactive/normal"],
        },
    )
    assert posted.status_code == 302, posted.content.decode()[:2000]
    objective = AutopilotObjective.objects.get()
    assert objective.cost_ceiling_per_day == 7.5
    assert objective.quiet_periods == [
        {"from": "22:00", "to": "06:00"},
        {"from": "12:00", "to": "13:30"},
    ]
    assert objective.cells == [IMAGE]
    assert objective.excluded_cells == ["text/interactive/normal"]
    page = client.get("/fleets/fleet-a/lab/autopilot/").content.decode()
    assert "22:00–06:00\n12:00–13:30</textarea>" in page
    assert 'name="excluded_cells" value="text/interactive/normal" checked' in page
    assert "never text/interactive/normal" in page
    assert "cloud cost ≤ 7.5/day" in page

    # Blank: no ceiling, no quiet period, every cell, none excluded
    cleared = client.post(
        PAGE_SET,
        {"cost_ceiling_per_day": "", "quiet_periods": "", "cells": "", "excluded_cells": ""},
    )
    assert cleared.status_code == 302, cleared.content.decode()[:2000]
    objective.refresh_from_db()
    assert objective.cost_ceiling_per_day is None
    assert objective.quiet_periods == []
    assert objective.cells == []
    assert objective.excluded_cells == []


@pytest.mark.parametrize(
    ("form", "field"),
    [
        ({"quiet_periods": "25:00–06:00"}, "quiet_periods[0].from"),
        ({"quiet_periods": "22:00"}, "quiet_periods[0].to"),
        ({"quiet_periods": "22:00–06:00\n06:00–06:00"}, "quiet_periods[1].to"),
        ({"quiet_periods": "22:00–06:0\x00"}, "quiet_periods[0].to"),
        ({"quiet_periods": "\n".join(["01:00–02:00"] * 13)}, "quiet_periods"),
        ({"cost_ceiling_per_day": "-3"}, "cost_ceiling_per_day"),
        ({"cost_ceiling_per_day": "lots"}, "cost_ceiling_per_day"),
        ({"excluded_cells": ["", "image"]}, "excluded_cells[0]"),
        ({"excluded_cells": ["", IMAGE, IMAGE]}, "excluded_cells[1]"),
    ],
)
def test_page__bad_bound__400_naming_the_field_nothing_stored(
    fleet: Any, publisher: Any, client: Any, form: dict[str, Any], field: str
) -> None:
    client.force_login(publisher)
    before = _state()
    refused = client.post(PAGE_SET, form)
    assert refused.status_code == 400
    html = refused.content.decode()
    assert field in html
    assert "The objective was not changed." in html
    assert _state() == before


def test_page__excluded_cell_the_fleet_lacks__409_nothing_stored(
    fleet: Any, publisher: Any, client: Any
) -> None:
    client.force_login(publisher)
    before = _state()
    refused = client.post(PAGE_SET, {"excluded_cells": ["", "x/y/z"]})
    assert refused.status_code == 409
    assert "excluded_cells[0]" in refused.content.decode()
    assert _state() == before
