"""`manage.py rollout start|advance|pause|resume|rollback|complete|switch|status` for automation."""

import json
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.core.serializers.json import DjangoJSONEncoder

from controlplane.exceptions import ApplicationError
from routing_policies import selectors, services

ACTIONS = ("start", "advance", "pause", "resume", "rollback", "complete", "switch", "status")


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

    def handle(self, *args: Any, **options: Any) -> None:
        action: str = options["action"]
        actor = None
        if options["as_user"]:
            actor = get_user_model().objects.filter(username=options["as_user"]).first()
            if actor is None:
                raise CommandError(f"No user {options['as_user']!r}.")
        try:
            fleet = selectors.fleet_get(slug=options["fleet"])
            if action in ("start", "switch") and options["policy_version"] is None:
                raise CommandError(f"`{action}` needs --policy-version N.")
            if action == "start":
                services.rollout_start(actor=actor, fleet=fleet, version=options["policy_version"])
            elif action == "advance":
                services.rollout_advance(actor=actor, fleet=fleet, to_stage=options["to_stage"])
            elif action == "pause":
                services.rollout_pause(actor=actor, fleet=fleet)
            elif action == "resume":
                services.rollout_resume(actor=actor, fleet=fleet)
            elif action == "rollback":
                services.rollout_rollback(actor=actor, fleet=fleet, reason=options["reason"])
            elif action == "complete":
                services.rollout_complete(actor=actor, fleet=fleet)
            elif action == "switch":
                services.fleet_switch_version(
                    actor=actor, fleet=fleet, version=options["policy_version"]
                )
        except ApplicationError as error:
            raise CommandError(f"{error.code}: {error.message}") from error
        status = selectors.rollout_status(fleet)
        self.stdout.write(json.dumps(status, cls=DjangoJSONEncoder, indent=2))
