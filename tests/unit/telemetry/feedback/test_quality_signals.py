"""The quality signals of PROTOCOL.md extensions on events: `refine_changed`,
`refine_edit_ratio`, `quality`, `shadow_refine`. Each rule refuses the batch naming the event
and field; accepted signals are stored raw and summed in every rollup level, through
compaction, into the figures (draft-kept rate, mean quality, the score → kept curve)."""

import json
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from routing_policies.models import Device
from telemetry.dashboards.cost import cloud_work
from telemetry.ingest.services import landed_batches_process, telemetry_batch_ingest
from telemetry.models import Event, EventKey, LandedBatch, MinuteRollup
from telemetry.rollups import LEVELS, Figures, Level, read_rows
from telemetry.rollups.maintenance import rollups_compact
from telemetry.rollups.sketch import score_bin
from tests.factories import iso, make_event

pytestmark = pytest.mark.django_db

URL = "/api/v1/telemetry"
METRICS = "/api/v1/metrics/fleets/fleet-a/"


def _post(client: APIClient, events: list[dict[str, Any]]) -> Any:
    return client.post(URL, {"events": events}, format="json")


def _nothing_stored() -> bool:
    return not (LandedBatch.objects.exists() or EventKey.objects.exists() or Event.objects.exists())


def _ingest(device: Device, events: list[dict[str, Any]]) -> None:
    for start in range(0, len(events), 1000):
        body = json.dumps({"events": events[start : start + 1000]}).encode()
        telemetry_batch_ingest(device=device, body=body)
    landed_batches_process()


def _figures(level: Level, fleet_id: int) -> Figures:
    figures = Figures()
    since = datetime.now(UTC) - timedelta(hours=3)
    for row in read_rows(level, fleet_id=fleet_id, since=since, latency=True, scores=True):
        figures.add(row)
    return figures


# --- validation --------------------------------------------------------------------------------

REFINED = {"route": "draft_refine", "decided_by": "threshold"}
SHADOW = {"route": "device", "shadow_refine": True}

# (what is wrong, the event's overrides, the field named)
REFUSALS = [
    (
        "refine_changed on a cloud event",
        {"route": "cloud", "refine_changed": True},
        "refine_changed",
    ),
    (
        "refine_changed on a device event",
        {"route": "device", "refine_changed": False},
        "refine_changed",
    ),
    (
        "refine_changed with shadow_refine false",
        {"route": "device", "shadow_refine": False, "refine_changed": True},
        "refine_changed",
    ),
    ("refine_changed not a boolean", {**REFINED, "refine_changed": "yes"}, "refine_changed"),
    ("refine_changed null is fine, 1 is not", {**REFINED, "refine_changed": 1}, "refine_changed"),
    ("edit ratio alone", {**REFINED, "refine_edit_ratio": 0.2}, "refine_edit_ratio"),
    (
        "edit ratio of a kept draft",
        {**REFINED, "refine_changed": False, "refine_edit_ratio": 0.3},
        "refine_edit_ratio",
    ),
    (
        "edit ratio over 1",
        {**REFINED, "refine_changed": True, "refine_edit_ratio": 1.5},
        "refine_edit_ratio",
    ),
    (
        "edit ratio below 0",
        {**REFINED, "refine_changed": True, "refine_edit_ratio": -0.1},
        "refine_edit_ratio",
    ),
    (
        "edit ratio a string",
        {**REFINED, "refine_changed": True, "refine_edit_ratio": "0.5"},
        "refine_edit_ratio",
    ),
    ("quality over 1", {"quality": 1.01}, "quality"),
    ("quality below 0", {"quality": -0.5}, "quality"),
    ("quality a boolean", {"quality": True}, "quality"),
    ("quality a string", {"quality": "good"}, "quality"),
    ("shadow refine of a cloud event", {"route": "cloud", "shadow_refine": True}, "shadow_refine"),
    ("shadow refine of a refined event", {**REFINED, "shadow_refine": True}, "shadow_refine"),
    ("shadow refine of a cache hit", {**SHADOW, "cache_hit": True}, "shadow_refine"),
    ("shadow refine not a boolean", {"route": "device", "shadow_refine": "true"}, "shadow_refine"),
]


@pytest.mark.parametrize(
    ("overrides", "field"), [case[1:] for case in REFUSALS], ids=[case[0] for case in REFUSALS]
)
def test_telemetry_ingest__bad_quality_signal__400_names_event_and_field_nothing_stored(
    phone_client: APIClient, overrides: dict[str, Any], field: str
) -> None:
    # Given a batch whose second event carries a quality signal it cannot carry
    events = [make_event(), make_event(**overrides)]

    # When it is posted (through the view and through the fast path)
    response = _post(phone_client, events)

    # Then 400 names event 1 and the field, and nothing of the batch is stored
    assert response.status_code == 400, response.content
    details = response.json()["error"]["details"]
    assert {(d["event"], d["field"]) for d in details} == {(1, field)}, details
    assert _nothing_stored()


def test_telemetry_ingest__signal_and_type_problems__complete_check_names_both(
    phone_client: APIClient,
) -> None:
    # Given an event with a bad type elsewhere (the fast pass stops at it) and a signal on the
    # wrong route, and a second event with only the signal problem
    events = [
        make_event(latency_ms="fast", route="cloud", refine_changed=True),
        make_event(route="device", refine_changed=False),
    ]

    # When it is posted
    response = _post(phone_client, events)

    # Then every problem is named, the cross-field one too
    assert response.status_code == 400, response.content
    named = {(d["event"], d["field"]) for d in response.json()["error"]["details"]}
    assert named == {(0, "latency_ms"), (0, "refine_changed"), (1, "refine_changed")}
    assert _nothing_stored()


ACCEPTED = [
    (
        "refined, changed, with its edit ratio",
        {**REFINED, "refine_changed": True, "refine_edit_ratio": 0.4},
    ),
    ("refined, kept, edit ratio 0", {**REFINED, "refine_changed": False, "refine_edit_ratio": 0}),
    ("refined, changed, no ratio", {**REFINED, "refine_changed": True}),
    ("shadow refine, kept", {**SHADOW, "refine_changed": False}),
    ("shadow refine not yet reported", SHADOW),
    ("quality on a device event", {"quality": 0.9}),
    ("quality on a cloud event", {"route": "cloud", "quality": 0}),
    ("shadow_refine false anywhere", {"route": "cloud", "shadow_refine": False}),
    (
        "null signals are unknown",
        {"refine_changed": None, "quality": None, "refine_edit_ratio": None},
    ),
]


@pytest.mark.parametrize(
    "overrides", [case[1] for case in ACCEPTED], ids=[case[0] for case in ACCEPTED]
)
def test_telemetry_ingest__good_quality_signal__202_and_stored_raw(
    phone_client: APIClient, overrides: dict[str, Any]
) -> None:
    # Given an event with a quality signal it may carry
    event = make_event(**overrides)

    # When it is posted and processed
    response = _post(phone_client, [event])
    landed_batches_process()

    # Then it is accepted and the raw event keeps every signal as sent (for replays)
    assert response.status_code == 202, response.content
    stored = Event.objects.get()
    for name in ("refine_changed", "refine_edit_ratio", "quality", "shadow_refine"):
        assert getattr(stored, name) == event.get(name), name


# --- privacy and cost --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cell", "deidentified", "violations"),
    [
        # voice/interactive/sensitive forbids upload: a shadow refine there is a violation
        ({"task_type": "voice", "decided_by": "policy"}, True, 3),
        # text/interactive/sensitive uploads de-identified: raw is a violation, not the other
        ({"task_type": "text"}, False, 3),
        ({"task_type": "text"}, True, 0),
    ],
    ids=["upload-forbidden", "raw-where-deidentify", "deidentified"],
)
def test_privacy_violations__shadow_refine__counted_as_data_that_left(
    phone: tuple[Device, str],
    viewer: Any,
    client_as: Any,
    cell: dict[str, Any],
    deidentified: bool,
    violations: int,
) -> None:
    # Given three device answers of a sensitive cell refined in the background, one of them
    # from a device that (wrongly) says nothing was uploaded
    events = [
        make_event(privacy_tier="sensitive", deidentified=deidentified, **cell, **SHADOW, **extra)
        for extra in ({}, {"uploaded": True}, {"uploaded": False})
    ]
    _ingest(phone[0], events)

    # When an operator reads the fleet's figures
    response = client_as(viewer).get(METRICS, {"window": "1h"})

    # Then each counts as data that left the device, judged by its cell's rule
    assert response.status_code == 200, response.content
    assert sum(g["privacy_violations"] for g in response.json()["groups"]) == violations


def test_cloud_work__shadow_refines__one_call_each_with_device_mean_tokens(
    fleet: Any, phone: tuple[Device, str]
) -> None:
    # Given 10 device answers of 200 tokens each, 4 of them shadow refined, and 2 cloud calls
    # of 500 tokens
    events = [make_event(tokens=200, **(SHADOW if i < 4 else {})) for i in range(10)]
    events += [make_event(route="cloud", tokens=500) for _ in range(2)]
    _ingest(phone[0], events)

    # When the cloud work of the rollups is counted
    calls, tokens = cloud_work(_figures(LEVELS[0], fleet.pk))

    # Then each shadow refine is one call more, carrying the device route's mean tokens
    assert calls == 2 + 4
    assert tokens == pytest.approx(2 * 500 + 4 * 200)


# --- rollups -----------------------------------------------------------------------------------


def _generated(rng: random.Random, count: int) -> list[dict[str, Any]]:
    """Events of every kind: refined (changed or kept, with or without a ratio), shadow refined
    device answers, plain ones; a score on most, a quality on some; over the last 90 minutes."""
    now = datetime.now(UTC)
    events = []
    for _ in range(count):
        kind = rng.choice(["refined", "shadow", "device", "cloud"])
        extra: dict[str, Any] = {}
        if kind == "refined":
            extra = dict(REFINED)
        elif kind == "shadow":
            extra = dict(SHADOW)
        elif kind == "cloud":
            extra = {"route": "cloud"}
        if kind in ("refined", "shadow") and rng.random() < 0.9:
            changed = rng.random() < 0.4
            extra["refine_changed"] = changed
            if rng.random() < 0.7:
                extra["refine_edit_ratio"] = round(rng.random(), 3) if changed else 0.0
        extra["score"] = round(rng.random(), 4) if rng.random() < 0.9 else None
        if rng.random() < 0.5:
            extra["quality"] = round(rng.random(), 3)
        ts = now - timedelta(seconds=rng.uniform(5, 90 * 60))
        events.append(make_event(ts=iso(ts), **extra))
    return events


def _expected(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures computed directly from the events."""
    reported = [e for e in events if e.get("refine_changed") is not None]
    kept = [e for e in reported if e["refine_changed"] is False]
    ratios = [e["refine_edit_ratio"] for e in events if e.get("refine_edit_ratio") is not None]
    qualities = [e["quality"] for e in events if e.get("quality") is not None]
    curve: dict[int, list[int]] = {}
    for event in reported:
        if event.get("score") is None:
            continue
        counts = curve.setdefault(score_bin(event["score"]), [0, 0])
        counts[0] += 1
        counts[1] += event["refine_changed"] is False
    return {
        "draft_kept_rate": len(kept) / len(reported),
        "mean_quality": sum(qualities) / len(qualities),
        "refine_edit_mean": sum(ratios) / len(ratios),
        "refine_reported": len(reported),
        "quality_count": len(qualities),
        "shadow_refines": sum(1 for e in events if e.get("shadow_refine")),
        "kept_curve": [
            {
                "score_from": index / 100,
                "score_to": (index + 1) / 100,
                "reported": counts[0],
                "kept": counts[1],
                "kept_rate": counts[1] / counts[0],
            }
            for index, counts in sorted(curve.items())
        ],
    }


def _actual(figures: Figures) -> dict[str, Any]:
    return {
        "draft_kept_rate": figures.draft_kept_rate(),
        "mean_quality": figures.mean_quality(),
        "refine_edit_mean": figures.refine_edit_mean(),
        "refine_reported": figures.headline()["refine_reported"],
        "quality_count": figures.headline()["quality_count"],
        "shadow_refines": int(figures.total("shadow_refines")),
        "kept_curve": figures.kept_curve(),
    }


def test_rollups__generated_events__quality_figures_equal_direct_computation_at_every_level(
    fleet: Any, phone: tuple[Device, str]
) -> None:
    # Given 1,500 generated events with every kind of quality signal, processed in batches
    # (several partial rows per key)
    events = _generated(random.Random(15), 1500)
    for start in range(0, len(events), 300):
        _ingest(phone[0], events[start : start + 300])
    expected = _expected(events)

    # When the figures are read from each level, before and after compaction
    before = {level.name: _actual(_figures(level, fleet.pk)) for level in LEVELS}
    rollups_compact()
    after = {level.name: _actual(_figures(level, fleet.pk)) for level in LEVELS}

    # Then each equals the direct computation on the events
    for level in LEVELS:
        for figures in (before[level.name], after[level.name]):
            assert figures["kept_curve"] == expected["kept_curve"], level.name
            for name in ("draft_kept_rate", "mean_quality", "refine_edit_mean"):
                assert figures[name] == pytest.approx(expected[name]), (level.name, name)
            for name in ("refine_reported", "quality_count", "shadow_refines"):
                assert figures[name] == expected[name], (level.name, name)


def test_figures__no_signals__quality_figures_unknown(
    fleet: Any, phone: tuple[Device, str]
) -> None:
    # Given events from devices that send no quality signal
    _ingest(phone[0], [make_event() for _ in range(5)])

    # When their figures are read
    figures = _figures(LEVELS[0], fleet.pk)

    # Then the quality figures are unknown (not 0), and the curve is empty
    headline = figures.headline()
    assert (headline["draft_kept_rate"], headline["mean_quality"]) == (None, None)
    assert (headline["refine_reported"], headline["quality_count"]) == (0, 0)
    assert figures.refine_edit_mean() is None
    assert figures.kept_curve() == []


def test_metrics_api__quality_signals__in_the_headline(
    phone: tuple[Device, str], viewer: Any, client_as: Any
) -> None:
    # Given 4 refined events, 3 of them kept, with qualities 0.5 and 1.0
    events = [
        make_event(**REFINED, refine_changed=False, quality=0.5),
        make_event(**REFINED, refine_changed=False),
        make_event(**REFINED, refine_changed=False, quality=1.0),
        make_event(**REFINED, refine_changed=True),
    ]
    _ingest(phone[0], events)

    # When an operator reads the fleet's figures
    response = client_as(viewer).get(METRICS, {"window": "1h"})

    # Then the draft-kept rate and the mean quality are shown with their counts
    assert response.status_code == 200, response.content
    (group,) = response.json()["groups"]
    assert group["draft_kept_rate"] == pytest.approx(0.75)
    assert group["mean_quality"] == pytest.approx(0.75)
    assert (group["refine_reported"], group["quality_count"]) == (4, 2)


def test_kept_curve__bad_stored_histograms__bad_entries_left_out_and_compacted_clean(
    fleet: Any,
) -> None:
    # Given two partial minute rows as a hand or an older version might store them: bad keys,
    # negative and non-whole counts, a bin past the last, more kept than reported, a JSON
    # string instead of an object
    minute = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=1)
    cell = {"policy_version": 1, "cohort": "stable", "route": "draft_refine"}
    cell |= {"task_type": "text", "latency_budget": "interactive", "privacy_tier": "normal"}
    MinuteRollup.objects.create(
        fleet=fleet,
        minute=minute,
        **cell,
        events=4,
        refine_reported=4,
        refine_kept=3,
        refine_hist={"42": 2, "x": 5, "-3": 1, "150": 7, "43": -1, "44": 1.5},
        kept_hist={"42": 5, "y": 1},
    )
    MinuteRollup.objects.create(
        fleet=fleet,
        minute=minute,
        **cell,
        events=2,
        refine_reported=2,
        refine_kept=1,
        refine_hist='{"42": 2, "60": true}',
        kept_hist="not json",
    )

    # When the curve is read, before and after compaction
    before = _figures(LEVELS[0], fleet.pk).kept_curve()
    rollups_compact()
    after = _figures(LEVELS[0], fleet.pk).kept_curve()

    # Then only the good entries count (bin 42: 2 reported, never more kept than reported; a
    # string reads as empty), and the compacted row keeps only whole-number bins
    expected = [{"score_from": 0.42, "score_to": 0.43, "reported": 2, "kept": 2, "kept_rate": 1.0}]
    assert before == after == expected
    row = MinuteRollup.objects.get()
    assert set(row.refine_hist) <= {"42", "-3", "150"}
    assert row.kept_hist == {"42": 5}
