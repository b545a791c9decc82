"""`manage.py mqtt_access sync [--dry-run]`: bring Mosquitto's dynamic-security clients in line
with the live devices (docs/mqtt-brokers.md); prints what it found and did as JSON."""

import json
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from routing_policies.broker_access import dynsec
from routing_policies.broker_access.services import (
    DynsecRefused,
    broker_access_sync,
    dynsec_enabled,
)


class Command(BaseCommand):
    """Reconcile the broker's device clients with the devices' table."""

    help = (
        "sync: delete the broker clients of revoked, deleted or re-enrolled devices, make the "
        "fleets' and the control plane's roles, and list live devices the broker lacks."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["sync"])
        parser.add_argument("--dry-run", action="store_true", help="report, change nothing")

    def handle(self, *args: Any, **options: Any) -> None:
        if not dynsec_enabled():
            url = getattr(settings, "MQTT_URL", "")
            raise CommandError(
                f"MQTT_ACCESS={settings.MQTT_ACCESS!r}, MQTT_URL={url!r}: sync needs "
                "MQTT_ACCESS=dynsec and a broker."
            )
        try:
            report = broker_access_sync(dry_run=options["dry_run"])
        except (dynsec.BrokerUnavailable, DynsecRefused) as exc:
            raise CommandError(f"The broker could not be synced: {exc}") from exc
        self.stdout.write(json.dumps(report.as_dict(), indent=2))
