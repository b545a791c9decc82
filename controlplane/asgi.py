"""ASGI entry point: HTTP (Django) and WebSockets (Channels) from one process."""

import gc
import os
from typing import Any

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

# Django must be set up before anything imports models.
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from controlplane.routing import (  # noqa: E402
    browser_websocket_urlpatterns,
    device_websocket_urlpatterns,
)
from telemetry.ingest.fastpath import TelemetryIngestApp  # noqa: E402

device_websockets = URLRouter(device_websocket_urlpatterns)
# Browser pages use session cookies: check the Origin against ALLOWED_HOSTS.
browser_websockets = AllowedHostsOriginValidator(
    AuthMiddlewareStack(URLRouter(browser_websocket_urlpatterns))
)


async def websocket_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Devices (bearer token, no Origin header) and browsers (session, Origin checked)."""
    app = device_websockets if scope["path"].startswith("/ws/device/") else browser_websockets
    await app(scope, receive, send)


# Telemetry ingest, the hottest path, is answered before Django (telemetry/ingest/fastpath.py).
application = ProtocolTypeRouter(
    {"http": TelemetryIngestApp(django_asgi_app), "websocket": websocket_app}
)

# Start-up objects live as long as the process: frozen, full GC passes skip them (docs/capacity.md).
gc.collect()
gc.freeze()
