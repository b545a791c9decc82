"""The dashboards' live feed: one computation per (fleet, view) update, fanned out to every
browser that shows that view.

- Each open dashboard socket (dashboards.consumers.DashboardConsumer) joins the channel-layer
  group of its view and registers the view's key as subscribed, with an expiry it refreshes
  while the socket is open. The registry is a Redis sorted set per fleet (score = expiry), so
  the Celery worker sees what the web processes' browsers show; embedded (no Redis), a dict
  in the one process that does everything.
- When new rollups are stored (`telemetry.signals.rollups_stored`, after commit, in the worker),
  `on_rollups_stored` (dashboards.tasks) looks for subscribed views of those fleets. For a
  fleet that has some, at most one push per `DASHBOARD_PUSH_DELAY_S`
  (`push_now_or_mark_due`): the first rollups after a quiet spell are pushed
  at once by the worker that stored them (a queued task would wait behind that worker's drain,
  which keeps its slot while traffic flows); rollups stored within the interval mark the fleet
  "due" and enqueue ONE `telemetry.dashboard_push` for the end of the interval (or the next
  store past it pushes first). A push clears the "due" mark before it computes, so rollups
  stored while it computes cause the next push and none is left unshown.
- `dashboard_push` computes each subscribed view once (selectors.dashboard.fleet_dashboard),
  encodes it once, and `group_send`s the text to the view's group; every socket in it writes
  the same text. Each computation carries its own id, so a browser (and a test) can tell one
  computation fanned out from several.
- Celery beat runs `dashboard_refresh` every few seconds so windows slide and convergence
  moves while a fleet is quiet. Embedded there is no beat: views update as rollups arrive.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
import uuid
from typing import Any, Final
from urllib.parse import parse_qsl

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder

from controlplane.exceptions import ApplicationError
from routing_policies.models import Fleet

from ..redis_client import redis_client
from .schemas import parse_view
from .selectors import DashboardView, fleet_dashboard

logger = logging.getLogger(__name__)

SUBSCRIPTION_TTL_S: Final = 60.0
REFRESH_EVERY_S: Final = SUBSCRIPTION_TTL_S / 3
DUE_TTL_MS: Final = 10_000  # a lost push task stops blocking the next one after this
MAX_VIEWS_PER_FLEET: Final = 64
_VIEWS_KEY = "dashboard:views:{fleet_id}"
_FLEETS_KEY = "dashboard:fleets"
_DUE_KEY = "dashboard:due:{fleet_id}"
_RECENT_KEY = "dashboard:recent:{fleet_id}"
GROUP_MESSAGE_TYPE: Final = "dashboard.update"


def group_name(fleet_id: int, view_key: str) -> str:
    """The channel-layer group of one view of one fleet (ASCII, well under 100 characters)."""
    digest = hashlib.sha256(view_key.encode()).hexdigest()[:24]
    return f"dashboard.{fleet_id}.{digest}"


def _redis() -> Any:
    return redis_client(settings.REDIS_URL)


def _embedded() -> bool:
    return not settings.REDIS_URL


class _LocalRegistry:
    """Embedded mode: subscriptions of this (only) process."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.views: dict[int, dict[str, float]] = {}

    def add(self, fleet_id: int, view_key: str, expires_at: float) -> None:
        with self.lock:
            self.views.setdefault(fleet_id, {})[view_key] = expires_at

    def live(self, fleet_id: int, now: float) -> list[str]:
        with self.lock:
            views = self.views.get(fleet_id, {})
            for key in [k for k, expiry in views.items() if expiry < now]:
                del views[key]
            return sorted(views)

    def fleets(self, now: float) -> list[int]:
        with self.lock:
            return [f for f, views in self.views.items() if any(e >= now for e in views.values())]

    def forget(self, fleet_id: int, view_key: str) -> None:
        with self.lock:
            self.views.get(fleet_id, {}).pop(view_key, None)


_local = _LocalRegistry()


def view_subscribe(*, fleet_id: int, view_key: str) -> None:
    """Mark a view of a fleet as shown (again) for the next SUBSCRIPTION_TTL_S seconds."""
    expires_at = time.time() + SUBSCRIPTION_TTL_S
    if _embedded():
        _local.add(fleet_id, view_key, expires_at)
        return
    redis = _redis()
    pipe = redis.pipeline(transaction=False)
    pipe.zadd(_VIEWS_KEY.format(fleet_id=fleet_id), {view_key: expires_at})
    pipe.expire(_VIEWS_KEY.format(fleet_id=fleet_id), int(SUBSCRIPTION_TTL_S * 2))
    pipe.zadd(_FLEETS_KEY, {str(fleet_id): expires_at})
    pipe.execute()


def subscribed_views(fleet_id: int) -> list[str]:
    """Keys of this fleet's views that some open dashboard shows (expired ones dropped)."""
    now = time.time()
    if _embedded():
        return _local.live(fleet_id, now)
    redis = _redis()
    key = _VIEWS_KEY.format(fleet_id=fleet_id)
    pipe = redis.pipeline(transaction=False)
    pipe.zremrangebyscore(key, "-inf", now)
    pipe.zrange(key, 0, MAX_VIEWS_PER_FLEET - 1)
    _, members = pipe.execute()
    return [m.decode() if isinstance(m, bytes) else str(m) for m in members]


def subscribed_fleets() -> list[int]:
    """Fleets with at least one open dashboard."""
    now = time.time()
    if _embedded():
        return _local.fleets(now)
    redis = _redis()
    pipe = redis.pipeline(transaction=False)
    pipe.zremrangebyscore(_FLEETS_KEY, "-inf", now)
    pipe.zrange(_FLEETS_KEY, 0, -1)
    _, members = pipe.execute()
    return [int(m) for m in members]


def push_now_or_mark_due(*, fleet_id: int, interval_s: float) -> bool:
    """After new rollups of a fleet with open dashboards: push its views now, or mark a push
    due; True when this call marked it, and the caller enqueues the one push for later."""
    if _embedded():
        # Everything runs in this process: push now (each ingest request is one update).
        dashboard_views_push(fleet_id=fleet_id)
        return False
    redis = _redis()
    # Leading edge: the first rollups of a quiet spell are pushed at once, by the worker that
    # stored them. A queued task would wait behind that worker's drain, which under steady
    # traffic keeps its slot for up to a minute.
    if redis.set(_RECENT_KEY.format(fleet_id=fleet_id), "1", nx=True, px=int(interval_s * 1000)):
        dashboard_views_push(fleet_id=fleet_id)
        return False
    # Trailing edge: rollups stored within the interval get one push after it, by the next
    # store past the interval (above) or by the caller's task when the burst has ended.
    return bool(redis.set(_DUE_KEY.format(fleet_id=fleet_id), "1", nx=True, px=DUE_TTL_MS))


def encode(payload: dict[str, Any]) -> str:
    """The feed's `dashboard` frame, encoded once for every socket of the view."""
    return json.dumps(
        {"type": "dashboard", "view_key": payload["view_key"], "payload": payload},
        cls=DjangoJSONEncoder,
        separators=(",", ":"),
    )


def view_from_key(view_key: str) -> DashboardView:
    """The view a registry key names (keys are written by `DashboardView.key`)."""
    return parse_view(dict(parse_qsl(view_key)))


def dashboard_views_push(*, fleet_id: int) -> int:
    """Compute every subscribed view of the fleet once and send it to the view's group.

    Returns how many views were computed.
    """
    if not _embedded():
        _redis().delete(_DUE_KEY.format(fleet_id=fleet_id))
    keys = subscribed_views(fleet_id)
    if not keys:
        return 0
    fleet = Fleet.objects.filter(pk=fleet_id).first()
    if fleet is None:
        return 0
    layer = get_channel_layer()
    computed = 0
    for view_key in keys:
        started = time.perf_counter()
        try:
            view = view_from_key(view_key)
            payload = fleet_dashboard(fleet=fleet, view=view)  # its segment may be deleted
        except ApplicationError:
            _forget(fleet_id, view_key)
            continue
        payload["computation"] = uuid.uuid4().hex
        text = encode(payload)
        computed += 1
        async_to_sync(layer.group_send)(
            group_name(fleet_id, view_key),
            {"type": GROUP_MESSAGE_TYPE, "view_key": view_key, "text": text},
        )
        logger.info(
            "dashboard.pushed fleet=%s view=%s computation=%s ms=%.1f bytes=%d",
            fleet_id,
            view_key,
            payload["computation"],
            (time.perf_counter() - started) * 1000,
            len(text),
        )
    return computed


def dashboard_all_refresh() -> int:
    """Push every subscribed view of every fleet (beat: windows slide, devices come and go)."""
    return sum(dashboard_views_push(fleet_id=fleet_id) for fleet_id in subscribed_fleets())


def _forget(fleet_id: int, view_key: str) -> None:
    if _embedded():
        _local.forget(fleet_id, view_key)
    else:
        _redis().zrem(_VIEWS_KEY.format(fleet_id=fleet_id), view_key)
