"""`manage.py autopilot`: run a cycle now, show the status, pause, resume (the same services
as the beat, the API and the page; docs/lab.md, "The autopilot")."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from autopilot.selectors import cycle_out, cycles_list, objective_get
from autopilot.services import autopilot_pause, autopilot_resume, autopilot_tick
from controlplane.exceptions import ApplicationError
from routing_policies.selectors import fleet_get


class Command(BaseCommand):
    """Drive a fleet's autopilot from the shell."""

    help = (
        "run: start a cycle now (or move the open one on); status: the objective and the last "
        "cycles; pause / resume. Acts as the shell's operator (`system` in the audit log)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["run", "status", "pause", "resume"])
        parser.add_argument("fleet", help="the fleet's slug")
        parser.add_argument("--json", action="store_true", help="print the whole status")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            fleet = fleet_get(slug=options["fleet"])
            action = options["action"]
            if action == "run":
                cycle = autopilot_tick(fleet=fleet, force=True)
                if cycle is None:
                    objective = objective_get(fleet=fleet)
                    raise CommandError(
                        f"The autopilot of {fleet.slug} is {objective.state}"
                        + (f": {objective.state_reason}" if objective.state_reason else "")
                    )
                self.stdout.write(f"cycle {cycle.number}: {cycle.state} — {cycle.reason}")
                return
            if action == "pause":
                autopilot_pause(actor=None, fleet=fleet)
            elif action == "resume":
                autopilot_resume(actor=None, fleet=fleet)
        except ApplicationError as exc:
            raise CommandError(exc.message) from None
        self._status(fleet, as_json=options["json"])

    def _status(self, fleet: Any, *, as_json: bool) -> None:
        objective = objective_get(fleet=fleet)
        cycles = [cycle_out(cycle) for cycle in cycles_list(fleet=fleet, limit=10)]
        if as_json:
            self.stdout.write(
                json.dumps(
                    {
                        "state": objective.state,
                        "reason": objective.state_reason,
                        "next_run_at": objective.next_run_at.isoformat()
                        if objective.next_run_at
                        else None,
                        "cycles": cycles,
                    },
                    indent=2,
                )
            )
            return
        self.stdout.write(
            f"autopilot of {fleet.slug}"
            + (f" (segment {objective.segment})" if objective.segment else "")
            + f": {objective.state}"
            + (f" ({objective.state_reason})" if objective.state_reason else "")
        )
        if objective.next_run_at:
            self.stdout.write(f"next run: {objective.next_run_at.isoformat()}")
        for cycle in cycles:
            scope = f" (segment {cycle['segment']})" if cycle["segment"] else ""
            self.stdout.write(
                f"cycle {cycle['number']}{scope}: {cycle['state']} — {cycle['reason']}"
            )
