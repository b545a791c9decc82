"""routing_policies/extensions.py: what another app plugs into rollouts and the demo, and how
rollouts behave when nothing is plugged in (routing_policies never imports telemetry)."""

from collections.abc import Callable
from typing import Any

import pytest

from controlplane.exceptions import ValidationFailed
from routing_policies import extensions
from routing_policies.models import Rollout


@pytest.fixture
def fleet2(fleet: Any, publish_version: Callable[..., Any]) -> Any:
    """The fleet on v1 with v2 published."""
    publish_version(fleet, 0.6)
    return fleet


@pytest.fixture
def no_guards(monkeypatch: pytest.MonkeyPatch) -> None:
    """A deployment without a guard extension (telemetry's is installed in this suite)."""
    monkeypatch.setattr(extensions, "_guards", None)


def test_rollout_start_guarded__no_guard_extension__unguarded_start(
    fleet2: Any, publisher: Any, no_guards: None
) -> None:
    # Given no guard extension
    # When a rollout of v2 is started without guard options
    rollout = extensions.rollout_start_guarded(
        actor=publisher, fleet=fleet2, version=2, guard_options={}
    )

    # Then it starts at 5%, with no guards to show
    assert (rollout.stage, rollout.state) == (5, Rollout.State.ACTIVE)
    assert extensions.rollout_guard_status(rollout_id=rollout.pk) is None


def test_rollout_start_guarded__no_guard_extension__guards_refused_nothing_started(
    fleet2: Any, publisher: Any, no_guards: None
) -> None:
    # Given no guard extension
    # When a guarded rollout is asked for
    with pytest.raises(ValidationFailed) as refused:
        extensions.rollout_start_guarded(
            actor=publisher, fleet=fleet2, version=2, guard_options={"guards": "default"}
        )

    # Then it is refused naming the field, and no rollout was started
    assert refused.value.details == [{"field": "guards", "message": "not available"}]
    assert not Rollout.objects.filter(fleet=fleet2).exists()


def test_rollout_guards__telemetry_installed__guarded_start_and_status_registered(
    fleet2: Any, publisher: Any
) -> None:
    # Given the suite's apps (telemetry registers its guards in its AppConfig.ready)
    # When a guarded rollout is started through the extension point
    rollout = extensions.rollout_start_guarded(
        actor=publisher, fleet=fleet2, version=2, guard_options={"guards": "default"}
    )

    # Then its guards are stored and shown through the same point
    status = extensions.rollout_guard_status(rollout_id=rollout.pk)
    assert status is not None
    assert len(status["guards"]) >= 1
