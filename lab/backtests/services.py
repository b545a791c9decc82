"""Backtest writes: start one (validated, kept per subject, window and filters) and run it.

`backtest_start` checks the request, snapshots the subject's cells and queues the run on
commit (a Celery task; embedded mode runs it in process). Asking again for the same subject at
the same revision, window and filters returns the backtest already kept, unless it failed.
`backtest_run` replays the window (engine.py) and stores progress and the result.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Final

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from controlplane.exceptions import Conflict, NotFound
from routing_policies.cell_schema import CellKey, cell_key_label
from routing_policies.documents import Table
from routing_policies.models import Fleet, FleetRouting, PolicyVersion
from routing_policies.pricing import CloudPrice
from routing_policies.selectors import (
    draft_get,
    shadow_refine_rates,
    table_cells,
    version_table,
)
from routing_policies.services import Actor, actor_user

from ..replay import DEFAULT_HOURS, EventFilters, recorded_count
from ..segments import lab_segment, segment_devices, segment_other_tables, segment_table
from .engine import BacktestInput, backtest_compute
from .models import Backtest, BacktestStatus

logger = logging.getLogger(__name__)

MAX_FILTER_VERSIONS: Final = 100
MAX_FILTER_CELLS: Final = 4096
MAX_CELL_NAME: Final = 100
# Progress is written at most this often (a day of events is a few hundred batches).
_PROGRESS_EVERY_S: Final = 0.5

BacktestQueue = Callable[[int], None]
_queue: BacktestQueue | None = None


def backtest_queue_register(queue: BacktestQueue) -> None:
    """How a started backtest is run (tasks.py registers the Celery task)."""
    global _queue
    _queue = queue


def _state(field: str, message: str, code: str) -> Conflict:
    """A well-formed request the fleet's state (or the clock) cannot serve: 409."""
    return Conflict(
        f"{field}: {message}", code=code, details=[{"field": field, "message": message}]
    )


def _subject(fleet: Fleet, version: int | str, revision: int | None) -> tuple[PolicyVersion, str]:
    if version == "draft":
        draft = draft_get(fleet=fleet)
        if draft is None:
            raise _state(
                "version", f"fleet {fleet.slug!r} has no draft; name a version", "no_draft"
            )
        _revision_check(revision, draft, f"The draft is at revision {draft.revision}")
        return draft, "draft"
    published = PolicyVersion.objects.filter(fleet=fleet, number=version).first()
    if published is None:
        raise NotFound(
            f"Fleet {fleet.slug!r} has no published version {version}.",
            details=[{"field": "version", "message": f"no published version {version}"}],
        )
    where = f"v{version} was published at revision {published.revision}"
    _revision_check(revision, published, where)
    return published, "version"


def _revision_check(revision: int | None, subject: PolicyVersion, where: str) -> None:
    """The revision the caller looked at, if sent, must be the subject's (a draft moves on; a
    published version keeps the revision it was published at): else 409."""
    if revision is not None and revision != subject.revision:
        raise Conflict(
            f"{where}, not {revision}.",
            code="stale_revision",
            details=[{"field": "revision", "message": f"{where}"}],
        )


def _window(hours: int, end: datetime | None) -> tuple[datetime, datetime]:
    now = timezone.now()
    if end is None:
        # Whole minutes, so that asking again within the minute finds the same backtest.
        end = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    elif end > now + timedelta(minutes=5):
        raise _state("end", "must not be in the future", "end_in_future")
    if end < now - timedelta(hours=int(settings.TELEMETRY_RETENTION_DAYS) * 24):
        raise _state("end", "is older than the raw events are kept", "past_retention")
    return end - timedelta(hours=hours), end


def _filters(
    table: Table, versions: list[int] | None, cohort: str | None, cells: list[str] | None
) -> dict[str, Any]:
    filters: dict[str, Any] = {}
    if versions is not None:
        filters["versions"] = sorted(set(versions))
    if cohort is not None:
        filters["cohort"] = cohort
    if cells is not None:
        labels = {cell_key_label(key): key for key in table}
        keys: set[CellKey] = set()
        for index, label in enumerate(cells):
            if label not in labels:
                raise _state(
                    f"cells[{index}]",
                    f"{label!r} is not a cell of the subject (task_type/latency_budget/"
                    "privacy_tier, e.g. text/interactive/normal)",
                    "unknown_cell",
                )
            keys.add(labels[label])
        filters["cells"] = [list(key) for key in sorted(keys)]
    return filters


def _key(subject: PolicyVersion, start: datetime, end: datetime, filters: dict[str, Any]) -> str:
    identity = [subject.pk, subject.revision, start.isoformat(), end.isoformat(), filters]
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


@transaction.atomic
def backtest_start(
    *,
    actor: Actor,
    fleet: Fleet,
    version: int | str = "draft",
    revision: int | None = None,
    hours: int = DEFAULT_HOURS,
    end: datetime | None = None,
    versions: list[int] | None = None,
    cohort: str | None = None,
    cells: list[str] | None = None,
    segment: str | None = None,
) -> tuple[Backtest, bool]:
    """Start (or find) the backtest of `version` ("draft" or a published number; `revision`,
    when given, must be the subject's) over the `hours` up to `end` (default now), of the
    events of `versions`, `cohort`, `cells` and the devices of `segment` only (then every
    version replayed as a device of the segment runs it); (backtest, whether it is new).

    The values come checked by `schemas.BacktestStartSerializer`; here what needs the fleet's
    state or the clock, refused (404 / 409) naming the field."""
    subject, kind = _subject(fleet, version, revision)
    start, end = _window(hours, end)
    table = version_table(version=subject)
    filters = _filters(table, versions, cohort, cells)
    if segment is not None:
        # The segment's rule as it is now is kept (a later edit asks for another backtest),
        # and the subject is kept as a device of the segment runs it.
        scope = lab_segment(fleet=fleet, name=segment)
        table, overridden = segment_table(version=subject, table=table, segment=scope.name)
        filters["segment"] = {"name": scope.name, "rule": scope.rule, "overridden": overridden}
    routing = FleetRouting.objects.select_related("stable_version").filter(fleet=fleet).first()
    if routing is None or routing.stable_version is None or routing.stable_version.number is None:
        raise _state(
            "version", f"fleet {fleet.slug!r} has no stable version to compare with", "no_stable"
        )
    key = _key(subject, start, end, filters)
    kept = (
        Backtest.objects.filter(fleet=fleet, key=key)
        .exclude(status=BacktestStatus.FAILED)
        .order_by("-created_at")
        .first()
    )
    if kept is not None:
        return kept, False
    if segment is not None:
        # (after the key: a count of the moment, not part of what the backtest is of)
        filters["segment"]["devices_other_table"] = segment_other_tables(
            fleet_id=fleet.pk, rule=scope.rule, version=subject, segment=scope.name
        )
    backtest = Backtest.objects.create(
        fleet=fleet,
        key=key,
        subject=kind,
        policy_version=subject,
        version=subject.number,
        revision=subject.revision,
        subject_table=[[list(cell), values] for cell, values in sorted(table.items())],
        stable_version=routing.stable_version.number,
        start=start,
        end=end,
        filters=filters,
        created_by=actor_user(actor),
    )
    queue = _queue
    if queue is not None:
        transaction.on_commit(lambda: queue(backtest.pk))
    return backtest, True


def _published_tables(fleet_id: int, segment: str | None) -> tuple[dict[int, Table], list[int]]:
    """Every published version's table by number, as a device of `segment` runs it when one
    is named; and the numbers of the versions whose override for it changes a cell."""
    tables: dict[int, Table] = {}
    overriding: list[int] = []
    versions = PolicyVersion.objects.filter(fleet_id=fleet_id, number__isnull=False)
    for version in versions.order_by("number"):
        if version.number is None:
            continue
        table = version_table(version=version)
        if segment is not None:
            table, changed = segment_table(version=version, table=table, segment=segment)
            if changed:
                overriding.append(version.number)
        tables[version.number] = table
    return tables, overriding


def backtest_run(*, backtest_id: int) -> Backtest | None:
    """Replay a queued backtest and store its result (or why it failed); None if it is gone
    or already taken by another worker."""
    claimed = Backtest.objects.filter(pk=backtest_id, status=BacktestStatus.QUEUED).update(
        status=BacktestStatus.RUNNING, started_at=timezone.now()
    )
    if not claimed:
        return None
    backtest = Backtest.objects.select_related("fleet").get(pk=backtest_id)
    try:
        result = _replay(backtest)
    except Exception as exc:
        logger.exception("backtest %s failed", backtest_id)
        Backtest.objects.filter(pk=backtest_id).update(
            status=BacktestStatus.FAILED, error=str(exc)[:2000], finished_at=timezone.now()
        )
        raise
    Backtest.objects.filter(pk=backtest_id).update(
        status=BacktestStatus.DONE,
        result=result,
        events_done=result["events"],
        finished_at=timezone.now(),
    )
    backtest.refresh_from_db()
    return backtest


def _replay(backtest: Backtest) -> dict[str, Any]:
    fleet = backtest.fleet
    filters = backtest.filters or {}
    cells: list[CellKey] | None = None
    if "cells" in filters:
        cells = [(task, budget, tier) for task, budget, tier in filters["cells"]]
    segment = filters.get("segment")
    event_filters = EventFilters(
        versions=filters.get("versions"),
        cohort=filters.get("cohort"),
        cells=cells,
        segment_rule=segment["rule"] if segment else None,
    )
    total = recorded_count(
        fleet_id=fleet.pk, start=backtest.start, end=backtest.end, filters=event_filters
    )
    Backtest.objects.filter(pk=backtest.pk).update(events_total=total)
    tables, overriding = _published_tables(fleet.pk, segment["name"] if segment else None)
    versions = {number: table_cells(table) for number, table in tables.items()}
    subject_table = {
        (task, budget, tier): values for (task, budget, tier), values in backtest.subject_table
    }
    subject = table_cells(subject_table)
    last_write = [0.0]

    def progress(done: int, expected: int) -> None:
        now = timezone.now().timestamp()
        if now - last_write[0] >= _PROGRESS_EVERY_S:
            last_write[0] = now
            Backtest.objects.filter(pk=backtest.pk).update(events_done=done, events_total=expected)

    spec = BacktestInput(
        fleet_id=fleet.pk,
        start=backtest.start,
        end=backtest.end,
        subject=subject,
        stable=versions.get(backtest.stable_version, {}),
        versions=versions,
        price=CloudPrice.of_fleet(fleet),
        shadow_rates={
            "subject": shadow_refine_rates(subject_table),
            "stable": shadow_refine_rates(tables.get(backtest.stable_version, {})),
        },
        filters=event_filters,
    )
    result = backtest_compute(spec, total=total, progress=progress)
    result["headline"] = headline(result)
    if segment:
        result["segment"] = {
            "name": segment["name"],
            "rule": segment["rule"],
            "devices": segment_devices(fleet_id=fleet.pk, rule=segment["rule"]),
            "subject_overridden": segment["overridden"],
            "versions_overriding": overriding,
        }
    return result


def _percent_change(before: float | None, after: float | None) -> float | None:
    if before is None or after is None or before == 0:
        return None
    return (after - before) / before


def headline(result: dict[str, Any]) -> dict[str, Any]:
    """The figures the draft page shows beside Publish: stable → subject, both replayed."""
    stable, subject = result["overall"]["stable"], result["overall"]["subject"]
    cloud = ("cloud", "p95")
    return {
        "alpha": [stable["alpha"], subject["alpha"]],
        "cloud_p95_ms": [
            stable["latency_ms"][cloud[0]][cloud[1]],
            subject["latency_ms"][cloud[0]][cloud[1]],
        ],
        "cost": [stable["cost"], subject["cost"]],
        "cost_change": _percent_change(stable["cost"], subject["cost"]),
        "privacy_ok": result["privacy"]["ok"],
        "agreement": result["self_check"]["agreement"],
    }
