"""Telling people: the live banner feed (channel layer group) and webhook payloads.

`broadcast_alerts` is called after a commit that changed what fires; every open page's
`/ws/ui/alerts/` socket (alerts.consumers.AlertFeedConsumer) is in the group and shows it.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from routing_policies.models import Fleet

from .selectors import firing_alerts

logger = logging.getLogger(__name__)

ALERTS_GROUP = "ui.alerts"


def broadcast_alerts(*, fleet_id: int, event: dict[str, Any] | None = None) -> None:
    """Send the fleet's firing alerts (and what just happened) to every open page."""
    try:
        slug = Fleet.objects.filter(pk=fleet_id).values_list("slug", flat=True).first()
        message = {
            "type": "alerts.changed",
            "fleet": slug,
            "firing": firing_alerts(fleet_ids=[fleet_id]),
            "event": event,
        }
        layer = get_channel_layer()
        if layer is not None:
            async_to_sync(layer.group_send)(ALERTS_GROUP, message)
    except Exception:  # a banner is best effort; the state and history are already stored
        logger.warning("alerts.broadcast_failed fleet=%s", fleet_id, exc_info=True)


def webhook_payload(*, format: str, body: dict[str, Any]) -> dict[str, Any]:
    """The JSON a webhook receives: ours as is, or a Slack-compatible message."""
    if format != "slack":
        return body
    headline = {
        "alert.firing": ":rotating_light: FIRING",
        "alert.resolved": ":white_check_mark: RESOLVED",
        "rollout.rolled_back": ":leftwards_arrow_with_hook: ROLLED BACK",
        "rollout.advanced": ":arrow_forward: ADVANCED",
        "rollout.completed": ":white_check_mark: COMPLETED",
    }.get(body["kind"], body["kind"])
    name = body["rule"]["name"] if body.get("rule") else f"rollout #{body['rollout']['id']}"
    text = f"{headline} [{body['fleet']}] {name}: {body['message']}"
    return {
        "text": text,
        "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": text}}],
    }
