"""DashboardConsumer: `/ws/ui/fleets/<slug>/dashboard/`, the live feed of a fleet's dashboard.

Browsers only (session cookie; the Origin is checked in controlplane/asgi.py). A viewer (or
higher) connects, then says which view it shows:

    → {"type": "subscribe", "window": "1h", "task_type": "voice"}       (filters optional)
    ← {"type": "subscribed", "view": {...}, "view_key": "window=1h&task_type=voice"}
    ← {"type": "dashboard", "view_key": "...", "payload": {...}}        (each update)

`"snapshot": true` in a subscribe also sends the view's payload at once (used when the page
switches window or filters). Snapshots are computed off the message loop, at most one per
SNAPSHOT_MIN_INTERVAL_S per socket, the latest asked for winning (a burst of filter changes
costs two computations, not one each), and sockets of this process asking for the same view
at the same moment share one computation. A malformed, oversized or unknown message gets
`{"type": "error", "code", "message", "details"}` and the socket stays open with its current
view; anonymous users are closed with 4401, users without a role with 4403, an unknown fleet
with 4404. The payloads are computed once per view by dashboards.feed and arrive here as text
through the view's channel-layer group; this consumer only forwards them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from typing import Any, Final

from channels.db import database_sync_to_async

from controlplane import json_guard
from controlplane.exceptions import ApplicationError
from controlplane.roles import Role, user_role
from routing_policies.models import Fleet

from ..browser_feed import BrowserFeedConsumer
from ..close_codes import CLOSE_FORBIDDEN, CLOSE_NOT_FOUND
from ..rollups.segments import segment_named
from . import feed
from .schemas import parse_view
from .selectors import DashboardView, fleet_dashboard

logger = logging.getLogger(__name__)

MAX_MESSAGE_BYTES: Final = 4096
# A snapshot of a 24-hour view over millions of events is ~0.5 s of database work, on the
# process's one sync thread that device sockets use too: at most one per socket this often.
SNAPSHOT_MIN_INTERVAL_S = 1.0


def _snapshot(fleet: Fleet, view: DashboardView) -> str:
    payload = fleet_dashboard(fleet=fleet, view=view)
    payload["computation"] = uuid.uuid4().hex
    return feed.encode(payload)


# Snapshots being computed in this process, by (event loop, fleet, view): joined, not repeated.
_computing: dict[tuple[int, int, str], asyncio.Future[str]] = {}


async def shared_snapshot(fleet: Fleet, view: DashboardView) -> str:
    """The view's snapshot; a request for one already being computed waits for that one."""
    key = (id(asyncio.get_running_loop()), fleet.pk, view.key)
    future = _computing.get(key)
    if future is None:
        future = asyncio.ensure_future(database_sync_to_async(_snapshot)(fleet, view))
        _computing[key] = future
        future.add_done_callback(lambda _: _computing.pop(key, None))
    return await asyncio.shield(future)


class DashboardConsumer(BrowserFeedConsumer):
    """One browser's dashboard socket: joined to the group of the view it shows."""

    fleet: Fleet | None = None
    view_key: str | None = None
    _refresher: asyncio.Task[None] | None = None
    _snapshots: asyncio.Task[None] | None = None
    _wanted: DashboardView | None = None  # the latest snapshot asked for, not yet sent
    _last_snapshot_at = float("-inf")

    def admit(self, user: Any) -> int | None:
        slug = str(self.scope["url_route"]["kwargs"]["slug"])
        fleet = Fleet.objects.filter(slug=slug).first()
        if user_role(user) < Role.VIEWER:
            return CLOSE_FORBIDDEN
        if fleet is None:
            return CLOSE_NOT_FOUND
        self.fleet = fleet
        return None

    async def disconnect(self, code: int) -> None:
        for task in (self._refresher, self._snapshots):
            if task is not None:
                task.cancel()
        await self._leave()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.fleet is None:
            return
        if text_data is None:
            await self._error("bad_message", "Send JSON text frames, not binary.")
            return
        if len(text_data.encode()) > MAX_MESSAGE_BYTES:
            await self._error("too_large", f"A message is at most {MAX_MESSAGE_BYTES} bytes.")
            return
        try:
            message = json_guard.loads(text_data)
        except json_guard.JsonRefused as refused:
            await self._error("bad_message", refused.message, details=refused.details)
            return
        except ValueError:
            await self._error("bad_message", "A message must be a JSON object.")
            return
        if not isinstance(message, dict):
            await self._error("bad_message", "A message must be a JSON object.")
            return
        kind = message.get("type")
        if kind == "subscribe":
            await self._subscribe(message)
        elif kind == "ping":
            await self.send(text_data='{"type":"pong"}')
        else:
            await self._error(
                "unknown_type",
                f"Unknown message type {str(kind)[:40]!r}; send subscribe or ping.",
                details=[{"field": "type"}],
            )

    async def _subscribe(self, message: dict[str, Any]) -> None:
        assert self.fleet is not None
        params = {k: v for k, v in message.items() if k not in ("type", "snapshot")}
        try:
            view = parse_view(params)
            # A segment filter names one of this fleet's segments (refused as on the API).
            await database_sync_to_async(segment_named)(self.fleet.pk, view.segment)
        except ApplicationError as exc:
            await self._error(exc.code, exc.message, details=exc.details)
            return
        if view.key != self.view_key:
            await self._leave()
            self.view_key = view.key
            await self.channel_layer.group_add(
                feed.group_name(self.fleet.pk, view.key), self.channel_name
            )
        await database_sync_to_async(feed.view_subscribe)(fleet_id=self.fleet.pk, view_key=view.key)
        if self._refresher is None:
            self._refresher = asyncio.create_task(self._keep_subscribed())
        await self.send(
            text_data=json.dumps(
                {"type": "subscribed", "view": view.as_json(), "view_key": view.key}
            )
        )
        if message.get("snapshot") is True:
            self._wanted = view
            if self._snapshots is None or self._snapshots.done():
                self._snapshots = asyncio.create_task(self._send_snapshots())

    async def _send_snapshots(self) -> None:
        """Send the latest snapshot asked for, at most one per SNAPSHOT_MIN_INTERVAL_S."""
        loop = asyncio.get_running_loop()
        while self._wanted is not None and self.fleet is not None:
            wait = self._last_snapshot_at + SNAPSHOT_MIN_INTERVAL_S - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            view, self._wanted = self._wanted, None
            if view is None or view.key != self.view_key:
                continue  # the page has moved on to another view since
            try:
                text = await shared_snapshot(self.fleet, view)
            except Exception:
                logger.warning("dashboard.snapshot_failed fleet=%s", self.fleet.pk, exc_info=True)
                await self._error("snapshot_failed", "The view could not be computed; try again.")
                continue
            finally:
                self._last_snapshot_at = loop.time()
            if view.key == self.view_key:
                try:
                    await self.send(text_data=text)
                except Exception:  # the socket closed meanwhile: nobody to tell
                    return

    async def _keep_subscribed(self) -> None:
        """Renew the view's registration while the socket is open (it expires otherwise)."""
        while True:
            await asyncio.sleep(feed.REFRESH_EVERY_S)
            if self.fleet is not None and self.view_key is not None:
                try:
                    await database_sync_to_async(feed.view_subscribe)(
                        fleet_id=self.fleet.pk, view_key=self.view_key
                    )
                except Exception:  # Redis away for a moment: try again next round
                    logger.warning("dashboard.renew_failed fleet=%s", self.fleet.pk)

    async def _leave(self) -> None:
        if self.fleet is not None and self.view_key is not None:
            with contextlib.suppress(Exception):
                await self.channel_layer.group_discard(
                    feed.group_name(self.fleet.pk, self.view_key), self.channel_name
                )
        self.view_key = None

    async def _error(
        self, code: str, message: str, details: list[dict[str, Any]] | None = None
    ) -> None:
        await self.send(
            text_data=json.dumps(
                {"type": "error", "code": code, "message": message, "details": details or []}
            )
        )

    async def dashboard_update(self, event: dict[str, Any]) -> None:
        """A computed payload of the view this socket shows (dropped after a view change)."""
        if event.get("view_key") == self.view_key:
            await self.send(text_data=event["text"])
