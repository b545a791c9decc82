"""Backtests per segment (docs/lab.md, "Per segment"): only the events of the segment's
devices are replayed, each version as a device of the segment runs it (its override); the
figures equal an independent computation on generated events."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from controlplane.exceptions import Conflict
from edge_sdk.decision import Cell
from lab.backtests.models import Backtest, BacktestStatus
from lab.backtests.services import backtest_run, backtest_start
from lab.calibration.quality import KeptGroups, kept_groups, wilson
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
from telemetry.rollups import SCORE_BINS, score_bin
from tests.factories import decided_events
from tests.lab_events import (
    IMAGE_KEY,
    NPU_PHONES,
    PHONES,
    event_key,
    ingest,
    on_phones,
    phones_with_segments,
    refined_events,
    replayed_figures,
    stored_decision,
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


# --- device quality per segment ----------------------------------------------------------------


def _reports(events: list[dict[str, Any]]) -> tuple[dict[int, int], dict[int, int], int]:
    """Refine reports per score bin and those whose draft the cloud kept, counted from what
    the devices sent, and how many of them were shadow refines of a device answer."""
    reported: dict[int, int] = {}
    kept: dict[int, int] = {}
    shadow = 0
    for event in events:
        if "refine_changed" not in event:
            continue
        index = score_bin(event["score"])
        reported[index] = reported.get(index, 0) + 1
        kept[index] = kept.get(index, 0) + (not event["refine_changed"])
        shadow += bool(event.get("shadow_refine"))
    return reported, kept, shadow


def _deciles(reported: dict[int, int], kept: dict[int, int]) -> list[tuple[int, int]]:
    """(reported, kept) per score decile that has reports, by score."""
    out = []
    for decile in range(10):
        bins = range(decile * SCORE_BINS // 10, (decile + 1) * SCORE_BINS // 10)
        count = sum(reported.get(b, 0) for b in bins)
        if count:
            out.append((count, sum(kept.get(b, 0) for b in bins)))
    return out


def _quality_at(
    cell: Cell, threshold: float, events: list[Event], groups: KeptGroups
) -> tuple[float, int]:
    """The predicted device quality the long way: each stored event decided at `threshold`;
    a device task with a score counts with its score group's kept rate."""
    at = dataclasses.replace(cell, threshold=threshold)
    rates = []
    for event in events:
        decision = stored_decision(at, event)
        if decision.route == "device" and decision.score is not None:
            reported, kept = groups.groups[groups.group_of[score_bin(decision.score)]]
            rates.append(kept / reported)
    return sum(rates) / len(rates), len(rates)


def _calibrate(fleet: Any, kind: str, value: float, segment: str | None) -> dict[str, Any]:
    target = Target(kind=kind, value=value)
    return calibration_out(
        calibration_compute(fleet=fleet, target=target, cells=[IMAGE_KEY], segment=segment)
    )


def test_calibration__segment_quality_target__its_own_draft_reports(
    fleet: Any, publisher: Any, phones: None
) -> None:
    # Given 2,400 events of the draft-refine image cell from the 20 phones, through ingest,
    # each draft-refine (and a third of the device answers) reporting whether the cloud kept
    # the draft
    sent = refined_events(2400, devices=PHONES, seed=12)
    ingest(fleet, sent)
    npu_sent = [e for e in sent if e["device_id"] in NPU_PHONES]
    reported, kept, shadow = _reports(npu_sent)
    groups = kept_groups(
        {str(b): n for b, n in reported.items()},
        {str(b): n for b, n in kept.items()},
        reports=sum(reported.values()),
    )
    # and a quality floor inside the range the segment's curve spans (an α calibration's)
    curve = _calibrate(fleet, "alpha", 0.5, "npu")["cells"][0]["curve"]
    qualities = [p["device_quality"] for p in curve if p["device_quality"] is not None]
    floor = round((min(qualities) + max(qualities)) / 2, 3)

    # When the image cell is calibrated for that device quality on segment npu
    (cell,) = _calibrate(fleet, "quality", floor, "npu")["cells"]

    # Then its score → draft kept is the NPU phones' reports alone, as counted from what they
    # sent: every report, the shadow refines apart, the kept rate and each decile
    quality = cell["quality"]
    assert quality["refused"] == ""
    assert quality["reports"] == quality["scored_reports"] == sum(reported.values())
    assert quality["device_reports"] == shadow
    assert quality["draft_kept_rate"] == pytest.approx(sum(kept.values()) / sum(reported.values()))
    decile_counts = [(p["reported"], p["kept"]) for p in quality["curve"]]
    assert decile_counts == _deciles(reported, kept)
    for point in quality["curve"]:
        assert (point["low"], point["high"]) == wilson(point["kept"], point["reported"])
    # and the θ chosen reaches the floor with the quality a direct computation predicts on the
    # NPU phones' stored events of the cell, pooling their reports
    assert cell["reached"]
    chosen = cell["chosen"]
    assert chosen["device_quality"] >= floor
    npu_events = [
        e
        for e in Event.objects.filter(fleet=fleet, device_id__in=NPU_PHONES)
        if event_key(e) == IMAGE_KEY
    ]
    assert cell["events"] == len(npu_events) == len(npu_sent)
    v1 = table_cells(version_table(version=fleet.versions.get(number=1)))[IMAGE_KEY]
    expected, judged = _quality_at(v1, chosen["threshold"], npu_events, groups)
    assert chosen["device_quality"] == pytest.approx(expected)
    assert chosen["device_judged"] == judged
    assert chosen["device_quality_low"] <= chosen["device_quality"] <= chosen["device_quality_high"]
    # while the whole fleet's calibration reads every phone's reports (not the segment's)
    (whole,) = _calibrate(fleet, "quality", floor, None)["cells"]
    assert whole["quality"]["reports"] == sum("refine_changed" in e for e in sent)
    assert whole["quality"]["reports"] > quality["reports"]


def test_calibration__segment_with_too_few_draft_reports__refused_as_the_fleet_is(
    fleet: Any, publisher: Any, phones: None
) -> None:
    # Given the image cell's events from every phone, but of the NPU phones' only 40 report
    # whether the cloud kept the draft (the fleet has plenty)
    sent = refined_events(1600, devices=PHONES, seed=13)
    npu_reports = 0
    for event in sent:
        if event["device_id"] in NPU_PHONES and "refine_changed" in event:
            npu_reports += 1
            if npu_reports > 40:
                del event["refine_changed"]
                event.pop("shadow_refine", None)
    ingest(fleet, sent)

    # When the cell is calibrated for a device quality on segment npu
    with pytest.raises(Conflict) as refused:
        _calibrate(fleet, "quality", 0.6, "npu")

    # Then it is refused as the fleet's is without reports: naming the cell, the segment's
    # 40 reports and the 100 it needs
    assert refused.value.code == "too_few_quality_reports"
    (detail,) = refused.value.details
    assert detail["field"] == "cells"
    assert "image/interactive/normal" in detail["message"]
    assert "40 scored reports" in detail["message"]
    assert "100 needed" in detail["message"]
    # while the whole fleet's calibration has what it needs, and an α target for the segment
    # still answers, saying why its quality is not predicted
    assert _calibrate(fleet, "quality", 0.6, None)["cells"][0]["quality"]["refused"] == ""
    (alpha,) = _calibrate(fleet, "alpha", 0.5, "npu")["cells"]
    assert "40 scored reports" in alpha["quality"]["refused"]
    assert alpha["chosen"]["device_quality"] is None
