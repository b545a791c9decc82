"""Who hears about change requests and freezes: the notifiers another app registers (telemetry's
webhook delivery, from `TelemetryConfig.ready`), called inside the transaction of the
change so what they write commits or rolls back with it."""

from collections.abc import Callable
from typing import Any

# (fleet_id, body) -> None; body: {"kind": "change_request.approved", "fleet", "message", ...}
ReviewNotifier = Callable[[int, dict[str, Any]], None]

_notifiers: dict[str, ReviewNotifier] = {}


def review_notifier_register(name: str, notifier: ReviewNotifier) -> None:
    """Add a notifier of governance events; registering a name again replaces it."""
    _notifiers[name] = notifier


def review_notify(*, fleet_id: int, body: dict[str, Any]) -> None:
    """Tell every registered notifier (none registered: nobody is told)."""
    for notifier in _notifiers.values():
        notifier(fleet_id, body)
