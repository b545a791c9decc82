"""Published policy documents as JSON text, per process: a version never changes, so an entry
is never stale, and a push builds each version's `policy` frame once from it."""

import asyncio
from collections import OrderedDict

from channels.db import database_sync_to_async

from ..policies.selectors import published_document_json


class DocumentCache:
    """The documents of the versions this process sent lately, read from the database once."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._texts: OrderedDict[tuple[int, int], str] = OrderedDict()
        self._pending: dict[tuple[int, int], asyncio.Future[str | None]] = {}

    async def body(self, fleet_id: int, number: int) -> str | None:
        """The document of `number` without its outer braces, ready to splice into a frame
        (`frames.policy_frame`); None when the fleet has no such version."""
        key = (fleet_id, number)
        text: str | None = self._texts.get(key)
        if text is not None:
            self._texts.move_to_end(key)
            return text
        pending = self._pending.get(key)
        if pending is not None:
            result: str | None = await pending
            return result
        future: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._pending[key] = future
        try:
            document = await database_sync_to_async(published_document_json)(
                fleet_id=fleet_id, number=number
            )
            text = document[1:-1] if document is not None else None
            if text is not None:
                self._texts[key] = text
                while len(self._texts) > self.size:
                    self._texts.popitem(last=False)
            future.set_result(text)
            return text
        except BaseException as error:
            future.set_exception(error)
            raise
        finally:
            del self._pending[key]


documents = DocumentCache()
