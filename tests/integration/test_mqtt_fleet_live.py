"""Issue 24 end to end: the real control plane and real SDK devices over a real Mosquitto.

The control plane is all there: the test's process makes each change through the rollout
services with the MQTT link on (its publisher retains the fleet's state once the change
commits, as a server process does), two `manage.py mqtt_link` processes land the devices'
acks and presence from shared subscriptions, and a uvicorn process serves enrolment, the
documents, the WebSocket path and the rollout API that the checks read. The devices are the
edge SDK's `Device(..., transport="mqtt")` (and, in the mixed fleet, its WebSocket default),
enrolled over HTTP like any app. Each device must run, and be counted as having acked, exactly
the version `edge_sdk.assignment`'s bucket rule gives it: the server's `fleet_assignment`.
"""

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.db import connection

from controlplane.roles import Role
from edge_sdk import Device, DeviceConfig, mqtt_topics
from edge_sdk.delta import canonical_bytes
from edge_sdk.transport.mqtt import MqttTransport
from edge_sdk.wire import PROTOBUF_MEDIA_TYPE
from routing_policies.models import Device as DeviceRow
from routing_policies.mqtt import receivers
from routing_policies.mqtt.client import publisher
from routing_policies.mqtt.publish import fleets_reconcile
from routing_policies.selectors import device_list, fleet_assignment
from routing_policies.services import rollout_advance, rollout_rollback, rollout_start
from telemetry.models import EventKey
from tests.factories import UserFactory
from tests.live_server import STARTUP_TIMEOUT_S, require_postgres_and_redis, session_cookie
from tests.mqtt_broker import Broker
from tests.unit.edge_sdk.sdk_helpers import Inference, readings, task
from tests.unit.routing_policies.mqtt.conftest import Watcher

from .test_device_push import AsgiProcess
from .test_mqtt_link import PREFIX, Links
from .ws_clients import BackgroundLoop, wait_until

pytestmark = pytest.mark.integration

# Outer bounds: each wait ends as soon as what it waits for holds (well under a second for a
# stage change on a quiet machine).
CONVERGE_S = 60.0
# "At once": a device that comes back runs the fleet's newest version within this time of its
# start (connect, the retained state and document, apply, ack), and never an older stage's.
BACK_AT_ONCE_S = 10.0


@pytest.fixture(scope="module")
def server(django_db_setup: None, django_db_blocker: Any) -> Iterator[AsgiProcess]:
    """The control plane's HTTP and WebSocket process (enrolment, documents, rollout API)."""
    require_postgres_and_redis("the MQTT fleet's live test")
    process = AsgiProcess(dict(connection.settings_dict))
    try:
        process.start()
        yield process
    finally:
        process.stop()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    """Its log names each SUBSCRIBE (a device asking for a version's document)."""
    started = Broker.start(tmp_path / "mosquitto", log_subscriptions=True)
    yield started
    started.stop()


@pytest.fixture
def mqtt_prefix() -> str:
    """The deployment's topic prefix (MQTT_TOPIC_PREFIX, the SDK's `mqtt_prefix`)."""
    return PREFIX


@pytest.fixture
def control_plane(
    transactional_db: None,
    mqtt_prefix: str,
    server: AsgiProcess,
    broker: Broker,
    settings: Any,
    fleet: Any,
    tmp_path: Path,
) -> Iterator[Links]:
    """The MQTT link on: this process publishes on commit, two links consume; the broker was
    given what a fresh broker needs (`manage.py mqtt_reconcile --all`)."""
    settings.MQTT_URL = broker.url
    settings.MQTT_TOPIC_PREFIX = mqtt_prefix
    settings.MQTT_CA_FILE = str(broker.tls.ca) if broker.tls else ""
    receivers.connect()
    fleets_reconcile(force=True)
    links = Links(broker, tmp_path, prefix=mqtt_prefix)
    links.start("a")
    links.start("b")
    # A device's ack is not retained and a shared subscription gets no retained birth: the
    # links must be subscribed before the first device speaks.
    for name in ("a", "b"):
        log = tmp_path / f"link-{name}.log"
        wait_until(
            lambda log=log: "mqtt.link_started" in log.read_text(),
            timeout=STARTUP_TIMEOUT_S,
            interval=0.1,
            what=f"link {name} subscribed",
        )
    try:
        yield links
    finally:
        links.stop_all()
        receivers.disconnect()
        publisher().close()


class Fleet:
    """SDK devices of one fleet on the background loop, and what the control plane says."""

    def __init__(
        self,
        background: BackgroundLoop,
        server: AsgiProcess,
        broker: Broker,
        fleet: Any,
        fleet_key: str,
        directory: Path,
    ) -> None:
        self.background, self.server, self.broker = background, server, broker
        self.fleet, self.fleet_key, self.directory = fleet, fleet_key, directory
        self.devices: dict[str, Device] = {}
        self.applied: dict[str, list[int]] = {}
        self.cookie = session_cookie(UserFactory(role=Role.VIEWER, username="vic"))

    def add(self, device_id: str, transport: str, **config: Any) -> Device:
        inference = Inference()
        device = Device(
            DeviceConfig(
                base_url=self.server.url,
                fleet_key=self.fleet_key,
                device_id=device_id,
                platform="android",
                model="pixel-9",
                state_dir=self.directory / device_id,
                mqtt_url=self.broker.url,
                mqtt_ca_file=str(self.broker.tls.ca) if self.broker.tls else "",
                mqtt_prefix=PREFIX,
                backoff_base_s=0.05,
                backoff_max_s=0.5,
                online_check_s=0.1,
                mqtt_document_wait_s=0.5,
                **config,
            ),
            readings=readings,
            device_infer=inference.on_device,
            cloud_infer=inference.on_cloud,
            transport=transport,
        )
        applied = self.applied[device_id] = []

        def on_event(event: str, details: dict[str, Any]) -> None:
            # The versions the device applied, in order (one entry per change).
            if event == "policy" and details["version"] not in applied[-1:]:
                applied.append(details["version"])

        device.add_listener(on_event)
        self.devices[device_id] = device
        return device

    def start(self, *device_ids: str) -> None:
        for device_id in device_ids or tuple(self.devices):
            self.background.run(self.devices[device_id].start())

    def stop(self, *device_ids: str) -> None:
        for device_id in device_ids or tuple(self.devices):
            self.background.run(self.devices[device_id].stop())

    def wanted(self) -> dict[str, int | None]:
        """Each device's version as the server assigns it now."""
        assignment = fleet_assignment(self.fleet.pk)
        return {device_id: assignment.version_for(device_id) for device_id in self.devices}

    def converged(self, what: str, *, among: tuple[str, ...] = ()) -> dict[str, int | None]:
        """Wait until each device (of `among`, else all) runs its assigned version and the
        database holds its ack of it; the assignment."""
        wanted = self.wanted()
        ids = among or tuple(self.devices)
        wait_until(
            lambda: all(self.devices[d].policy.version == wanted[d] for d in ids),
            timeout=CONVERGE_S,
            what=f"every device to run its version ({what})",
        )
        wait_until(
            lambda: (
                dict(
                    DeviceRow.objects.filter(fleet=self.fleet, device_id__in=ids).values_list(
                        "device_id", "acked_version"
                    )
                )
                == {d: wanted[d] for d in ids}
            ),
            timeout=CONVERGE_S,
            interval=0.1,
            what=f"every device's ack to land ({what})",
        )
        return wanted

    def status(self) -> dict[str, Any]:
        """GET /api/v1/fleets/{slug}/rollout/ as a viewer reads it."""
        response = httpx.get(
            f"{self.server.url}/api/v1/fleets/{self.fleet.slug}/rollout/",
            cookies={"sessionid": self.cookie},
            timeout=10,
        )
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def close(self) -> None:
        self.stop()


@pytest.fixture
def sdk_fleet(
    control_plane: Links,
    background: BackgroundLoop,
    server: AsgiProcess,
    broker: Broker,
    fleet: Any,
    fleet_key: str,
    tmp_path: Path,
) -> Iterator[Fleet]:
    devices = Fleet(background, server, broker, fleet, fleet_key, tmp_path / "devices")
    try:
        yield devices
    finally:
        devices.close()


def _mqtt_transport(device: Device) -> MqttTransport:
    transport = device._connection.transport
    assert isinstance(transport, MqttTransport)
    return transport


def _assert_api_counts_every_device_acked(
    status: dict[str, Any], wanted: dict[str, int | None], *, online: int
) -> None:
    """The rollout API says what the devices run: per version, as many acked (and acked and
    online) as are assigned it; nobody behind."""
    convergence = status["convergence"]
    assert convergence["devices"] == len(wanted)
    assert convergence["online"] == online
    for version in set(wanted.values()):
        row = next(r for r in convergence["versions"] if r["version"] == version)
        expected = sum(1 for v in wanted.values() if v == version)
        assert (row["assigned"], row["acked"], row["acked_online"]) == (expected,) * 3, row
    assert convergence["not_acked"] == {"count": 0, "devices": []}


def test_mqtt_fleet__5_25_100_and_rollback__each_sdk_device_runs_its_bucket_and_the_api_counts_it(
    sdk_fleet: Fleet,
    publish_version: Callable[..., Any],
    publisher: Any,
) -> None:
    # Given v1 stable, v2 published, and 24 SDK devices on MQTT enrolled over HTTP, on v1
    fleet = sdk_fleet.fleet
    publish_version(fleet, threshold=0.75)
    ids = [f"mqtt-{n:02d}" for n in range(24)]
    for device_id in ids:
        sdk_fleet.add(device_id, "mqtt")
    sdk_fleet.start()
    wanted = sdk_fleet.converged("v1")
    assert set(wanted.values()) == {1}
    wait_until(
        lambda: sdk_fleet.status()["convergence"]["online"] == len(ids),
        timeout=CONVERGE_S,
        interval=0.2,
        what="every birth",
    )

    # When v2 rolls out at 5%, 25% and 100%, and then is rolled back
    stages: list[tuple[str, Callable[[], Any]]] = [
        ("5%", lambda: rollout_start(actor=publisher, fleet=fleet, version=2)),
        ("25%", lambda: rollout_advance(actor=publisher, fleet=fleet, to_stage=25)),
        ("100%", lambda: rollout_advance(actor=publisher, fleet=fleet, to_stage=100)),
        ("rollback", lambda: rollout_rollback(actor=publisher, fleet=fleet, reason="test")),
    ]
    assignments = [wanted]
    for name, change in stages:
        change()

        # Then every device runs exactly what the bucket rule gives it, its ack landed, and
        # the rollout API counts each cohort acked, online, nobody behind
        wanted = sdk_fleet.converged(name)
        assignments.append(wanted)
        status = sdk_fleet.status()
        _assert_api_counts_every_device_acked(status, wanted, online=len(ids))
        assert status["rollout"]["stage"] == (100 if name == "rollback" else int(name[:-1]))

    # and the cohorts grew with the stages (at 25% both versions ran at once), then went home
    on_v2 = [sum(1 for v in stage.values() if v == 2) for stage in assignments]
    assert on_v2[0] == 0
    assert on_v2[1] <= on_v2[2] <= on_v2[3] == len(ids)
    assert 0 < on_v2[2] < len(ids)
    assert on_v2[4] == 0
    # and each device applied only the versions its bucket called for, each change once
    for device_id in ids:
        called_for: list[int | None] = []
        for stage in assignments:
            if stage[device_id] not in called_for[-1:]:
                called_for.append(stage[device_id])
        assert sdk_fleet.applied[device_id] == called_for, device_id


def test_mqtt_fleet__version_published_then_rolled_out__its_cohort_held_it_and_ran_it_at_the_start(
    sdk_fleet: Fleet,
    publish_version: Callable[..., Any],
    publisher: Any,
) -> None:
    # Given 30 SDK devices on MQTT running v1, each taking documents ahead within 0.5 s
    fleet = sdk_fleet.fleet
    ids = [f"pre-{n:02d}" for n in range(30)]
    for device_id in ids:
        sdk_fleet.add(device_id, "mqtt", mqtt_prefetch_jitter_s=0.5)
    sdk_fleet.start()
    sdk_fleet.converged("v1")
    topic = mqtt_topics.fleet_version(PREFIX, fleet.slug, 2)

    def asked_for_v2(device_id: str) -> int:
        return sdk_fleet.broker.subscriptions(f"{fleet.slug}/{device_id}", topic)

    def documents(device_id: str) -> dict[str, int]:
        return dict(_mqtt_transport(sdk_fleet.devices[device_id]).documents)

    # When v2 is published, and no rollout started
    publish_version(fleet, threshold=0.75)

    # Then every device, still on v1, takes v2's document in the background, once
    wait_until(
        lambda: all(documents(d).get("prefetched") == 1 for d in ids),
        timeout=CONVERGE_S,
        what="every device to hold v2's document",
    )
    assert [asked_for_v2(d) for d in ids] == [1] * len(ids)
    assert {sdk_fleet.devices[d].policy.version for d in ids} == {1}
    before = {d: documents(d) for d in ids}

    # When v2's rollout starts (at 5%: started again, with a new salt, while its cohort holds
    # none of the 30)
    rollout_start(actor=publisher, fleet=fleet, version=2)
    while not any(v == 2 for v in sdk_fleet.wanted().values()):
        rollout_rollback(actor=publisher, fleet=fleet, reason="an empty cohort here")
        rollout_start(actor=publisher, fleet=fleet, version=2)
    wanted = sdk_fleet.converged("5%")
    cohort = [d for d in ids if wanted[d] == 2]

    # Then its cohort ran v2 from the document it held, asking for none: no document came
    # from the broker or over HTTP after the start, and the rest took nothing either
    for device_id in ids:
        after = documents(device_id)
        assert after.get("fetched") == before[device_id].get("fetched"), device_id
        held = before[device_id].get("held", 0) + (device_id in cohort)
        assert after.get("held", 0) == held, device_id
        assert asked_for_v2(device_id) == 1, device_id
    _assert_api_counts_every_device_acked(sdk_fleet.status(), wanted, online=len(ids))


def test_mqtt_fleet__half_websocket_half_mqtt__one_assignment_and_the_same_counts(
    sdk_fleet: Fleet,
    publish_version: Callable[..., Any],
    publisher: Any,
) -> None:
    # Given v2 published and a fleet of 10 WebSocket and 10 MQTT SDK devices, all running
    fleet = sdk_fleet.fleet
    publish_version(fleet, threshold=0.75)
    ws_ids = [f"ws-{n:02d}" for n in range(10)]
    mqtt_ids = [f"mq-{n:02d}" for n in range(10)]
    for device_id in ws_ids:
        sdk_fleet.add(device_id, "websocket")
    for device_id in mqtt_ids:
        sdk_fleet.add(device_id, "mqtt")
    sdk_fleet.start()
    sdk_fleet.converged("v1")

    # When v2 rolls out and advances to 25%
    rollout_start(actor=publisher, fleet=fleet, version=2)
    rollout_advance(actor=publisher, fleet=fleet, to_stage=25)

    # Then both halves converge to the one assignment the server computes
    wanted = sdk_fleet.converged("25%, mixed")
    assert {sdk_fleet.devices[d].policy.version for d in sdk_fleet.devices} <= {1, 2}
    rows = DeviceRow.objects.filter(fleet=fleet)
    assert set(rows.filter(transport="ws").values_list("device_id", flat=True)) == set(ws_ids)
    assert set(rows.filter(transport="mqtt").values_list("device_id", flat=True)) == set(mqtt_ids)

    # and the rollout API and the registry count both alike: everyone online, everyone acked
    wait_until(
        lambda: sdk_fleet.status()["convergence"]["online"] == 20,
        timeout=CONVERGE_S,
        interval=0.2,
        what="both halves online",
    )
    _assert_api_counts_every_device_acked(sdk_fleet.status(), wanted, online=20)
    online = device_list(fleet=fleet, online=True)
    assert {row["device_id"] for row in online} == set(ws_ids) | set(mqtt_ids)
    assert all(row["assigned_version"] == row["acked_version"] for row in online)

    # When one of each half stops
    sdk_fleet.stop(ws_ids[0], mqtt_ids[0])

    # Then each is offline on the API, counted the same whatever its transport
    wait_until(
        lambda: sdk_fleet.status()["convergence"]["online"] == 18,
        timeout=CONVERGE_S,
        interval=0.2,
        what="the two stopped devices offline",
    )
    offline = {row["device_id"] for row in device_list(fleet=fleet, online=False)}
    assert offline == {ws_ids[0], mqtt_ids[0]}


def test_mqtt_fleet__device_stopped_during_two_stage_changes__runs_the_newest_at_once_when_back(
    sdk_fleet: Fleet,
    publish_version: Callable[..., Any],
    publisher: Any,
) -> None:
    # Given v2 at 5% over v1 and 12 MQTT devices on their versions, one of which then stops
    # (its app closed: a graceful goodbye)
    fleet = sdk_fleet.fleet
    publish_version(fleet, threshold=0.75)
    ids = [f"car-{n:02d}" for n in range(12)]
    for device_id in ids:
        sdk_fleet.add(device_id, "mqtt")
    sdk_fleet.start()
    rollout_start(actor=publisher, fleet=fleet, version=2)
    assignment = fleet_assignment(fleet.pk)
    away = next(d for d in ids if assignment.version_for(d) == 1)  # on stable at 5%
    sdk_fleet.converged("5%")
    sdk_fleet.stop(away)
    wait_until(
        lambda: not DeviceRow.objects.get(fleet=fleet, device_id=away).connected,
        timeout=CONVERGE_S,
        interval=0.1,
        what="its goodbye",
    )
    applied_before = list(sdk_fleet.applied[away])

    # When two stage changes happen while it is away (25%, then 100%)
    rollout_advance(actor=publisher, fleet=fleet, to_stage=25)
    rollout_advance(actor=publisher, fleet=fleet, to_stage=100)
    others = tuple(d for d in ids if d != away)
    sdk_fleet.converged("100% without it", among=others)
    behind = sdk_fleet.status()["convergence"]["not_acked"]
    assert behind == {
        "count": 1,
        "devices": [
            {"device_id": away, "assigned_version": 2, "acked_version": 1, "online": False}
        ],
    }

    # Then, started again, it runs v2 at once (straight from v1: no stage in between), its ack
    # lands, it is online again, and the API counts the whole fleet on v2
    started = time.monotonic()
    sdk_fleet.start(away)
    wait_until(
        lambda: sdk_fleet.devices[away].policy.version == 2,
        timeout=BACK_AT_ONCE_S,
        what="the device back on the newest version",
    )
    assert time.monotonic() - started < BACK_AT_ONCE_S
    assert sdk_fleet.applied[away] == [*applied_before, 2]
    wanted = sdk_fleet.converged("100%")
    assert set(wanted.values()) == {2}
    wait_until(
        lambda: sdk_fleet.status()["convergence"]["online"] == len(ids),
        timeout=CONVERGE_S,
        interval=0.2,
        what="its birth",
    )
    _assert_api_counts_every_device_acked(sdk_fleet.status(), wanted, online=len(ids))


def test_mqtt_fleet__json_and_protobuf_devices__the_same_document_decisions_and_telemetry(
    sdk_fleet: Fleet,
    publish_version: Callable[..., Any],
    publisher: Any,
) -> None:
    # Given 3 MQTT devices on JSON (the default) and 3 configured for protobuf, running v1
    fleet = sdk_fleet.fleet
    json_ids = [f"js-{n}" for n in range(3)]
    protobuf_ids = [f"pb-{n}" for n in range(3)]
    for device_id in json_ids:
        sdk_fleet.add(device_id, "mqtt", wire_format="json", telemetry_flush_s=3600)
    for device_id in protobuf_ids:
        sdk_fleet.add(device_id, "mqtt", wire_format="protobuf", telemetry_flush_s=3600)
    sdk_fleet.start()
    sdk_fleet.converged("v1")

    # When v2 (one cell changed) is published and rolled out to every device
    publish_version(fleet, threshold=0.35)
    rollout_start(actor=publisher, fleet=fleet, version=2)
    rollout_advance(actor=publisher, fleet=fleet, to_stage=100)
    sdk_fleet.converged("v2")

    # Then each took v2 from the broker in its own encoding: the protobuf devices from the
    # protobuf twin (never the JSON topic), the others from the JSON topic (never the twin)
    json_topic = mqtt_topics.fleet_version(PREFIX, fleet.slug, 2)
    twin = mqtt_topics.fleet_version_protobuf(PREFIX, fleet.slug, 2)
    for device_id in json_ids + protobuf_ids:
        client = f"{fleet.slug}/{device_id}"
        asked = (
            sdk_fleet.broker.subscriptions(client, json_topic),
            sdk_fleet.broker.subscriptions(client, twin),
        )
        assert asked == ((0, 1) if device_id in protobuf_ids else (1, 0)), (device_id, asked)
        assert _mqtt_transport(sdk_fleet.devices[device_id]).dropped["bad_document"] == 0
    # and every device holds a document byte-equal (canonically) to the one the server serves
    served = httpx.get(f"{sdk_fleet.server.url}/api/v1/fleets/{fleet.slug}/documents/2")
    canonical = {
        device_id: canonical_bytes(device.policy.document)
        for device_id, device in sdk_fleet.devices.items()
    }
    assert set(canonical.values()) == {canonical_bytes(served.json())}
    assert {d.policy.etag for d in sdk_fleet.devices.values()} == {served.headers["ETag"]}

    # When each runs the same tasks, one per cell of the table at two sizes, and flushes
    cells = served.json()["cells"]
    tasks = [
        task(
            task_type=cell["task_type"],
            latency_budget=cell["latency_budget"],
            privacy_tier=cell["privacy_tier"],
            tokens=tokens,
        )
        for cell in cells
        for tokens in (40, 4000)
    ]

    async def work(device: Device) -> tuple[list[Any], list[str | None]]:
        outcomes = [await device.run(t) for t in tasks]
        assert await device.telemetry.flush()
        return [o.decision for o in outcomes], [o.event_id for o in outcomes]

    telemetry = mqtt_topics.device_topic(PREFIX, fleet.slug, "+", "telemetry")
    watcher = Watcher(sdk_fleet.broker, telemetry)  # what the devices publish, as it goes
    try:
        ran = {d: sdk_fleet.background.run(work(sdk_fleet.devices[d])) for d in sdk_fleet.devices}
        watcher.settle()
    finally:
        watcher.close()

    # Then every device made the same decision on every task
    first = ran[json_ids[0]][0]
    assert len({d.route for d in first}) >= 2  # several routes among them: the table is used
    assert all(decisions == first for decisions, _ in ran.values())
    # and the telemetry of each (protobuf batches from the protobuf devices) lands once
    event_ids = [event_id for _, ids in ran.values() for event_id in ids]
    assert None not in event_ids
    assert len(set(event_ids)) == len(tasks) * len(sdk_fleet.devices)
    wait_until(
        lambda: EventKey.objects.filter(event_id__in=event_ids).count() == len(event_ids),
        timeout=CONVERGE_S,
        interval=0.2,
        what="every device's telemetry to land",
    )
    # and went in the device's encoding, said by MQTT 5's content type
    for device_id in json_ids + protobuf_ids:
        topic = mqtt_topics.device_topic(PREFIX, fleet.slug, device_id, "telemetry")
        content_types = {m.content_type for m in watcher.on(topic)}
        encoding = PROTOBUF_MEDIA_TYPE if device_id in protobuf_ids else "application/json"
        assert content_types == {encoding}, (device_id, content_types)
