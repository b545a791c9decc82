"""`manage.py simulate_fleet`: run the fleet simulator (`edge_sdk.simulate`) against a server.

Looks the fleet up (default: the demo fleet) and its enrolment key: keys are stored hashed,
so the command takes `--fleet-key` and checks it against the fleet, and for the demo fleet
uses the demo's known key. For the buggy-candidate scenario it passes the fleet's stable
version, so every version published after it is the buggy candidate.
"""

import argparse
import asyncio
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from controlplane.exceptions import ApplicationError
from edge_sdk.simulate.__main__ import add_arguments, config_from_args
from edge_sdk.simulate.__main__ import run as run_fleet
from routing_policies.demo import DEMO_FLEET, DEMO_FLEET_KEY
from routing_policies.devices.tokens import hash_secret
from routing_policies.policies.selectors import fleet_get
from routing_policies.rollouts.models import FleetRouting
from routing_policies.rollouts.selectors import fleet_assignment


class Command(BaseCommand):
    """Simulate a fleet of devices (enrol, hold sockets, route tasks, send telemetry)."""

    help = (
        "Run simulated devices of a fleet against a running control plane "
        "(flags as python -m edge_sdk.simulate)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--fleet", default=DEMO_FLEET, help=f"fleet slug ({DEMO_FLEET})")
        add_arguments(parser, url_required=False, fleet_key_required=False)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            fleet = fleet_get(slug=options["fleet"])
        except ApplicationError as error:
            raise CommandError(str(error)) from error
        key_hash = (
            FleetRouting.objects.filter(fleet=fleet)
            .values_list("enrollment_key_hash", flat=True)
            .first()
        )
        if not key_hash:
            raise CommandError(
                f"fleet {fleet.slug} has no enrolment key; issue one on its devices page"
            )
        key = options["fleet_key"]
        if key is None and fleet.slug == DEMO_FLEET:
            key = DEMO_FLEET_KEY
        if key is None:
            raise CommandError(
                f"enrolment keys are stored hashed: pass --fleet-key for fleet {fleet.slug}"
            )
        if hash_secret(key) != key_hash:
            raise CommandError(f"that is not fleet {fleet.slug}'s current enrolment key")
        options["fleet_key"] = key
        if options["stable_version"] is None and options["buggy_version"] is None:
            options["stable_version"] = fleet_assignment(fleet.pk).stable
        try:
            config = config_from_args(argparse.Namespace(**options))
        except ValueError as error:
            raise CommandError(str(error)) from error
        asyncio.run(run_fleet(config))
