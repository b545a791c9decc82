"""Issue #15, "Done when": the degraded-model scenario fires a quality alert and its guard rolls
the candidate back; a healthy candidate under the same guard is not rolled back.

The simulator's devices on its virtual clock (tests/integration/quality_fleet.py) deliver to
the real ingest; every 30 simulated seconds the fleet's rules and the rollout's guards are
judged at that moment by the production code (`alerts_evaluate`, as Celery beat runs it), and
each device gets the version the fleet's assignment gives it (as the push would). In the
degraded-model scenario the candidate's device model drafts answers the cloud keeps 30 points
less often, with the same confidence: its routing, cloud share and latency are the stable
version's, so only the quality signals can tell.
"""

from typing import Any

import pytest

from routing_policies.models import Rollout
from routing_policies.rollouts.selectors import fleet_assignment
from telemetry.alerts.models import AlertEvent, AlertRule, RolloutGuardSet
from telemetry.alerts.services import alert_rule_create, alerts_evaluate, rollout_start_guarded

from .quality_fleet import (
    VirtualRun,
    document_of,
    fleet_config,
    one_cell_fleet,
    publish_cell,
    rollout_backdated,
)

pytestmark = pytest.mark.integration

# draft_refine from θ 0.3: the cloud refines most drafts, so refine reports come with most
# tasks (stable keeps ~57% of them, the degraded candidate ~27%).
VALUES = {"mode": "draft_refine", "threshold": 0.3, "shadow_refine_rate": 0.05}
RATE = 100.0
STEP_S = 30
MINUTES = 12
GUARD_OPTIONS = {"guards": "quality", "bake_minutes": 5, "auto_advance": True}


def _run(*, publisher: Any, slug: str, candidate_version: int | None) -> tuple[Rollout, Any]:
    """MINUTES of a one-cell fleet with v2 rolled out under the quality preset, the candidate's
    device model degraded when it runs `candidate_version`; the rollout and the alert rule."""
    fleet = one_cell_fleet(actor=publisher, slug=slug, values=VALUES)
    candidate = publish_cell(
        actor=publisher, fleet=fleet, values={"threshold": 0.31}, note="the candidate"
    )
    documents = {1: document_of(fleet, 1), candidate: document_of(fleet, candidate)}
    rule = alert_rule_create(
        actor=publisher,
        fleet=fleet,
        name="Candidate device quality",
        metric="draft_kept_rate",
        condition="below",
        threshold=0.45,
        window_minutes=5,
        # The guard may roll back after its first half-minute (~100 candidate reports): the
        # rule judges the same minutes. At 50 reports of the degraded ~27% its standard error
        # is ~6 pts, the 45% threshold ~3 of them away; stable's ~57% is 2 above it.
        min_samples=50,
        # Judged every half-minute over 12 minutes, a healthy candidate's ~57% dips under 45%
        # in one window now and then (1.7 standard errors at 50 reports): the alert wants it
        # below for a minute, as a degraded candidate stays.
        for_seconds=60,
        scope="cohort",
        scope_value="candidate",
    )
    run = VirtualRun(
        fleet=fleet,
        actor=publisher,
        config=fleet_config(
            rate=RATE,
            feedback_share=0.0,
            scenario="degraded-model",
            buggy_version=candidate_version,
        ),
        document=documents[1],
        seconds=MINUTES * 60,
    )
    try:
        run.step(STEP_S)  # a stable half-minute before the rollout
        rollout = rollout_start_guarded(
            actor=publisher, fleet=fleet, version=candidate, guard_options=GUARD_OPTIONS
        )
        rollout_backdated(rollout, run.now())
        stage, on = rollout.stage, dict.fromkeys(run.devices, 1)
        for _ in range(MINUTES * 60 // STEP_S - 1):
            assignment = fleet_assignment(fleet.pk)
            for device_id in run.devices:
                version = assignment.version_for(device_id)
                assert version is not None
                if on[device_id] != version:
                    run.apply(documents[version], [device_id])
                    on[device_id] = version
            run.step(STEP_S)
            alerts_evaluate(fleet_id=fleet.pk, now=run.now())
            rollout.refresh_from_db()
            if rollout.is_open and rollout.stage != stage:
                # The guards advanced it at this simulated moment (not the real one).
                rollout_backdated(rollout, run.now(), stage_only=True)
                stage = rollout.stage
    finally:
        run.close()
    rollout.refresh_from_db()
    return rollout, AlertRule.objects.get(pk=rule.pk)


def _guards_read(rollout: Rollout) -> str:
    guard_set = RolloutGuardSet.objects.get(rollout=rollout)
    guards = [(g.metric, g.state, g.message) for g in guard_set.guards.all()]
    return f"{rollout.state} at {rollout.stage}%: {guard_set.verdict_reason}; {guards}"


def test_quality_guard__degraded_model_scenario__alert_fires_and_candidate_rolled_back(
    db: None, publisher: Any
) -> None:
    # Given a fleet in the degraded-model scenario, v2 the candidate whose drafts are worse
    # When v2 is rolled out under the quality preset and 12 simulated minutes go by
    rollout, rule = _run(publisher=publisher, slug="degraded", candidate_version=2)

    # Then the quality guard rolled it back, saying why, with no one clicking
    assert rollout.state == Rollout.State.ROLLED_BACK, _guards_read(rollout)
    assert rollout.reason.startswith("Guard fired: "), rollout.reason
    assert "draft-kept rate" in rollout.reason, rollout.reason
    guard = RolloutGuardSet.objects.get(rollout=rollout).guards.get(metric="draft_kept_rate")
    assert guard.state == "regressed", guard.message
    assert "wholly beyond" in guard.message, guard.message
    # ... and the candidate's quality alert fired
    fired = AlertEvent.objects.filter(rule_name=rule.name, kind="firing")
    assert fired.exists(), (rule.state, rule.last_value, rule.last_samples, rule.last_message)
    first = fired.first()
    assert first is not None
    print(f"\n{_guards_read(rollout)}; rule fired at {first.at}: {first.message}")


def test_quality_guard__healthy_candidate_same_guard__not_rolled_back(
    db: None, publisher: Any
) -> None:
    # Given the same fleet and scenario, but no version runs the degraded model
    # When v2 is rolled out under the same preset and 12 simulated minutes go by
    rollout, rule = _run(publisher=publisher, slug="healthy", candidate_version=99)

    # Then it was never rolled back and the quality alert never fired
    assert rollout.state in (Rollout.State.ACTIVE, Rollout.State.COMPLETED), _guards_read(rollout)
    assert not AlertEvent.objects.filter(rollout=rollout, kind="rolled_back").exists()
    assert not AlertEvent.objects.filter(rule_name=rule.name, kind="firing").exists()
    print(f"\n{_guards_read(rollout)}")
