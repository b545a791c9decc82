"""`manage.py telemetry_maintain`: the periodic telemetry work, run by hand or from cron."""

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from telemetry.ingest.services import landed_batches_process
from telemetry.rollups.maintenance import rollups_compact, storage_maintain


class Command(BaseCommand):
    """Sweep landed batches, compact rollups, and/or apply partitions and retention."""

    help = (
        "Run telemetry's periodic work once: --sweep (process landed batches), --compact "
        "(merge partial rollups), --storage (partitions ahead, retention). All when none given."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--sweep", action="store_true", help="process every landed batch")
        parser.add_argument("--compact", action="store_true", help="merge partial rollup rows")
        parser.add_argument("--storage", action="store_true", help="partitions and retention")

    def handle(self, *args: Any, **options: Any) -> None:
        run_all = not (options["sweep"] or options["compact"] or options["storage"])
        if run_all or options["sweep"]:
            events = 0
            while True:
                result = landed_batches_process()
                events += result.events
                if not result.batches:
                    break
            self.stdout.write(f"processed {events} landed events")
        if run_all or options["compact"]:
            self.stdout.write(f"compacted into {rollups_compact()} rollup rows")
        if run_all or options["storage"]:
            storage = storage_maintain()
            self.stdout.write(
                f"partitions created {len(storage.partitions_created)}, dropped "
                f"{len(storage.partitions_dropped)}; ids pruned {storage.event_keys_deleted}; "
                f"rollup rows pruned {storage.rollups_deleted}"
            )
