"""The per-process device-token cache of the telemetry fast path
(routing_policies.push.token_cache): a token revoked in another process stops working as soon
as its push message arrives."""

import time
from typing import Any

import pytest
from django.utils import timezone

from routing_policies.models import Device
from routing_policies.push import publish as push
from routing_policies.push import token_cache

pytestmark = pytest.mark.django_db


def _wait_for(condition: Any, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_token_cache__revoked_in_another_process__refused_on_its_push(
    phone: tuple[Device, str], settings: Any
) -> None:
    # Given a token this process remembers, while it listens to the push channel
    device, token = phone
    assert settings.REDIS_URL, "needs Redis (scripts/test_env.sh)"
    assert token_cache.device_authenticate_cached(token) is not None  # starts the listener
    assert _wait_for(lambda: token_cache._listening)
    token_cache.forget(device.token_hash)
    assert token_cache.device_authenticate_cached(token) is not None  # remembered for 60 s

    # When another process revokes it (its row, then its push message after the commit)
    Device.objects.filter(pk=device.pk).update(revoked_at=timezone.now())
    push.publish(
        {
            "kind": "revoke",
            "fleet_id": device.fleet_id,
            "device_pk": device.pk,
            "token_hash": device.token_hash,
        }
    )

    # Then this process refuses the token as soon as the message arrives, not after the TTL
    assert _wait_for(lambda: token_cache.device_authenticate_cached(token) is None, 1.0)


def test_token_cache__unknown_or_malformed_token__none(phone: tuple[Device, str]) -> None:
    # Given / When tokens that are not a live device's / Then none authenticates
    for token in ("dt_unknown", "abc", "dt_" + "x" * 300):
        assert token_cache.device_authenticate_cached(token) is None
