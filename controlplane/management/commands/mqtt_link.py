"""`manage.py mqtt_link`: the control plane's end of the MQTT device link (docs/PROTOCOL.md,
"MQTT"). Run as many as the load needs: they share the devices' messages through the broker's
shared subscriptions. Composed here, where the parts are assembled: routing_policies' link
lands acks and presence, and hands telemetry to telemetry's ingest (which routing_policies
never imports)."""

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from routing_policies.mqtt.link import MqttLink
from routing_policies.mqtt.metrics import metrics_serve
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
            "--metrics-port",
            type=int,
            default=None,
            help="serve Prometheus metrics (messages, drops by reason) on this port at /metrics",
        )
        parser.add_argument(
            "--metrics-host", default="127.0.0.1", help="the address the metrics listen on"
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
        if options["metrics_port"] is not None:
            metrics_serve(link, options["metrics_port"], options["metrics_host"])
        try:
            link.run_forever(reconcile_every_s=options["reconcile_every"])
        except KeyboardInterrupt:
            self.stdout.write(f"stopped; dropped: {dict(link.drops.counts)}")
