"""Backtest reads: one backtest as the API and pages show it, a fleet's latest ones."""

from typing import Any

from django.db.models import QuerySet

from controlplane.exceptions import NotFound
from routing_policies.models import Fleet

from .models import Backtest, BacktestStatus


def backtest_get(*, fleet: Fleet, backtest_id: int) -> Backtest:
    """The fleet's backtest with this id; 404 otherwise."""
    backtest = Backtest.objects.filter(fleet=fleet, pk=backtest_id).first()
    if backtest is None:
        raise NotFound(f"Fleet {fleet.slug!r} has no backtest {backtest_id}.")
    return backtest


def backtest_list(*, fleet: Fleet, limit: int = 20) -> QuerySet[Backtest]:
    """The fleet's latest backtests, newest first."""
    return Backtest.objects.filter(fleet=fleet).order_by("-created_at", "-id")[:limit]


def backtest_latest_done(
    *, fleet_id: int, subject: str, version: int | None = None, revision: int | None = None
) -> Backtest | None:
    """The newest finished backtest of the draft at `revision`, or of version `version`, of
    the whole fleet (a segment's figures are not the fleet's)."""
    query = Backtest.objects.filter(
        fleet_id=fleet_id, subject=subject, status=BacktestStatus.DONE
    ).exclude(filters__has_key="segment")
    if version is not None:
        query = query.filter(version=version)
    if revision is not None:
        query = query.filter(revision=revision)
    return query.order_by("-finished_at", "-id").first()


def backtest_out(backtest: Backtest, *, slug: str) -> dict[str, Any]:
    """The API's view of a backtest (schemas.BacktestSerializer)."""
    return {
        "id": backtest.pk,
        "fleet": slug,
        "subject": backtest.subject,
        "version": backtest.version,
        "revision": backtest.revision,
        "label": backtest.label,
        "stable_version": backtest.stable_version,
        "start": backtest.start,
        "end": backtest.end,
        "filters": backtest.filters,
        "status": backtest.status,
        "progress": backtest.progress,
        "events_total": backtest.events_total,
        "events_done": backtest.events_done,
        "error": backtest.error,
        "created_at": backtest.created_at,
        "finished_at": backtest.finished_at,
        "url": f"/api/v1/fleets/{slug}/lab/backtests/{backtest.pk}",
        "result": backtest.result,
    }
