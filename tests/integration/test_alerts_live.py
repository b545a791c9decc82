"""Alerts end to end on a real ASGI server, a real Celery worker (with beat), PostgreSQL, Redis
and a real HTTP receiver for webhooks (http.server in a thread of the test).

- a rule fires on events reported over HTTP; its webhook is refused twice (503) and delivered
  on the third attempt, after the back-off the delivery log shows;
- a fleet that stops reporting fires the silence rule from the beat alone, and resolves when
  it reports again (webhook calls for both);
- the buggy candidate (cloud share ~30% on stable, ~70% on the candidate, reported through
  the ingest path by devices that the rollout put in each cohort) is rolled back by its
  guards without anyone clicking, and every open page's alert feed is told;
- the alert feed refuses anonymous users, users without a role and any message sent to it.
"""

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from controlplane.roles import Role
from routing_policies.assignment import bucket
from routing_policies.models import AuditEntry, Rollout, RolloutEvent
from routing_policies.services import device_enroll, fleet_enrollment_key_rotate
from telemetry.alerts.models import AlertEvent, AlertRule, WebhookDelivery
from telemetry.alerts.services import alert_rule_create, alert_webhook_create, rollout_start_guarded
from tests.factories import UserFactory, iso, make_events, make_fleet
from tests.integration.test_telemetry_durability import Worker, _wait_until
from tests.live_server import asgi_server, empty_test_redis, session_cookie
from tests.webhook_receiver import Receiver

__all__ = ["asgi_server"]

pytestmark = pytest.mark.integration

SLUG = "alerts-live"
WAIT_S = 90.0  # an outer bound: each wait ends as soon as its condition holds
BACKOFF_S = 0.2


@pytest.fixture
def receiver(settings: Any) -> Iterator[Receiver]:
    """The receiver, on loopback: webhooks inside the network allowed (here and in the worker)."""
    settings.ALERT_WEBHOOK_ALLOW_PRIVATE_NETWORKS = True
    with Receiver() as started:
        yield started


@pytest.fixture
def clean_redis() -> None:
    """This test's Redis database starts empty (no tasks queued by an earlier run)."""
    empty_test_redis()


@dataclass
class Live:
    base_url: str
    fleet: Any
    publisher: Any
    fleet_key: str
    viewer_cookie: str
    no_role_cookie: str


@pytest.fixture
def live(
    asgi_server: str, transactional_db: None, requires_postgres: None, clean_redis: None
) -> Live:
    publisher = UserFactory(role=Role.PUBLISHER, username="pia")
    fleet = make_fleet(slug=SLUG, actor=publisher)
    return Live(
        base_url=asgi_server,
        fleet=fleet,
        publisher=publisher,
        fleet_key=fleet_enrollment_key_rotate(actor=publisher, fleet=fleet),
        viewer_cookie=session_cookie(UserFactory(role=Role.VIEWER, username="vic")),
        no_role_cookie=session_cookie(UserFactory(role=None, username="nobody")),
    )


@pytest.fixture
def worker() -> Iterator[Worker]:
    """A Celery worker with beat: alerts judged each second, webhooks retried after 0.2 s."""
    with Worker(
        {
            "TELEMETRY_RATE_LIMIT_BATCHES": "0",
            "ALERT_EVALUATE_INTERVAL_S": "1",
            "ALERT_WEBHOOK_BACKOFF_S": str(BACKOFF_S),
            "ALERT_WEBHOOK_ALLOW_PRIVATE_NETWORKS": "1",
        }
    ) as started:
        yield started


def _enroll(live: Live, device_id: str) -> str:
    return device_enroll(fleet_key=live.fleet_key, device_id=device_id, platform="android")[1]


def _post(live: Live, token: str, events: list[dict[str, Any]]) -> None:
    response = httpx.post(
        f"{live.base_url}/api/v1/telemetry",
        json={"events": events},
        headers={"Authorization": f"Bearer {token}"},
        timeout=20,
        trust_env=False,
    )
    assert response.status_code == 202, response.text


def _state(rule: AlertRule) -> str:
    rule.refresh_from_db()
    return rule.state


def test_webhook__receiver_refuses_twice__retried_with_backoff_then_delivered(
    live: Live, worker: Worker, receiver: Receiver
) -> None:
    # Given an error-rate rule with a JSON webhook and a Slack one, the JSON receiver
    # answering 503 twice before it takes the call
    rule = alert_rule_create(
        actor=live.publisher,
        fleet=live.fleet,
        name="Error rate above 10%",
        metric="error_rate",
        condition="above",
        threshold=0.1,
        window_minutes=5,
        min_samples=20,
    )
    alert_webhook_create(actor=live.publisher, fleet=live.fleet, url=receiver.url)
    alert_webhook_create(
        actor=live.publisher, fleet=live.fleet, url=receiver.url + "/slack", format="slack"
    )
    receiver.statuses = {"/hook": [503, 503]}
    token = _enroll(live, "phone-1")

    # When a device reports 40 failing tasks through the ingest path
    _post(live, token, make_events(40, device_id="phone-1", ok=False))

    # Then the rule fires on its own
    _wait_until(lambda: _state(rule) == "firing", WAIT_S, "the rule never fired")

    # and the JSON webhook was tried three times and delivered, the Slack one at once
    json_delivery = WebhookDelivery.objects.filter(url=receiver.url)
    _wait_until(
        lambda: json_delivery.filter(status="delivered").exists(),
        WAIT_S,
        "the webhook was never delivered",
    )
    delivery = json_delivery.get()
    assert delivery.attempts == 3
    assert [a["status"] for a in delivery.attempt_log] == [503, 503, 200]
    assert [a["retry_in_s"] for a in delivery.attempt_log] == [BACKOFF_S, 2 * BACKOFF_S, None]
    assert "HTTP 503" in delivery.attempt_log[0]["error"]
    calls = [r for r in receiver.received if r["path"] == "/hook"]
    assert [c["answered"] for c in calls] == [503, 503, 200]
    assert {c["delivery"] for c in calls} == {str(delivery.pk)}
    body = calls[-1]["body"]
    assert body["kind"] == "alert.firing"
    assert body["fleet"] == SLUG
    assert body["rule"]["name"] == "Error rate above 10%"
    assert body["value"] == 1.0
    assert body["samples"] == 40
    _wait_until(
        lambda: any(r["path"] == "/hook/slack" for r in receiver.received),
        WAIT_S,
        "the Slack webhook was never called",
    )
    slack = next(r for r in receiver.received if r["path"] == "/hook/slack")["body"]
    assert slack["text"].startswith(":rotating_light: FIRING [alerts-live] Error rate above 10%")


def test_webhook__receiver_down_for_good__gives_up_after_max_attempts(
    live: Live, worker: Worker, receiver: Receiver
) -> None:
    # Given a rule whose webhook answers 500 every time
    rule = alert_rule_create(
        actor=live.publisher,
        fleet=live.fleet,
        name="Cloud share above 50%",
        metric="cloud_share",
        condition="above",
        threshold=0.5,
        window_minutes=5,
        min_samples=10,
    )
    alert_webhook_create(actor=live.publisher, fleet=live.fleet, url=receiver.url)
    receiver.statuses = {"/hook": [500] * 20}
    token = _enroll(live, "phone-1")

    # When it fires
    _post(live, token, make_events(20, device_id="phone-1", route="cloud", latency_ms=300.0))
    _wait_until(lambda: _state(rule) == "firing", WAIT_S, "the rule never fired")

    # Then the delivery is given up after the sixth attempt, each logged
    _wait_until(
        lambda: WebhookDelivery.objects.filter(status="failed").exists(),
        WAIT_S,
        "the delivery never gave up",
    )
    delivery = WebhookDelivery.objects.get()
    assert delivery.attempts == 6
    assert [a["status"] for a in delivery.attempt_log] == [500] * 6
    assert delivery.attempt_log[-1]["retry_in_s"] is None
    assert len(receiver.received) == 6


def test_silence__fleet_stops_reporting__beat_fires_then_resolves(
    live: Live, worker: Worker, receiver: Receiver
) -> None:
    # Given a fleet that reported 20 minutes ago and then went quiet, and a silence rule
    # over the last 5 minutes with a webhook
    token = _enroll(live, "phone-1")
    long_ago = iso(datetime.now(UTC) - timedelta(minutes=20))
    _post(live, token, make_events(10, device_id="phone-1", ts=long_ago))
    _wait_until(_processed, WAIT_S, "the old events were never processed")
    rule = alert_rule_create(
        actor=live.publisher,
        fleet=live.fleet,
        name="Fleet silent",
        metric="events",
        condition="below",
        threshold=1,
        window_minutes=5,
        min_samples=0,
    )
    alert_webhook_create(actor=live.publisher, fleet=live.fleet, url=receiver.url)

    # When nothing more arrives: only the beat can notice
    _wait_until(lambda: _state(rule) == "firing", WAIT_S, "silence never fired")
    assert rule.last_message.startswith("0 events in the window")
    _wait_until(
        lambda: any(r["body"]["kind"] == "alert.firing" for r in receiver.received),
        WAIT_S,
        "no webhook for the silence",
    )

    # When the fleet reports again
    _post(live, token, make_events(3, device_id="phone-1"))

    # Then resolved, and the webhook is told
    _wait_until(lambda: _state(rule) == "ok", WAIT_S, "silence never resolved")
    _wait_until(
        lambda: any(r["body"]["kind"] == "alert.resolved" for r in receiver.received),
        WAIT_S,
        "no webhook for the resolution",
    )
    assert list(
        AlertEvent.objects.filter(rule=rule).order_by("at", "id").values_list("kind", flat=True)
    ) == ["pending", "firing", "resolved"]


def _processed() -> bool:
    from telemetry.models import LandedBatch, MinuteRollup

    return not LandedBatch.objects.exists() and MinuteRollup.objects.exists()


def _cohort_devices(salt: str, percent: int, count: int) -> tuple[list[str], list[str]]:
    """`count` device ids the rollout puts on the candidate, and `count` it keeps on stable."""
    candidates: list[str] = []
    stables: list[str] = []
    number = 0
    while len(candidates) < count or len(stables) < count:
        device_id = f"phone-{number}"
        number += 1
        side = candidates if bucket(salt, device_id) < percent * 100 else stables
        if len(side) < count:
            side.append(device_id)
    return candidates, stables


async def _feed(live: Live, cookie: str | None) -> ClientConnection:
    url = live.base_url.replace("http://", "ws://") + "/ws/ui/alerts/"
    headers = {"Cookie": f"sessionid={cookie}"} if cookie else {}
    return await connect(
        url,
        additional_headers=headers,
        origin=live.base_url,  # type: ignore[arg-type]
        proxy=None,
        open_timeout=10,
    )


async def _next(socket: ClientConnection) -> dict[str, Any]:
    message: dict[str, Any] = json.loads(await asyncio.wait_for(socket.recv(), WAIT_S))
    return message


def test_guarded_rollout__buggy_candidate_cloud_share_jumps__rolled_back_without_a_click(
    live: Live, worker: Worker, publish_version: Any
) -> None:
    # Given v2 (the buggy candidate) rolled out at 5% with the default guards
    candidate = publish_version(live.fleet).number
    rollout = rollout_start_guarded(
        actor=live.publisher,
        fleet=live.fleet,
        version=candidate,
        guard_options={"guards": "default", "min_samples": 50, "window_minutes": 10},
    )
    # and devices the rollout put on each side, each reporting the version it was assigned
    on_candidate, on_stable = _cohort_devices(rollout.salt, rollout.stage, 2)
    tokens = {device_id: _enroll(live, device_id) for device_id in on_candidate + on_stable}

    async def scenario() -> list[dict[str, Any]]:
        # and a page open on the alert feed
        feed = await _feed(live, live.viewer_cookie)
        first = await _next(feed)
        assert first == {"type": "alerts", "fleet": None, "firing": [], "event": None}

        # When the stable devices report ~30% cloud and the candidate devices ~70%, through
        # the ingest path, as the simulator's buggy-candidate scenario does
        for device_id in on_stable:
            _post(live, tokens[device_id], _mix(device_id, 1, cloud=30, on_device=70))
        for device_id in on_candidate:
            _post(live, tokens[device_id], _mix(device_id, candidate, cloud=70, on_device=30))

        # Then the page is told of the rollback, without asking
        seen = []
        while True:
            message = await _next(feed)
            seen.append(message)
            if (message.get("event") or {}).get("kind") == "rolled_back":
                break
        await feed.close()
        return seen

    seen = asyncio.run(scenario())

    # and the rollout was rolled back by the system, with the guard's reason, audited
    rollout.refresh_from_db()
    assert rollout.state == Rollout.State.ROLLED_BACK
    assert rollout.reason.startswith("Guard fired: candidate cloud share 70.0% vs stable 30.0%")
    assert RolloutEvent.objects.get(rollout=rollout, action="rolled_back").actor_name == "system"
    assert "Guard fired" in AuditEntry.objects.get(action="rollout.rolled_back").summary
    assert seen[-1]["fleet"] == SLUG
    assert "Rolled v2 back at 5% to v1" in seen[-1]["event"]["message"]


def _mix(device_id: str, version: int, *, cloud: int, on_device: int) -> list[dict[str, Any]]:
    """Tasks that happened now (after the rollout began: devices run what they were given)."""
    now = iso(datetime.now(UTC))
    return make_events(
        cloud, device_id=device_id, policy_version=version, route="cloud", latency_ms=300.0, ts=now
    ) + make_events(on_device, device_id=device_id, policy_version=version, ts=now)


def test_alert_feed__refusals_and_messages__clear_and_socket_stays_open(live: Live) -> None:
    async def close_code(cookie: str | None) -> int | None:
        socket = await _feed(live, cookie)
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(socket.recv(), WAIT_S)
        return socket.close_code

    async def scenario() -> None:
        assert await close_code(None) == 4401
        assert await close_code(live.no_role_cookie) == 4403
        socket = await _feed(live, live.viewer_cookie)
        assert (await _next(socket))["type"] == "alerts"
        for frame, code in [
            ("not json", "read_only"),
            (json.dumps({"type": "subscribe"}), "read_only"),
            (b"\x00\x01", "read_only"),
            ("x" * 5000, "too_large"),
        ]:
            await socket.send(frame)
            reply = await _next(socket)
            assert (reply["type"], reply["code"]) == ("error", code)
        # still open: the feed still answers
        await socket.send("again")
        assert (await _next(socket))["type"] == "error"
        await socket.close()

    asyncio.run(scenario())
