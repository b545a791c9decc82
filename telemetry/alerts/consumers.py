"""AlertFeedConsumer: `/ws/ui/alerts/`, the live alert banner of every open page.

Browsers only (session cookie; the Origin is checked in controlplane/asgi.py). A viewer (or
higher) connects and at once gets what fires now; then every change:

    ← {"type": "alerts", "fleet": "<slug>" | null, "firing": [...], "event": {...} | null}

`fleet` null in the first message means "every fleet" (`firing` lists all); later messages
replace the list of their fleet. The socket takes no commands: anything sent gets an
`{"type": "error", ...}` and the socket stays open (an oversized frame is refused the same
way). Anonymous users are closed with 4401, users without a role with 4403.
"""

from __future__ import annotations

import json
from typing import Any, Final

from channels.db import database_sync_to_async

from controlplane.roles import Role, user_role

from ..browser_feed import BrowserFeedConsumer
from ..close_codes import CLOSE_FORBIDDEN
from .notify import ALERTS_GROUP
from .selectors import firing_alerts
from .tasks import embedded_beat_start

MAX_MESSAGE_BYTES: Final = 1024


class AlertFeedConsumer(BrowserFeedConsumer):
    """Forwards alert changes from the channel-layer group to one page."""

    joined = False

    def admit(self, user: Any) -> int | None:
        return CLOSE_FORBIDDEN if user_role(user) < Role.VIEWER else None

    async def admitted(self) -> None:
        embedded_beat_start()  # embedded mode only: its stand-in for Celery beat
        await self.channel_layer.group_add(ALERTS_GROUP, self.channel_name)
        self.joined = True
        firing = await database_sync_to_async(firing_alerts)()
        await self.send(
            text_data=json.dumps({"type": "alerts", "fleet": None, "firing": firing, "event": None})
        )

    async def disconnect(self, code: int) -> None:
        if self.joined:
            await self.channel_layer.group_discard(ALERTS_GROUP, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        size = len(text_data.encode()) if text_data is not None else len(bytes_data or b"")
        if size > MAX_MESSAGE_BYTES:
            code, message = "too_large", f"Messages are at most {MAX_MESSAGE_BYTES} bytes."
        else:
            code, message = "read_only", "This feed takes no messages; it only sends alerts."
        await self.send(
            text_data=json.dumps({"type": "error", "code": code, "message": message, "details": []})
        )

    async def alerts_changed(self, event: dict[str, Any]) -> None:
        """A fleet's firing alerts changed (alerts.notify.broadcast_alerts)."""
        await self.send(
            text_data=json.dumps(
                {
                    "type": "alerts",
                    "fleet": event["fleet"],
                    "firing": event["firing"],
                    "event": event.get("event"),
                }
            )
        )
