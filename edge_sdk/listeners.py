"""The app's listeners of a device: `fn(event, details)`, each called in turn, never fatal."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

__all__ = ["Listener", "Listeners"]

logger = logging.getLogger(__name__)

Listener = Callable[[str, dict[str, Any]], None]


class Listeners:
    """The listeners added to one device; one that raises is logged and the others still run."""

    __slots__ = ("_listeners",)

    def __init__(self) -> None:
        self._listeners: list[Listener] = []

    def add(self, fn: Listener) -> None:
        """Call fn(event, details) on every event from now on."""
        self._listeners.append(fn)

    def emit(self, event: str, details: dict[str, Any]) -> None:
        """Tell every listener, in the order they were added."""
        for listener in self._listeners:
            try:
                listener(event, details)
            except Exception:
                logger.warning("device.listener_failed event=%s", event, exc_info=True)
