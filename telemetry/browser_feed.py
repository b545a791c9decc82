"""What the browser feeds (the dashboard and alert sockets) share: who may follow.

A socket is accepted first, then closed with a code (`close_codes`) when it may not follow, so
the page can tell why: anonymous users 4401; then the feed's own word (`admit`: a user without
a role 4403, an unknown fleet 4404), read in one database call.
"""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from .close_codes import CLOSE_UNAUTHENTICATED


class BrowserFeedConsumer(AsyncWebsocketConsumer):  # type: ignore[misc]  # channels is untyped
    """A browser's feed: `admit` says whether the signed-in user may follow it, `admitted`
    starts following."""

    async def connect(self) -> None:
        await self.accept()
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        refused = await database_sync_to_async(self.admit)(user)
        if refused is not None:
            await self.close(code=refused)
            return
        await self.admitted()

    def admit(self, user: Any) -> int | None:
        """The close code refusing `user` (a database read, off the event loop), or None."""
        raise NotImplementedError

    async def admitted(self) -> None:
        """The user may follow: join the feed."""
