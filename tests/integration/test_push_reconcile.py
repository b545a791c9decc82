"""Pushes that Redis lost still reach the devices: each ASGI process reconciles.

Redis pub/sub delivers at most once. Here a stage change is published while the server's
subscription is cut (a TCP proxy between the server and Redis goes down), and another while
the publisher cannot reach Redis at all; in both cases the connected devices end on their
assignment anyway, through the server's reconcile (on resubscribing, and every
PUSH_RECONCILE_S). A device revoked while the push was lost has its socket closed.
"""

import os
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

import pytest
from django.db import connection

from routing_policies.assignment import bucket
from routing_policies.models import Device
from routing_policies.services import (
    cloud_pressure_set,
    device_revoke,
    fleet_switch_version,
    rollout_advance,
    rollout_start,
)
from tests.live_server import free_port, require_postgres_and_redis

from .tcp_proxy import TcpProxy
from .test_device_push import AsgiProcess, _connect_all, _enrol_split
from .ws_clients import CLOSE_UNAUTHORISED, BackgroundLoop, Frame, device_clients, wait_until

pytestmark = pytest.mark.integration

DEVICES = 40
WAIT_S = 60.0  # an outer bound: each wait ends as soon as its condition holds


@pytest.fixture
def redis_proxy(background: BackgroundLoop) -> Iterator[TcpProxy]:
    """A TCP proxy in front of this run's Redis (the server's only way to it)."""
    require_postgres_and_redis("push reconciliation")
    proxy = TcpProxy(urlparse(os.environ["REDIS_URL"]).port or 6379)
    background.run(proxy.start())
    yield proxy
    background.run(proxy.close())


@pytest.fixture
def server_behind_proxy(transactional_db: None, redis_proxy: TcpProxy) -> Iterator[AsgiProcess]:
    """One ASGI process whose Redis is reached through `redis_proxy` (no periodic reconcile
    within the test)."""
    redis_url = urlparse(os.environ["REDIS_URL"])
    process = AsgiProcess(
        dict(connection.settings_dict),
        extra_env={
            "REDIS_URL": redis_url._replace(netloc=f"127.0.0.1:{redis_proxy.port}").geturl(),
            # Only the resubscription may catch up here, not the periodic round.
            "PUSH_RECONCILE_S": "3600",
        },
    )
    process.start()
    yield process
    process.stop()


@pytest.fixture
def server_reconciling_each_second(transactional_db: None) -> Iterator[AsgiProcess]:
    """One ASGI process on the real Redis, reconciling every second."""
    require_postgres_and_redis("push reconciliation")
    process = AsgiProcess(dict(connection.settings_dict), extra_env={"PUSH_RECONCILE_S": "1"})
    process.start()
    yield process
    process.stop()


def _nudged(frame: Frame | None) -> bool:
    return frame is not None and frame.message.get("theta_offset") == 0.1


def test_push_reconcile__subscription_cut_during_a_switch__devices_catch_up_on_resubscribe(
    server_behind_proxy: AsgiProcess,
    redis_proxy: TcpProxy,
    background: BackgroundLoop,
    fleet: Any,
    fleet_key: str,
    publish_version: Any,
    publisher: Any,
) -> None:
    # Given devices on v1, connected to a server whose Redis link goes through a proxy
    publish_version(fleet, threshold=0.75)
    tokens = _enrol_split(background, [server_behind_proxy] * 2, fleet_key, DEVICES)
    with device_clients(background, tokens) as clients:
        _connect_all(clients, fleet, version=1)
        revoked = next(iter(clients))

        # When the link to Redis is cut, and meanwhile the fleet is switched to v2, a cloud
        # pressure nudge is sent and one device is revoked (all published to Redis, which the
        # server no longer hears)
        redis_proxy.mode = "down"
        background.run(redis_proxy.drop_connections())
        time.sleep(0.5)
        fleet_switch_version(actor=publisher, fleet=fleet, version=2)
        cloud_pressure_set(actor=publisher, fleet=fleet, theta_offset=0.1, ttl_s=600)
        device_revoke(actor=publisher, device=Device.objects.get(fleet=fleet, device_id=revoked))
        time.sleep(1.0)
        assert all(c.policy_version == 1 for c in clients.values()), "a push got through"

        # Then, once the link is back, the server resubscribes and reconciles: every device
        # runs v2 and has the nudge, and the revoked one's socket is closed with 4401
        redis_proxy.mode = "pass"
        wait_until(
            lambda: all(c.policy_version == 2 for d, c in clients.items() if d != revoked),
            timeout=WAIT_S,
            what="every device to catch up with v2 after the cut",
        )
        wait_until(
            lambda: all(
                _nudged(c.last("cloud_pressure")) for d, c in clients.items() if d != revoked
            ),
            timeout=WAIT_S,
            what="every device to get the cloud pressure nudge after the cut",
        )
        wait_until(
            lambda: CLOSE_UNAUTHORISED in clients[revoked].close_codes,
            timeout=WAIT_S,
            what="the revoked device's socket to be closed",
        )
    assert "push.resubscribed" in server_behind_proxy.output()


def test_push_reconcile__publisher_cannot_reach_redis__call_succeeds_devices_catch_up(
    server_reconciling_each_second: AsgiProcess,
    background: BackgroundLoop,
    fleet: Any,
    fleet_key: str,
    publish_version: Any,
    publisher: Any,
    settings: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given devices on v1 and v2 published
    publish_version(fleet, threshold=0.75)
    server = server_reconciling_each_second
    tokens = _enrol_split(background, [server, server], fleet_key, DEVICES)
    with device_clients(background, tokens) as clients:
        _connect_all(clients, fleet, version=1)

        # When this process (the operator's) cannot reach Redis and starts v2 and advances it
        # to 25%: both pushes fail to publish
        settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/15"
        rollout = rollout_start(actor=publisher, fleet=fleet, version=2)
        rollout_advance(actor=publisher, fleet=fleet, to_stage=25)

        # Then the calls succeed (the changes are committed) and say the publish failed
        assert caplog.text.count("push.publish_failed") == 2
        at_25 = {d for d in clients if bucket(rollout.salt, d) < 2500}

        # and the server's reconcile brings exactly the 25% cohort to v2, the rest stay on v1
        wait_until(
            lambda: all(c.policy_version == (2 if d in at_25 else 1) for d, c in clients.items()),
            timeout=WAIT_S,
            what="the 25% cohort to run v2 through the reconcile",
        )
        wait_until(
            lambda: Device.objects.filter(fleet=fleet, acked_version=2).count() == len(at_25),
            timeout=WAIT_S,
            what="their acks",
        )
        for device_id in at_25:
            policies = [f.message for f in clients[device_id].frames if f.type == "policy"]
            assert policies[-1]["rollout"] == {"id": rollout.pk, "stage": 25}
