"""`manage.py backtest`: replay the draft or a version over a window of recorded events, here
and now (the same service as the API and the page; docs/lab.md)."""

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from controlplane.api import input_validate
from controlplane.exceptions import ApplicationError, NotFound
from lab.backtests.models import BacktestStatus
from lab.backtests.panels import headline_text
from lab.backtests.schemas import BacktestStartSerializer
from lab.backtests.services import backtest_run, backtest_start
from lab.schemas import version_ref_text
from routing_policies.selectors import fleet_get


class Command(BaseCommand):
    """Run one backtest in this process and print its headline, self-check and cells."""

    help = (
        "Replay the draft (default) or a published version (--subject N) over the last "
        "--hours (24) of a fleet's recorded events; print the figures beside the stable "
        "version's, or --json."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("fleet", help="the fleet's slug")
        # (--version is Django's own: the subject is --subject)
        parser.add_argument(
            "--subject", default="draft", help='what to replay: "draft" or a version number'
        )
        parser.add_argument("--revision", type=int, help="the draft's revision (checked)")
        parser.add_argument("--hours", type=int, default=24)
        parser.add_argument("--end", help="the window's end, RFC 3339 (default now)")
        parser.add_argument("--cohort", choices=["stable", "candidate"])
        parser.add_argument("--cell", action="append", dest="cells", help="repeatable")
        parser.add_argument(
            "--ran",
            type=int,
            action="append",
            dest="versions",
            help="only events of this version (repeatable)",
        )
        parser.add_argument(
            "--segment", help="only the events of this segment's devices, as they run it"
        )
        parser.add_argument("--json", action="store_true", help="print the whole result")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            fleet = fleet_get(slug=options["fleet"])
        except NotFound as exc:
            raise CommandError(exc.message) from None
        data: dict[str, Any] = {
            "version": version_ref_text(options["subject"]),
            "hours": options["hours"],
        }
        for name in ("revision", "end", "cohort", "cells", "versions", "segment"):
            if options[name] is not None:
                data[name] = options[name]
        try:
            values = input_validate(BacktestStartSerializer, data)
            backtest, created = backtest_start(actor=None, fleet=fleet, **values)
        except ApplicationError as exc:
            details = "; ".join(f"{d.get('field')}: {d.get('message')}" for d in exc.details)
            # The details name the fields; the message alone when there are none (never both:
            # a one-field message already says what its detail says).
            raise CommandError(details or exc.message) from None
        if created or backtest.status == BacktestStatus.QUEUED:
            backtest_run(backtest_id=backtest.pk)
        backtest.refresh_from_db()
        if backtest.status != BacktestStatus.DONE or backtest.result is None:
            raise CommandError(f"backtest {backtest.pk} is {backtest.status}: {backtest.error}")
        result = backtest.result
        if options["json"]:
            self.stdout.write(json.dumps(result, indent=2, default=str))
            return
        check = result["self_check"]
        self.stdout.write(
            f"backtest {backtest.pk}: {backtest.label} over {data['hours']} h, "
            f"{result['events']} events, against v{backtest.stable_version}"
            + (f", segment {result['segment']['name']}" if result.get("segment") else "")
        )
        self.stdout.write(f"  {headline_text(result)}")
        agreement = check["agreement"]
        error = check["latency_error_max"]
        self.stdout.write(
            "  self-check: replaying the running version reproduces "
            f"{'–' if agreement is None else f'{agreement:.2%}'} of {check['eligible']} "
            f"decisions; latency error at most {'–' if error is None else f'{error:.1%}'}"
        )
        privacy = result["privacy"]
        flagged = ", ".join(privacy["flagged_cells"])
        self.stdout.write(
            "  privacy: ok"
            if privacy["ok"]
            else f"  privacy: sends sensitive data off the device in {flagged}"
        )
        for cell in result["cells"]:
            stable, subject = cell["stable"], cell["subject"]
            mark = "*" if cell["changed"] else " "
            self.stdout.write(
                f"  {mark} {cell['label']:<32} α {_pct(stable['alpha'])} → "
                f"{_pct(subject['alpha'])}  cloud {_pct(stable['cloud_share'])} → "
                f"{_pct(subject['cloud_share'])}"
            )


def _pct(value: float | None) -> str:
    return "   –" if value is None else f"{value * 100:3.0f}%"
