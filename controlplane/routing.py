"""WebSocket URL routes (device push and live pages are added by later capabilities)."""

from typing import Any

websocket_urlpatterns: list[Any] = []
