"""`manage.py autopilot run|status|pause|resume`: the same services as the beat and the API."""

from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from autopilot.models import AutopilotObjective
from autopilot.services import objective_set
from routing_policies.models import AuditEntry, Device
from tests.autopilot_events import OBJECTIVE


def _run(*args: str) -> str:
    out = StringIO()
    call_command("autopilot", *args, stdout=out)
    return out.getvalue()


def test_command__off__run_refused_saying_so(fleet: Any) -> None:
    with pytest.raises(CommandError, match="is off"):
        _run("run", fleet.slug)


def test_command__run_status_pause_resume(reported: Device, fleet: Any, publisher: Any) -> None:
    objective_set(actor=publisher, fleet=fleet, values=OBJECTIVE)
    assert "cycle 1: rolling_out" in _run("run", fleet.slug)
    assert "autopilot of fleet-a: active" in _run("status", fleet.slug)
    assert "paused" in _run("pause", fleet.slug)
    assert AutopilotObjective.objects.get().state == "paused"
    assert "active" in _run("resume", fleet.slug)
    assert AuditEntry.objects.filter(action="autopilot.paused", actor_name="system").exists()


def test_command__unknown_fleet__error(db: None) -> None:
    with pytest.raises(CommandError):
        _run("status", "nope")
