"""Alert rules and rollout guards on the quality signals (issue #15): the draft-kept rate and
the mean app quality judged over the events that report them, and the quality guard that rolls
back a candidate whose device drafts the cloud keeps less often than stable's."""

import json
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from controlplane.exceptions import ValidationFailed
from routing_policies.models import AuditEntry, Device, Rollout
from telemetry.alerts.judging import ScopeFigures, judge_guard, judge_rule, reading
from telemetry.alerts.models import AlertRule
from telemetry.alerts.sequential import (
    CohortFigures,
    SequentialGuard,
    cohort_figures,
    judge_sequential,
)
from telemetry.alerts.services import alert_rule_create, alerts_evaluate, rollout_start_guarded
from telemetry.ingest.services import landed_batches_process, telemetry_batch_ingest
from telemetry.rollups import RollupRow
from telemetry.rollups.schema import FIELD_INDEX, ZERO_SUMS
from tests.factories import iso, make_events

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
CELLS = (("text", "interactive", "normal"), ("voice", "interactive", "normal"))


def rollup_row(
    *,
    cohort: str = "stable",
    version: int = 1,
    cell: tuple[str, str, str] = CELLS[0],
    events: int = 0,
    reported: int = 0,
    kept: int = 0,
    quality: tuple[float, int] = (0.0, 0),
    minute: datetime = NOW,
) -> RollupRow:
    """A minute rollup row with these counts (route draft_refine)."""
    sums = list(ZERO_SUMS)
    sums[FIELD_INDEX["events"]] = max(events, reported)
    sums[FIELD_INDEX["refine_reported"]] = reported
    sums[FIELD_INDEX["refine_kept"]] = kept
    sums[FIELD_INDEX["quality_sum"]] = quality[0]
    sums[FIELD_INDEX["quality_count"]] = quality[1]
    return RollupRow(minute, version, cohort, "draft_refine", *cell, "threshold", tuple(sums))


def generated_rows(seed: int, *, cohort: str = "stable", version: int = 1) -> list[RollupRow]:
    """30 minutes × 2 cells of random counts: some reports, some quality readings."""
    rng = random.Random(seed)
    rows = []
    for minute in range(30):
        for cell in CELLS:
            reported = rng.randint(0, 20)
            count = rng.randint(0, 10)
            rows.append(
                rollup_row(
                    cohort=cohort,
                    version=version,
                    cell=cell,
                    events=reported + rng.randint(0, 30),
                    reported=reported,
                    kept=rng.randint(0, reported),
                    quality=(sum(rng.random() for _ in range(count)), count),
                    minute=NOW - timedelta(minutes=29 - minute),
                )
            )
    return rows


def scope(rows: list[RollupRow]) -> ScopeFigures:
    figures = ScopeFigures()
    for row in rows:
        figures.add(row, with_latency=False)
    return figures


def test_reading__quality_metrics__the_reports_behind_them_direct_computation() -> None:
    # Given generated rows
    rows = generated_rows(1)
    figures = scope(rows)

    # When the quality metrics are read
    kept = reading("draft_kept_rate", figures, {}, 50)
    quality = reading("mean_quality", figures, {}, 50)

    # Then each is its part over its reports, and its samples are the reports, not the events
    reported = sum(r.sums[FIELD_INDEX["refine_reported"]] for r in rows)
    assert kept.samples == reported < figures.events
    assert kept.value == pytest.approx(
        sum(r.sums[FIELD_INDEX["refine_kept"]] for r in rows) / reported
    )
    counted = sum(r.sums[FIELD_INDEX["quality_count"]] for r in rows)
    assert quality.samples == counted
    assert quality.value == pytest.approx(
        sum(r.sums[FIELD_INDEX["quality_sum"]] for r in rows) / counted
    )


def test_judge_rule__events_without_reports__no_data_never_ok() -> None:
    # Given 500 events, none reporting the draft or a quality
    figures = scope([rollup_row(events=500)])

    for metric in ("draft_kept_rate", "mean_quality"):
        judgement = judge_rule(
            AlertRule(metric=metric, condition="below", threshold=0.8, min_samples=50),
            current=figures,
            previous=None,
            budgets={},
        )
        # Then too few samples: no reports is not a healthy 0% or 100%
        assert judgement.outcome == "no_data"
        assert judgement.samples == 0


def test_judge_rule__kept_rate_below_floor__breach_with_the_rate_in_the_message() -> None:
    figures = scope([rollup_row(reported=200, kept=120)])
    judgement = judge_rule(
        AlertRule(metric="draft_kept_rate", condition="below", threshold=0.8, min_samples=50),
        current=figures,
        previous=None,
        budgets={},
    )
    assert judgement.outcome == "breach"
    assert judgement.value == pytest.approx(0.6)
    assert "draft-kept rate 60.0%" in judgement.message
    healthy = scope([rollup_row(reported=200, kept=190)])
    assert (
        judge_rule(
            AlertRule(metric="draft_kept_rate", condition="below", threshold=0.8, min_samples=50),
            current=healthy,
            previous=None,
            budgets={},
        ).outcome
        == "ok"
    )


def test_judge_guard__fixed_mean_quality__value_formatted_as_a_quality() -> None:
    candidate = scope([rollup_row(cohort="candidate", quality=(41.0, 100))])
    stable = scope([rollup_row(quality=(80.0, 100))])
    judgement = judge_guard(
        metric="mean_quality",
        comparison="above",
        threshold=0.9,
        min_samples=50,
        candidate=candidate,
        stable=stable,
        budgets={},
    )
    assert judgement.outcome == "ok"
    assert "candidate mean app quality 0.41" in judgement.message


# --- the quality guard (anytime-valid, sequential) ------------------------------------------


def cohorts(
    candidate_rate: float, stable_rate: float, reports: int, seed: int = 0
) -> tuple[CohortFigures, CohortFigures]:
    """Both cohorts' figures over 30 minutes of draft reports kept at the given rates."""
    rng = random.Random(seed)
    rows = []
    for minute in range(30):
        for cohort, version, rate in (("candidate", 2, candidate_rate), ("stable", 1, stable_rate)):
            for cell in CELLS:
                n = reports // 60
                kept = sum(rng.random() < rate for _ in range(n))
                rows.append(
                    rollup_row(
                        cohort=cohort,
                        version=version,
                        cell=cell,
                        events=n * 2,
                        reported=n,
                        kept=kept,
                        minute=NOW - timedelta(minutes=29 - minute),
                    )
                )
    rows.sort(key=lambda r: r.minute)
    start, end = NOW - timedelta(hours=1), NOW
    return (
        cohort_figures(
            rows, start=start, end=end, version=2, cohort="candidate", with_latency=False
        ),
        cohort_figures(rows, start=start, end=end, version=1, cohort="stable", with_latency=False),
    )


GUARD = SequentialGuard(metric="draft_kept_rate", tolerance=0.03, min_samples=50)


def test_quality_guard__candidate_kept_rate_drops_15_pts__regressed() -> None:
    # Given 6,000 reports per cohort: candidate keeps 75% of drafts, stable 90%
    candidate, stable = cohorts(0.75, 0.90, 6000)

    # When the quality guard judges them
    judgement = judge_sequential(
        GUARD, candidate=candidate, stable=stable, cells_planned=2, label="draft-kept rate"
    )

    # Then a regression, its interval wholly beyond the 3 pts tolerated, counted in reports
    assert judgement.state == "regressed"
    reading_ = judgement.acted_on
    assert reading_ is not None
    assert reading_.interval is not None
    assert reading_.interval.lower > 0.03
    assert reading_.interval.estimate == pytest.approx(0.15, abs=0.03)
    assert "reports" in judgement.message
    assert "wholly beyond the tolerated +3.0 pts" in judgement.message


def test_quality_guard__identical_cohorts__healthy() -> None:
    candidate, stable = cohorts(0.9, 0.9, 6000, seed=4)
    judgement = judge_sequential(
        GUARD, candidate=candidate, stable=stable, cells_planned=2, label="draft-kept rate"
    )
    assert judgement.state == "healthy"


def test_quality_guard__few_reports__collecting_whatever_the_events() -> None:
    # Given 120 events but 60 reports per cohort, and a guard that needs 100
    candidate, stable = cohorts(0.5, 0.9, 60)
    assert candidate.total.events == stable.total.events == 120
    guard = SequentialGuard(metric="draft_kept_rate", tolerance=0.03, min_samples=100)
    judgement = judge_sequential(
        guard, candidate=candidate, stable=stable, cells_planned=2, label="draft-kept rate"
    )
    # Then it is still collecting: the reports count, not the events
    assert judgement.state == "collecting"
    assert "60 candidate, 60 stable reports of 100 each" in judgement.message


def test_quality_guard__better_candidate__never_a_regression() -> None:
    candidate, stable = cohorts(0.97, 0.8, 6000, seed=2)
    judgement = judge_sequential(
        GUARD, candidate=candidate, stable=stable, cells_planned=2, label="draft-kept rate"
    )
    assert judgement.state == "healthy"


# --- through ingest, rollups and the evaluation ----------------------------------------------


@pytest.fixture
def device(phone: tuple[Device, str], settings: Any) -> Device:
    settings.TELEMETRY_RATE_LIMIT_BATCHES = 0
    return phone[0]


def report(
    device: Device, *, at: datetime, version: int = 1, kept: int, changed: int, **extra: Any
) -> None:
    """Draft-refine events at `at`: `kept` whose draft the cloud kept, `changed` it changed."""
    events = make_events(
        kept,
        ts=iso(at),
        policy_version=version,
        route="draft_refine",
        refine_changed=False,
        **extra,
    )
    events += make_events(
        changed,
        ts=iso(at),
        policy_version=version,
        route="draft_refine",
        refine_changed=True,
        **extra,
    )
    for start in range(0, len(events), 1000):
        body = json.dumps({"events": events[start : start + 1000]}).encode()
        telemetry_batch_ingest(device=device, body=body)
    landed_batches_process()


@pytest.mark.usefixtures("requires_postgres")
def test_alert_rule__draft_kept_rate_below_floor__fires_then_resolves(
    fleet: Any, device: Device
) -> None:
    # Given a rule "draft-kept rate below 80%" and a bad window (50% kept) then a good one
    now = datetime.now(UTC)
    rule = alert_rule_create(
        actor=None,
        fleet=fleet,
        metric="draft_kept_rate",
        condition="below",
        threshold=0.8,
        name="device quality",
        window_minutes=5,
        min_samples=50,
    )
    report(device, at=now - timedelta(minutes=20), kept=40, changed=40)
    report(device, at=now - timedelta(minutes=2), kept=76, changed=4)

    # When judged over the bad window, then over the good one
    alerts_evaluate(fleet_id=fleet.pk, now=now - timedelta(minutes=19))
    rule.refresh_from_db()
    assert rule.state == "firing", rule.last_message
    assert rule.last_value == pytest.approx(0.5)
    assert rule.last_samples == 80
    alerts_evaluate(fleet_id=fleet.pk, now=now)
    rule.refresh_from_db()
    assert rule.state == "ok", rule.last_message


@pytest.mark.usefixtures("requires_postgres")
def test_alert_rule__mean_quality_threshold__a_share_and_refused_above_one(fleet: Any) -> None:
    with pytest.raises(ValidationFailed) as caught:
        alert_rule_create(
            actor=None,
            fleet=fleet,
            metric="mean_quality",
            condition="below",
            threshold=1.5,
            name="app quality",
        )
    assert caught.value.details[0]["field"] == "threshold"
    assert not AlertRule.objects.exists()


@pytest.mark.usefixtures("requires_postgres")
def test_quality_guard__degraded_candidate__rolled_back_with_the_reason(
    fleet: Any, device: Device, publish_version: Any, publisher: Any
) -> None:
    # Given a rollout guarded by the "quality" preset; stable's drafts are kept 90% of the
    # time, the candidate's 60%, with a like cloud share, fallbacks and errors
    candidate = int(publish_version(fleet, threshold=0.7).number)
    rollout = rollout_start_guarded(
        actor=publisher,
        fleet=fleet,
        version=candidate,
        guard_options={"guards": "quality", "bake_minutes": 0, "min_samples": 50},
    )
    now = datetime.now(UTC)
    report(device, at=now, version=1, kept=900, changed=100)
    report(device, at=now, version=candidate, kept=300, changed=200)

    # When the fleet is evaluated
    result = alerts_evaluate(fleet_id=fleet.pk)

    # Then the quality guard rolls the candidate back, saying so in the audit entry
    rollout.refresh_from_db()
    assert result.guard_action == "rolled_back"
    assert rollout.state == Rollout.State.ROLLED_BACK
    audit = AuditEntry.objects.get(action="rollout.rolled_back", fleet=fleet)
    assert "draft-kept rate" in audit.summary


@pytest.mark.usefixtures("requires_postgres")
@pytest.mark.parametrize(
    ("guard", "field"),
    [
        ({"kind": "sequential", "metric": "draft_kept_rate", "tolerance": 1.5}, "tolerance"),
        ({"kind": "sequential", "metric": "mean_quality", "tolerance": -0.1}, "tolerance"),
        ({"metric": "draft_kept_rate", "comparison": "above", "threshold": 2}, "threshold"),
    ],
)
def test_quality_guard__out_of_range__refused_naming_the_field_no_rollout(
    fleet: Any, publish_version: Any, publisher: Any, guard: dict[str, Any], field: str
) -> None:
    candidate = int(publish_version(fleet, threshold=0.7).number)
    with pytest.raises(ValidationFailed) as caught:
        rollout_start_guarded(
            actor=publisher, fleet=fleet, version=candidate, guard_options={"guards": [guard]}
        )
    assert caught.value.details[0]["field"] == f"guards[0].{field}"
    assert not Rollout.objects.filter(fleet=fleet).exists()


@pytest.mark.usefixtures("requires_postgres")
def test_quality_preset__statistical_guards_and_the_quality_guard(
    fleet: Any, publish_version: Any, publisher: Any
) -> None:
    candidate = int(publish_version(fleet, threshold=0.7).number)
    rollout = rollout_start_guarded(
        actor=publisher, fleet=fleet, version=candidate, guard_options={"guards": "quality"}
    )
    guards = list(rollout.guard_set.guards.values_list("kind", "metric", "threshold"))
    assert ("sequential", "draft_kept_rate", 0.03) in guards
    assert ("sequential", "cloud_share", 0.05) in guards
    assert len(guards) == 6
