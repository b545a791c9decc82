"""`manage.py mqtt_reconcile [--all]`: publish every fleet's retained MQTT state that the broker
lacks; with --all (a fresh or emptied broker), every fleet's state, cloud pressure and the
documents its devices run."""

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from routing_policies.mqtt.publish import fleets_reconcile


class Command(BaseCommand):
    help = "Publish the fleets' retained MQTT topics the broker lacks (--all: all of them)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--all", action="store_true", help="republish everything")

    def handle(self, *args: Any, **options: Any) -> None:
        if not settings.MQTT_URL:
            raise CommandError("MQTT_URL is not set: the MQTT link is off.")
        publishes = fleets_reconcile(force=options["all"])
        self.stdout.write(f"{publishes} publishes")
