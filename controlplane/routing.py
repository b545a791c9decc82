"""WebSocket routes.

Devices authenticate with a bearer token and send no Origin header, so their route has no
origin check and no session; browser feeds (cookie sessions) are origin-checked in asgi.py.
"""

from typing import Any

from django.urls import path

from routing_policies.push.consumer import DeviceConsumer
from telemetry.alerts.consumers import AlertFeedConsumer
from telemetry.dashboards.consumers import DashboardConsumer

device_websocket_urlpatterns: list[Any] = [
    path("ws/device/", DeviceConsumer.as_asgi()),
]
browser_websocket_urlpatterns: list[Any] = [
    path("ws/ui/alerts/", AlertFeedConsumer.as_asgi()),
    path("ws/ui/fleets/<slug:slug>/dashboard/", DashboardConsumer.as_asgi()),
]
