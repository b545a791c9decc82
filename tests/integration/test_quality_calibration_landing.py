"""Issue #15, "Done when": a calibration to a quality target, rolled out, lands within ±2 points
of the target on the candidate cohort.

The simulator's devices on its virtual clock (tests/integration/quality_fleet.py) run the
stable version; the lab calibrates the cell for `{"kind": "quality", "value": q}` on their
recorded events and rollups (`calibration_compute`), the chosen θ is written into the draft
(`calibration_apply`), published and rolled out to 100% with a holdback; the candidate
cohort's device quality is then measured where nothing else can: the shadow refines of its
device answers (`device_kept_rate`, the device-route kept rate of the candidate's rollups).
"""

import math
from typing import Any

import pytest
from django.db.models import Sum

from lab.calibration.selectors import calibration_compute
from lab.calibration.services import calibration_apply
from lab.calibration.targets import Target
from routing_policies.rollouts.selectors import fleet_assignment
from routing_policies.services import (
    policy_draft_create,
    policy_version_publish,
    rollout_advance,
    rollout_start,
)
from telemetry.models import MinuteRollup

from .quality_fleet import (
    CELL,
    VirtualRun,
    document_of,
    fleet_config,
    one_cell_fleet,
    rollout_backdated,
)

pytestmark = pytest.mark.integration

TARGET = 0.62
BOUND = 0.02
RATE = 200.0
STEP_S = 30
# The stable version: draft_refine at a low θ, so the cloud refines most drafts and the curve
# score → draft kept is measured densely over the scores a higher θ would keep on the device
# (below θ its shadow refines measure it): 5 virtual minutes, ~60,000 tasks.
STABLE_THRESHOLD = 0.3
STABLE_VALUES = {"mode": "draft_refine", "threshold": STABLE_THRESHOLD, "shadow_refine_rate": 0.05}
STABLE_S = 300
# The candidate's device quality is read from shadow refines alone (5% of its device
# answers): 25 virtual minutes at 200 tasks/s, 80% of the fleet on the candidate, give
# several thousand, a standard error near 0.6 pt, so ±2 pts is about 3 of them.
CANDIDATE_S = 1500
HOLDBACK = 20


def _device_kept(fleet: Any, cohort: str) -> tuple[float, int]:
    sums = MinuteRollup.objects.filter(fleet=fleet, cohort=cohort, route="device").aggregate(
        kept=Sum("refine_kept"), reported=Sum("refine_reported")
    )
    reported = int(sums["reported"] or 0)
    return (sums["kept"] or 0) / reported if reported else math.nan, reported


def test_quality_calibration__rolled_out__candidate_device_quality_within_2_points_of_target(
    db: None, publisher: Any
) -> None:
    # Given a one-cell fleet on v1 whose devices have reported 5 virtual minutes of refines
    fleet = one_cell_fleet(actor=publisher, slug="landing", values=STABLE_VALUES)
    run = VirtualRun(
        fleet=fleet,
        actor=publisher,
        config=fleet_config(rate=RATE, feedback_share=0.0),
        document=document_of(fleet, 1),
        seconds=STABLE_S + CANDIDATE_S,
    )
    try:
        for _ in range(STABLE_S // STEP_S):
            run.step(STEP_S)

        # When the cell is calibrated for device quality ≥ q on them, applied and published
        draft = policy_draft_create(actor=publisher, fleet=fleet)
        calibration = calibration_compute(
            fleet=fleet,
            target=Target(kind="quality", value=TARGET),
            cells=[CELL],
            hours=1,
            end=run.now(),
        )
        result = calibration.cells[0].result
        assert result is not None, calibration.cells[0]
        assert result.reached, calibration.cells[0]
        chosen = result.chosen
        assert chosen.device_quality is not None
        assert chosen.threshold > STABLE_THRESHOLD
        draft, _ = calibration_apply(
            actor=publisher,
            fleet=fleet,
            revision=draft.revision,
            thresholds=[(CELL, chosen.threshold)],
        )
        policy_version_publish(actor=publisher, fleet=fleet, revision=draft.revision, note="q")

        # ... and rolled out to 100% with a 20% holdback (the devices get it as a push would)
        rollout_start(actor=publisher, fleet=fleet, version=2, holdback=HOLDBACK)
        rollout = rollout_advance(actor=publisher, fleet=fleet, to_stage=100)
        rollout_backdated(rollout, run.now())
        assignment = fleet_assignment(fleet.pk)
        cohort = [d for d in run.devices if assignment.in_candidate_cohort(d)]
        run.apply(document_of(fleet, 2), cohort)
        for _ in range(CANDIDATE_S // STEP_S):
            run.step(STEP_S)
    finally:
        run.close()

    # Then the candidate cohort's measured device quality is within ±2 points of the target
    measured, reported = _device_kept(fleet, "candidate")
    assert reported > 0, "no shadow refine of the candidate's device answers"
    shadows = [
        e
        for e in run.events
        if e["policy_version"] == 2 and e["route"] == "device" and e["shadow_refine"]
    ]
    standard_error = math.sqrt(measured * (1 - measured) / reported)
    summary = (
        f"target {TARGET}, chosen θ {chosen.threshold} (α {chosen.alpha:.3f}), predicted "
        f"{chosen.device_quality:.4f} [{chosen.device_quality_low:.4f}, "
        f"{chosen.device_quality_high:.4f}] on {chosen.device_judged} tasks; measured "
        f"{measured:.4f} on {reported} shadow refines (se {100 * standard_error:.2f} pts), "
        f"landing error {100 * (measured - TARGET):+.2f} pts, "
        f"vs prediction {100 * (measured - chosen.device_quality):+.2f} pts"
    )
    print(f"\n{summary}")
    assert reported == len([e for e in shadows if e["refine_changed"] is not None]) > 0, summary
    assert abs(measured - TARGET) <= BOUND, summary
