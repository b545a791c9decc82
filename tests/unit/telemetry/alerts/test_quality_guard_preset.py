"""The quality guard preset (issue #15) where operators start rollouts: the rollout page's start
form offers it beside "default" and "statistical", the form starts it, and so does the
`rollout` command."""

import re
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from routing_policies.models import Rollout
from telemetry.alerts.models import RolloutGuardSet
from telemetry.alerts.services.guards import QUALITY_GUARDS

pytestmark = pytest.mark.usefixtures("requires_postgres")


@pytest.fixture
def candidate(fleet: Any, publish_version: Any) -> int:
    """v2 published beside the stable v1."""
    return int(publish_version(fleet, threshold=0.7).number)


def _guard_metrics(fleet: Any) -> list[str]:
    guard_set = RolloutGuardSet.objects.get(rollout__fleet=fleet)
    return sorted(guard_set.guards.values_list("metric", flat=True))


def test_rollout_page__start_form__offers_default_statistical_and_quality(
    fleet: Any, candidate: int, publisher: Any, client: Any
) -> None:
    # Given a publisher on the rollout page of a fleet with a candidate to roll out
    client.force_login(publisher)

    # When the page is drawn
    page = client.get(f"/fleets/{fleet.slug}/rollout/").content.decode()

    # Then the guards offer the three presets, each described in full, "default" chosen
    # (issue 22: radio buttons, since a select cut the descriptions off)
    group = re.search(r'<div class="guard-presets".*?</div>', page, re.S)
    assert group is not None
    options = re.findall(r'name="guards" value="(\w+)"( checked)?', group.group(0))
    assert [value for value, _ in options] == ["default", "statistical", "quality"]
    assert [value for value, chosen in options if chosen] == ["default"]
    assert "draft-kept rate" in group.group(0)


def test_rollout_page__quality_preset_started__rollout_guarded_by_the_quality_guards(
    fleet: Any, candidate: int, publisher: Any, client: Any
) -> None:
    # Given a publisher starting v2 from the rollout page with the quality preset
    client.force_login(publisher)

    # When the form is sent
    response = client.post(
        f"/fleets/{fleet.slug}/rollout/start/",
        {
            "version": str(candidate),
            "guarded": "on",
            "guards": "quality",
            "bake_minutes": "10",
            "window_minutes": "10",
            "min_samples": "50",
        },
    )

    # Then the rollout is guarded by the preset's guards, the draft-kept rate among them
    assert response.status_code == 302
    assert Rollout.objects.filter(fleet=fleet, state=Rollout.State.ACTIVE).exists()
    assert _guard_metrics(fleet) == sorted(g["metric"] for g in QUALITY_GUARDS)
    assert "draft_kept_rate" in _guard_metrics(fleet)


def test_rollout_command__quality_preset__rollout_guarded_by_the_quality_guards(
    fleet: Any, candidate: int, publisher: Any
) -> None:
    # When a rollout is started from the command line with `--guards quality`
    call_command(
        "rollout",
        "start",
        "--fleet",
        fleet.slug,
        "--policy-version",
        str(candidate),
        "--guards",
        "quality",
        stdout=StringIO(),
    )

    # Then it is guarded by the quality preset
    assert _guard_metrics(fleet) == sorted(g["metric"] for g in QUALITY_GUARDS)
