"""`manage.py mqtt_link`: the control plane's end of the MQTT device link (docs/PROTOCOL.md,
"MQTT"). Run as many as the load needs: they share the devices' messages through the broker's
shared subscriptions. Composed here, where the parts are assembled: routing_policies' link
lands acks and presence, and hands telemetry to telemetry's ingest (which routing_policies
never imports)."""

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from routing_policies.mqtt.link import MqttLink
from telemetry.ingest.mqtt import telemetry_message_ingest


class Command(BaseCommand):
    help = "Read devices' acks, presence and telemetry from the MQTT broker (MQTT_URL)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--name",
            default="",
            help="this link's own name (one per running link, kept across restarts): the "
            "broker keeps its session while it is away, so a restart loses no message",
        )
        parser.add_argument(
            "--reconcile-every",
            type=float,
            default=None,
            help="seconds between checks that the broker holds every fleet's state "
            "(default MQTT_RECONCILE_S)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not settings.MQTT_URL:
            raise CommandError("MQTT_URL is not set: the MQTT link is off.")
        link = MqttLink(telemetry=telemetry_message_ingest, name=options["name"])
        try:
            link.run_forever(reconcile_every_s=options["reconcile_every"])
        except KeyboardInterrupt:
            self.stdout.write(f"stopped; dropped: {dict(link.drops.counts)}")
