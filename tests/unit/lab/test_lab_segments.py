"""Backtests per segment (docs/lab.md, "Per segment"): only the events of the segment's
devices are replayed, each version as a device of the segment runs it (its override); the
figures equal an independent computation on generated events."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from edge_sdk.decision import Cell
from lab.backtests.models import Backtest, BacktestStatus
from lab.backtests.services import backtest_run, backtest_start
from lab.calibration.selectors import calibration_compute, calibration_out
from lab.calibration.services import calibration_apply
from lab.calibration.targets import Target
from routing_policies.models import Device
from routing_policies.policies.sdk_cells import table_cells
from routing_policies.pricing import CloudPrice
from routing_policies.selectors import version_table
from routing_policies.services import (
    device_revoke,
    policy_draft_create,
    policy_draft_override_set,
    policy_version_publish,
)
from telemetry.models import Event
from tests.factories import decided_events
from tests.lab_events import (
    NPU_PHONES,
    PHONES,
    event_key,
    on_phones,
    phones_with_segments,
    replayed_figures,
    stored_route,
)

pytestmark = pytest.mark.django_db

TEXT = ("text", "background", "normal")  # a cell the NPU phones report (decided_events)
TEXT_LABEL = "text/background/normal"
ROUTES = ("device", "cloud", "draft_refine")


def _run(actor: Any, fleet: Any, **data: Any) -> dict[str, Any]:
    backtest, created = backtest_start(actor=actor, fleet=fleet, **data)
    assert created
    done = backtest_run(backtest_id=backtest.pk)
    assert done is not None
    assert done.status == BacktestStatus.DONE, done.error
    assert done.result is not None
    return done.result


@pytest.fixture
def phones(fleet: Any, fleet_key: str, publisher: Any) -> None:
    """phone-0 … phone-19 enrolled with their accelerators; segments npu, gpu-or-npu, cars."""
    phones_with_segments(fleet=fleet, fleet_key=fleet_key, actor=publisher)


def _draft_overriding_npu(fleet: Any, publisher: Any, threshold: float) -> Any:
    """A draft whose override for `npu` sets text/interactive/normal's θ."""
    draft = policy_draft_create(actor=publisher, fleet=fleet)
    return policy_draft_override_set(
        actor=publisher,
        fleet=fleet,
        revision=draft.revision,
        segment="npu",
        cells={TEXT_LABEL: {"threshold": threshold}},
    )


def test_backtest__segment__only_its_devices_events_under_its_override(
    fleet: Any, publisher: Any, phones: None
) -> None:
    # Given 1,200 events of v1 from 20 phones (5 with an NPU) and 60 more from a device the
    # registry does not know, and a draft whose override for npu raises text's θ to 0.95
    v1 = table_cells(version_table(version=fleet.versions.get(number=1)))
    stored = on_phones(decided_events(fleet, v1, count=1200, store=False), PHONES)
    strangers = decided_events(fleet, v1, count=60, seed=9, store=False)
    for event in strangers:
        event.device_id = "stranger"
    Event.objects.bulk_create(strangers)
    draft = _draft_overriding_npu(fleet, publisher, 0.95)

    # When the draft is backtested for segment npu
    result = _run(publisher, fleet, version="draft", revision=draft.revision, segment="npu")

    # Then it replays exactly the NPU phones' events: what happened, the stable version and
    # the draft as an NPU phone runs it (text's θ 0.95, every other cell the base one) equal an
    # independent loop over those events
    npu_events = [event for event in stored if event.device_id in NPU_PHONES]
    assert 0 < len(npu_events) < len(stored)
    assert result["events"] == len(npu_events)
    overall = result["overall"]
    assert overall["observed"]["routes"] == {
        route: sum(e.route == route for e in npu_events) for route in ROUTES
    }
    npu_table = version_table(version=draft)
    npu_table[TEXT] = {**npu_table[TEXT], "threshold": 0.95}
    expected = replayed_figures(table_cells(npu_table), npu_events)
    subject = overall["subject"]
    assert subject["routes"] == expected["routes"]
    assert subject["alpha"] == pytest.approx(expected["alpha"])
    assert (subject["cloud_calls"], subject["cloud_tokens"]) == (
        expected["calls"],
        expected["tokens"],
    )
    assert subject["cost"] == pytest.approx(
        CloudPrice.of_fleet(fleet).cost(tokens=expected["tokens"], calls=expected["calls"])
    )
    stable = replayed_figures(v1, npu_events)
    assert overall["stable"]["routes"] == stable["routes"]
    # and the override made a difference a user would see (the check above is not vacuous)
    assert subject["routes"] != overall["stable"]["routes"]
    # and the result says which segment, its rule, its devices and what its override changes
    assert result["segment"] == {
        "name": "npu",
        "rule": {"attribute": "accelerator", "equals": "npu"},
        "devices": len(NPU_PHONES),
        "subject_overridden": [TEXT_LABEL],
        "versions_overriding": [],
    }
    # and the self-check still reproduces v1's routing on those events
    assert result["self_check"]["agreement"] == 1.0


def test_backtest__segment_of_a_published_override__self_check_replays_the_resolved_table(
    fleet: Any, publisher: Any, phones: None
) -> None:
    # Given v2, whose override for npu sets text's θ to 0.95, and events each phone decided
    # with its own table: NPU phones with the override, the others with the base cells
    draft = _draft_overriding_npu(fleet, publisher, 0.95)
    policy_version_publish(actor=publisher, fleet=fleet, revision=draft.revision, note="npu θ")
    base = version_table(version=fleet.versions.get(number=2))
    npu_table = {**base, TEXT: {**base[TEXT], "threshold": 0.95}}
    as_npu = decided_events(fleet, table_cells(npu_table), count=800, version=2, store=False)
    as_base = decided_events(fleet, table_cells(base), count=800, seed=2, version=2, store=False)
    on_phones(as_npu[:200], NPU_PHONES)
    on_phones(as_base[:600], set(PHONES) - NPU_PHONES)

    # When v2 is backtested for segment npu, and for the whole fleet
    segment = _run(publisher, fleet, version=2, segment="npu")
    whole = _run(publisher, fleet, version=2)

    # Then replaying v2 as an NPU phone runs it reproduces every NPU phone's decision
    assert segment["self_check"]["agreement"] == 1.0
    assert segment["self_check"]["mismatches"] == []
    assert segment["segment"]["versions_overriding"] == [2]
    # while the whole fleet's backtest (base cells for everyone) cannot reproduce them all:
    # the NPU phones ran the override
    assert whole["self_check"]["agreement"] < 1.0


def test_backtest__segment_without_an_override__base_cells_and_its_events_only(
    fleet: Any, publisher: Any, phones: None
) -> None:
    # Given events of v1 from every phone
    v1 = table_cells(version_table(version=fleet.versions.get(number=1)))
    stored = on_phones(decided_events(fleet, v1, count=600, seed=4, store=False), PHONES)

    # When v1 is backtested for gpu-or-npu (no version overrides it)
    result = _run(publisher, fleet, version=1, segment="gpu-or-npu")

    # Then it replays the GPU and NPU phones' events with v1's own cells
    wanted = [e for e in stored if int(e.device_id.split("-")[1]) % 4 in (0, 1)]
    assert result["events"] == len(wanted)
    assert result["overall"]["subject"]["routes"] == replayed_figures(v1, wanted)["routes"]
    assert result["segment"]["devices"] == 10
    assert result["segment"]["subject_overridden"] == []


def test_backtest__same_request_with_a_segment__kept_apart_from_the_whole_fleet(
    fleet: Any, publisher: Any, phones: None
) -> None:
    # Given a backtest of v1 for the whole fleet
    whole, created = backtest_start(actor=publisher, fleet=fleet, version=1)
    assert created

    # When the same is asked for segment npu, twice
    first, created_first = backtest_start(actor=publisher, fleet=fleet, version=1, segment="npu")
    again, created_again = backtest_start(actor=publisher, fleet=fleet, version=1, segment="npu")

    # Then the segment's is a backtest of its own, and asking again answers it
    assert created_first
    assert not created_again
    assert first.pk == again.pk != whole.pk
    assert Backtest.objects.filter(fleet=fleet).count() == 2


# --- calibration per segment -------------------------------------------------------------------


def _alpha_at(cell: Cell, threshold: float, events: list[Event]) -> float:
    """α of `events` decided by `cell` at θ `threshold`, independently of the sweep."""
    at = dataclasses.replace(cell, threshold=threshold)
    return sum(stored_route(at, event) == "device" for event in events) / len(events)


def test_calibration__segment__swept_on_its_devices_events_at_its_override(
    fleet: Any, publisher: Any, phones: None
) -> None:
    # Given events of v1 from every phone, and a draft whose override for npu sets text's θ
    v1 = table_cells(version_table(version=fleet.versions.get(number=1)))
    stored = on_phones(decided_events(fleet, v1, count=2400, seed=6, store=False), PHONES)
    _draft_overriding_npu(fleet, publisher, 0.95)

    # When the draft's text cell is calibrated for α 50% on segment npu, and on the fleet
    target = Target(kind="alpha", value=0.5)
    segment = calibration_out(
        calibration_compute(fleet=fleet, target=target, cells=[TEXT], segment="npu")
    )
    whole = calibration_out(calibration_compute(fleet=fleet, target=target, cells=[TEXT]))

    # Then the segment's sweep counts only the NPU phones' events of the cell, starts from
    # the override's θ, and its α at θ now, at the chosen θ and along the curve equal an
    # independent replay of those events
    npu_text = [e for e in stored if e.device_id in NPU_PHONES and event_key(e) == TEXT]
    all_text = [e for e in stored if event_key(e) == TEXT]
    (cell,) = segment["cells"]
    assert cell["events"] == len(npu_text) < whole["cells"][0]["events"] == len(all_text)
    assert cell["current_threshold"] == 0.95
    assert whole["cells"][0]["current_threshold"] == v1[TEXT].threshold
    assert cell["current"]["alpha"] == pytest.approx(_alpha_at(v1[TEXT], 0.95, npu_text))
    chosen = cell["chosen"]["threshold"]
    assert cell["chosen"]["alpha"] == pytest.approx(_alpha_at(v1[TEXT], chosen, npu_text))
    for point in cell["curve"][::10]:
        assert point["alpha"] == pytest.approx(_alpha_at(v1[TEXT], point["threshold"], npu_text)), (
            point["threshold"]
        )
    # and the result names the segment and what its override changes
    assert segment["segment"] == {
        "name": "npu",
        "rule": {"attribute": "accelerator", "equals": "npu"},
        "devices": len(NPU_PHONES),
        "overridden": [TEXT_LABEL],
    }
    assert whole["segment"] is None


def test_calibration_apply__segment__theta_written_into_its_override_and_backtested(
    fleet: Any, publisher: Any, phones: None
) -> None:
    # Given a draft whose override for npu sets text's θ 0.95
    draft = _draft_overriding_npu(fleet, publisher, 0.95)
    base_theta = version_table(version=draft)[TEXT]["threshold"]

    # When a calibration of the segment writes θ 0.7 for text and 0.4 for image/background
    image = ("image", "background", "normal")
    draft, backtest = calibration_apply(
        actor=publisher,
        fleet=fleet,
        revision=draft.revision,
        thresholds=[(TEXT, 0.7), (image, 0.4)],
        segment="npu",
    )

    # Then the segment's override carries both θs, the cells themselves are unchanged, and
    # the backtest started is the segment's
    draft.refresh_from_db()
    (override,) = draft.overrides
    assert override["segment"] == "npu"
    assert override["cells"] == {
        "image/background/normal": {"threshold": 0.4},
        TEXT_LABEL: {"threshold": 0.7},
    }
    assert version_table(version=draft)[TEXT]["threshold"] == base_theta
    assert backtest is not None
    assert backtest.filters["segment"]["name"] == "npu"
    assert sorted(backtest.filters["segment"]["overridden"]) == sorted(
        ["image/background/normal", TEXT_LABEL]
    )


def test_backtest__segment_behind_another_override__devices_running_another_table_counted(
    fleet: Any, publisher: Any, phones: None
) -> None:
    # Given a draft overriding text for npu, and for gpu-or-npu ahead of it (position 1):
    # an NPU phone is in both, so it takes gpu-or-npu's fields for text
    draft = _draft_overriding_npu(fleet, publisher, 0.95)
    draft = policy_draft_override_set(
        actor=publisher,
        fleet=fleet,
        revision=draft.revision,
        segment="gpu-or-npu",
        cells={TEXT_LABEL: {"threshold": 0.3}},
        position=1,
    )

    # When the draft is backtested for npu
    backtest, _ = backtest_start(
        actor=publisher, fleet=fleet, version="draft", revision=draft.revision, segment="npu"
    )

    # Then the backtest says all 5 NPU phones run another table than npu's own
    assert backtest.filters["segment"]["devices_other_table"] == len(NPU_PHONES)
    # and v1, which overrides nothing, has none
    of_v1 = backtest_start(actor=publisher, fleet=fleet, version=1, segment="npu")[0]
    assert of_v1.filters["segment"]["devices_other_table"] == 0


def test_backtest__segment__a_revoked_device_keeps_its_events_a_changed_one_moves(
    fleet: Any, publisher: Any, phones: None
) -> None:
    # Given events of v1 from every phone; then phone-0 (NPU) is revoked and phone-1 (GPU)
    # reports an NPU at its next hello
    v1 = table_cells(version_table(version=fleet.versions.get(number=1)))
    stored = on_phones(decided_events(fleet, v1, count=800, seed=8, store=False), PHONES)
    device_revoke(actor=publisher, device=Device.objects.get(fleet=fleet, device_id="phone-0"))
    Device.objects.filter(fleet=fleet, device_id="phone-1").update(
        attributes={"accelerator": "npu"}
    )

    # When v1 is backtested for npu
    result = _run(publisher, fleet, version=1, segment="npu")

    # Then the members are the NPU phones as the registry has them now: the revoked one with
    # its events, and phone-1 with all of its events, recorded before it said NPU
    members = NPU_PHONES | {"phone-1"}
    assert result["segment"]["devices"] == len(members)
    assert result["events"] == sum(e.device_id in members for e in stored)
    assert (
        result["overall"]["subject"]["routes"]
        == replayed_figures(v1, [e for e in stored if e.device_id in members])["routes"]
    )
