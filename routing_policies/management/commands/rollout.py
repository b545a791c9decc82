"""`manage.py rollout start|advance|pause|resume|rollback|complete|switch|status` for automation."""

import json
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.core.serializers.json import DjangoJSONEncoder
from rest_framework import serializers

from controlplane.api import input_validate
from controlplane.exceptions import ApplicationError, ValidationFailed
from routing_policies.extensions import rollout_guard_status, rollout_start_guarded
from routing_policies.policies.selectors import fleet_get
from routing_policies.rollouts import schemas, selectors, services

ACTIONS = ("start", "advance", "pause", "resume", "rollback", "complete", "switch", "status")

# The presets `--guards` names (telemetry.alerts.services.guards.PRESETS); else JSON.
GUARD_PRESETS = ("default", "statistical", "quality")


class Command(BaseCommand):
    """Drive a fleet's rollout from scripts; prints the rollout status as JSON."""

    help = "Start, advance, pause, resume, roll back or complete a fleet's rollout; or show it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=ACTIONS)
        parser.add_argument("--fleet", required=True, help="fleet slug")
        parser.add_argument(
            "--policy-version",
            dest="policy_version",
            type=int,
            help="published version (start, switch)",
        )
        parser.add_argument("--to-stage", type=int, choices=[5, 25, 100], help="advance to")
        parser.add_argument("--reason", default="", help="why (rollback)")
        parser.add_argument("--as-user", default="", help="audit the action as this user")
        parser.add_argument(
            "--holdback",
            type=int,
            default=0,
            help="start: percent of the fleet kept on stable at 100%% until completion (0-50)",
        )
        parser.add_argument(
            "--segment",
            default=None,
            help="start: scope the rollout to this segment (docs/segments.md)",
        )
        parser.add_argument(
            "--fleet-wide",
            action="store_true",
            help="complete: confirm that a scoped rollout's candidate becomes the whole fleet's "
            "stable version",
        )
        # Guards (start only; docs/alerts.md): any of these guards the new rollout.
        parser.add_argument(
            "--guards",
            default=None,
            help='start: "default" (fixed limits), "statistical", "quality", or a JSON list of '
            "guards (docs/alerts.md)",
        )
        parser.add_argument(
            "--bake-minutes",
            default=None,
            help="start: quiet minutes per stage before auto-advance: 10, or 5:10,25:20,100:30",
        )
        parser.add_argument(
            "--auto-advance", action="store_true", help="start: advance after a quiet bake"
        )
        parser.add_argument("--guard-window-minutes", type=int, default=None)
        parser.add_argument("--guard-min-samples", type=int, default=None)

    def handle(self, *args: Any, **options: Any) -> None:
        action: str = options["action"]
        actor = None
        if options["as_user"]:
            actor = get_user_model().objects.filter(username=options["as_user"]).first()
            if actor is None:
                raise CommandError(f"No user {options['as_user']!r}.")
        try:
            fleet = fleet_get(slug=options["fleet"])
            if action in ("start", "switch") and options["policy_version"] is None:
                raise CommandError(f"`{action}` needs --policy-version N.")
            if action == "start":
                start = _checked(
                    schemas.RolloutStartBaseSerializer,
                    version=options["policy_version"],
                    holdback=options["holdback"],
                    segment=options["segment"],
                )
                rollout_start_guarded(
                    actor=actor, fleet=fleet, guard_options=_guard_options(options), **start
                )
            elif action == "advance":
                services.rollout_advance(actor=actor, fleet=fleet, to_stage=options["to_stage"])
            elif action == "pause":
                services.rollout_pause(actor=actor, fleet=fleet)
            elif action == "resume":
                services.rollout_resume(actor=actor, fleet=fleet)
            elif action == "rollback":
                # A person at a terminal, not a guard: no freeze.
                services.rollout_rollback(
                    actor=actor, fleet=fleet, reason=options["reason"], automatic=False
                )
            elif action == "complete":
                services.rollout_complete(
                    actor=actor, fleet=fleet, fleet_wide=options["fleet_wide"]
                )
            elif action == "switch":
                switch = _checked(
                    schemas.RolloutVersionInputSerializer, version=options["policy_version"]
                )
                services.fleet_switch_version(actor=actor, fleet=fleet, **switch)
        except ApplicationError as error:
            raise CommandError(f"{error.code}: {error.message}") from error
        status = selectors.rollout_status(fleet)
        if status["rollout"] is not None:
            status["guards"] = rollout_guard_status(rollout_id=status["rollout"]["id"])
        self.stdout.write(json.dumps(status, cls=DjangoJSONEncoder, indent=2))


def _checked(serializer_class: type[serializers.Serializer[Any]], **values: Any) -> dict[str, Any]:
    """The options of an action, checked by the API's input serializer of the same use case
    (the services take them as validated); refused, the first option at fault and why."""
    try:
        return input_validate(serializer_class, values)
    except ValidationFailed as error:
        first = error.details[0]
        raise CommandError(f"{first['field']}: {first['message']}") from error


def _guard_options(options: dict[str, Any]) -> dict[str, Any]:
    """The guard options given on the command line (none: an unguarded rollout)."""
    guard: dict[str, Any] = {}
    if options["guards"] is not None:
        text = options["guards"].strip()
        try:
            guard["guards"] = text if text in GUARD_PRESETS else json.loads(text)
        except ValueError as error:
            raise CommandError(
                f"--guards is `default`, `statistical`, `quality` or a JSON list: {error}"
            ) from error
    raw_bake = options["bake_minutes"]
    if raw_bake is not None:
        try:
            if ":" in raw_bake:
                guard["bake_minutes"] = {
                    stage.strip(): int(minutes)
                    for stage, minutes in (part.split(":", 1) for part in raw_bake.split(","))
                }
            else:
                guard["bake_minutes"] = int(raw_bake)
        except ValueError as error:
            raise CommandError(
                "--bake-minutes is minutes (10) or per stage (5:10,25:20,100:30)."
            ) from error
    if options["auto_advance"]:
        guard["auto_advance"] = True
    if options["guard_window_minutes"] is not None:
        guard["window_minutes"] = options["guard_window_minutes"]
    if options["guard_min_samples"] is not None:
        guard["min_samples"] = options["guard_min_samples"]
    if guard and "guards" not in guard:
        guard["guards"] = "default"
    return guard
