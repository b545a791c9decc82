"""Celery tasks of the live dashboards, and the receiver that schedules them (dashboards.feed).

Thin: each calls one function of the feed. The receiver of `telemetry.signals.rollups_stored`
(connected in `telemetry.apps`) pushes at once or enqueues one deferred `dashboard_push`.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from django.conf import settings

from . import feed

logger = logging.getLogger(__name__)


@shared_task(name="telemetry.dashboard_push", ignore_result=True)  # type: ignore[untyped-decorator]
def dashboard_push(fleet_id: int) -> int:
    """Compute each open dashboard view of the fleet once and fan it out (dashboards.feed)."""
    return feed.dashboard_views_push(fleet_id=fleet_id)


@shared_task(name="telemetry.dashboard_refresh", ignore_result=True)  # type: ignore[untyped-decorator]
def dashboard_refresh() -> int:
    """Beat: push every open dashboard view, so windows slide while a fleet is quiet."""
    return feed.dashboard_all_refresh()


def on_rollups_stored(sender: Any, fleet_ids: frozenset[int], **kwargs: Any) -> None:
    """`rollups_stored` receiver: schedule one push per fleet that has open dashboards."""
    interval_s: float = settings.DASHBOARD_PUSH_DELAY_S
    for fleet_id in sorted(fleet_ids):
        try:
            if not feed.subscribed_views(fleet_id):
                continue
            if feed.push_now_or_mark_due(fleet_id=fleet_id, interval_s=interval_s):
                dashboard_push.apply_async(args=[fleet_id], countdown=interval_s)
        except Exception:  # a dashboard must never break the ingest worker
            logger.exception("dashboard.schedule_failed fleet=%s", fleet_id)
