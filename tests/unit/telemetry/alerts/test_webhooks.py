"""Webhook delivery refuses addresses inside the network (server-side request forgery)."""

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from telemetry.alerts.models import WebhookDelivery
from telemetry.alerts.services import webhook_delivery_attempt
from tests.webhook_receiver import Receiver


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as started:
        yield started


def _this_machines_name() -> tuple[str, set[str]]:
    """This machine's host name and the addresses it resolves to (no DNS server involved)."""
    name = socket.gethostname()
    addresses = {str(info[4][0]) for info in socket.getaddrinfo(name, 80, proto=socket.IPPROTO_TCP)}
    return name, addresses


def test_webhook_delivery__name_resolving_inside_the_network__failed_at_once_nothing_posted(
    fleet: Any, receiver: Receiver, settings: Any
) -> None:
    # Given a delivery to a host NAME (accepted when the webhook was added: names are judged
    # where they resolve) that resolves to this machine, where a receiver listens
    name, addresses = _this_machines_name()
    if not addresses <= {"127.0.0.1", "127.0.1.1", "::1"}:
        pytest.skip(f"{name} resolves to {addresses}, not to loopback, on this machine")
    port = receiver.url.split(":")[2].split("/")[0]
    delivery = WebhookDelivery.objects.create(
        fleet=fleet, url=f"http://{name}:{port}/hook", payload={"text": "alert"}
    )

    # When the worker attempts it
    retry_in = webhook_delivery_attempt(delivery_id=delivery.pk)

    # Then it is failed at once (no retry), saying why, and nothing reached the receiver
    delivery.refresh_from_db()
    assert retry_in is None
    assert (delivery.status, delivery.attempts) == (WebhookDelivery.Status.FAILED, 1)
    error = delivery.attempt_log[0]["error"]
    assert error.startswith("refused:")
    assert "ALERT_WEBHOOK_ALLOW_PRIVATE_NETWORKS" in error
    assert receiver.received == []

    # And with webhooks inside the network allowed, the same URL is delivered
    settings.ALERT_WEBHOOK_ALLOW_PRIVATE_NETWORKS = True
    again = WebhookDelivery.objects.create(fleet=fleet, url=delivery.url, payload={"text": "2"})
    assert webhook_delivery_attempt(delivery_id=again.pk) is None
    again.refresh_from_db()
    assert again.status == WebhookDelivery.Status.DELIVERED
    assert [call["body"] for call in receiver.received] == [{"text": "2"}]
