"""Factories for tests, in one place: users and fleets (made through the services, as users
make them), and telemetry events as devices send them (PROTOCOL.md)."""

import math
import random
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import factory
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from controlplane.roles import ROLE_GROUPS, Role
from edge_sdk.decision import Cell, DeviceState, TaskSignals, decide
from lab.replay import RecordedEvent
from routing_policies.demo import demo_table
from routing_policies.models import Fleet, PolicyVersion
from routing_policies.policies.sdk_cells import table_cells
from routing_policies.selectors import version_table
from routing_policies.services import (
    device_enroll,
    fleet_create,
    policy_draft_create,
    policy_draft_update_cells,
    policy_version_publish,
)
from telemetry.models import Event

PASSWORD = "test-password-123"


class UserFactory(factory.django.DjangoModelFactory):
    """A user with a password of PASSWORD; `role=Role.EDITOR` puts them in that group."""

    class Meta:
        model = get_user_model()
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.PostGenerationMethodCall("set_password", PASSWORD)

    @factory.post_generation
    def role(self, create: bool, extracted: Role | None, **kwargs: Any) -> None:
        if extracted:
            group, _ = Group.objects.get_or_create(name=ROLE_GROUPS[extracted])
            self.groups.add(group)
        self.save()


def make_fleet(*, slug: str = "fleet-a", actor: Any = None, publish: bool = True) -> Fleet:
    """A fleet with the demo's 12-cell table, published as v1 unless `publish=False`."""
    fleet = fleet_create(actor=actor, slug=slug, name=slug.title(), table=demo_table())
    if publish:
        policy_version_publish(actor=actor, fleet=fleet, revision=1, note="v1")
    return fleet


EDITED_CELL = ("voice", "interactive", "normal")
NPU_RULE = {"attribute": "accelerator", "equals": "npu"}


def npu_and_cpu_fleet(*, fleet: Fleet, fleet_key: str, actor: Any, npu: int, total: int) -> None:
    """`total` Android phones enrolled, the first `npu` with an NPU (`npu-0` …), the rest a CPU
    (`cpu-<n>`); segments `npu` (accelerator = npu) and `cars` (matches none of them)."""
    from routing_policies.segments.services import segment_create

    for index in range(total):
        accelerator = "npu" if index < npu else "cpu"
        device_enroll(
            fleet_key=fleet_key,
            device_id=f"{accelerator}-{index}",
            platform="android",
            attributes={"accelerator": accelerator},
        )
    segment_create(actor=actor, fleet=fleet, name="npu", rule=NPU_RULE)
    cars = {"attribute": "platform", "equals": "android-automotive"}
    segment_create(actor=actor, fleet=fleet, name="cars", rule=cars)


def draft_changed(*, fleet: Fleet, actor: Any = None) -> PolicyVersion:
    """A draft of the latest version with voice/interactive/normal's θ nudged by 0.01, at
    revision 2: a draft identical to a published version cannot be published (no_changes)."""
    draft = policy_draft_create(actor=actor, fleet=fleet)
    theta = version_table(version=draft)[EDITED_CELL]["threshold"]
    nudged = round(theta + 0.01 if theta <= 0.98 else theta - 0.01, 4)
    task_type, latency_budget, privacy_tier = EDITED_CELL
    edit = {"task_type": task_type, "latency_budget": latency_budget}
    return policy_draft_update_cells(
        actor=actor,
        fleet=fleet,
        revision=draft.revision,
        edits=[{**edit, "privacy_tier": privacy_tier, "values": {"threshold": nudged}}],
    )


def iso(moment: datetime) -> str:
    """RFC 3339 with milliseconds and Z, as the SDK writes it."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def make_event(device_id: str = "phone-1", **overrides: Any) -> dict[str, Any]:
    """A valid event of `device_id` (fleet on v1, cell text/interactive/normal, on device)."""
    event: dict[str, Any] = {
        "event_id": str(uuid.uuid4()),
        "device_id": device_id,
        "ts": iso(datetime.now(UTC) - timedelta(seconds=1)),
        "policy_version": 1,
        "task_type": "text",
        "latency_budget": "interactive",
        "privacy_tier": "normal",
        "route": "device",
        "decided_by": "threshold",
        "score": 0.42,
        "threshold": 0.6,
        "tokens": 180,
        "intent_conf": 0.85,
        "lm_conf": 0.72,
        "latency_ms": 35.2,
        "fallback": "none",
        "cache_hit": False,
        "upload_bytes": 0,
        "rtt_ms": 80,
        "bandwidth_kbps": 5000,
        "device_load": 0.3,
        "ok": True,
        "deidentified": False,
    }
    event.update(overrides)
    return event


def make_events(count: int, device_id: str = "phone-1", **overrides: Any) -> list[dict[str, Any]]:
    """`count` valid events with distinct ids."""
    return [make_event(device_id, **overrides) for _ in range(count)]


def demo_cell(key: tuple[str, str, str], **overrides: Any) -> Cell:
    """The demo table's cell `key` as the decision function reads it, with flat overrides
    (`{"threshold": 0.5, "latency_budget_ms": 600}`)."""
    return table_cells({key: {**demo_table()[key], **overrides}})[key]


def recorded_sample(
    cell: Cell,
    count: int,
    *,
    seed: int = 7,
    device_ms: tuple[float, float] = (25.0, 90.0),
    cloud_infer_ms: tuple[float, float] = (150.0, 450.0),
    ts: datetime | None = None,
) -> list[RecordedEvent]:
    """`count` generated events of `cell` as the replay reads them: spread signals, a weak
    network now and then (θ raised), busy devices (θ lowered), a live cloud-pressure nudge on
    some, a few cache hits; the recorded route is what `cell` decided, and the recorded
    latency a device time drawn from `device_ms` or the network part plus a cloud time drawn
    from `cloud_infer_ms`."""
    rng = random.Random(seed)
    moment = ts or datetime.now(UTC) - timedelta(hours=1)
    events = []
    for _ in range(count):
        task = TaskSignals(
            tokens=rng.randint(0, 800),
            intent_conf=round(rng.random(), 3),
            lm_conf=round(rng.random(), 3),
            upload_bytes=rng.randint(0, 20_000),
        )
        infer = rng.uniform(*cloud_infer_ms)
        device = DeviceState(
            rtt_ms=rng.choice([40.0, 80.0, 120.0, 260.0]),
            bandwidth_kbps=rng.choice([300.0, 2000.0, 8000.0]),
            device_load=round(rng.random(), 2),
            online=rng.random() > 0.02,
            cloud_infer_ms=infer,
            cloud_pressure=rng.choice([0.0, 0.0, 0.0, 0.1]),
        )
        decision = decide(cell, task, device)
        if decision.route == "device":
            latency = rng.uniform(*device_ms)
        else:
            latency = task.upload_bytes * 8 / device.bandwidth_kbps + device.rtt_ms + infer
        events.append(
            RecordedEvent(
                ts=moment,
                policy_version=1,
                cohort="stable",
                cell=(cell.task_type, cell.latency_budget, cell.privacy_tier),
                task=task,
                device=device,
                route=decision.route,
                decided_by=decision.decided_by,
                fallback="none",
                cache_hit=rng.random() < 0.02,
                ok=True,
                latency_ms=latency,
                tokens=task.tokens,
                replayable=True,
            )
        )
    return events


def protocol_event(recorded: RecordedEvent, device_id: str = "phone-1") -> dict[str, Any]:
    """A recorded event as a device sends it (every decision input included), for ingest."""
    return make_event(
        device_id,
        task_type=recorded.cell[0],
        latency_budget=recorded.cell[1],
        privacy_tier=recorded.cell[2],
        route=recorded.route,
        decided_by=recorded.decided_by,
        score=None,
        threshold=None,
        tokens=recorded.task.tokens,
        intent_conf=recorded.task.intent_conf,
        lm_conf=recorded.task.lm_conf,
        upload_bytes=recorded.task.upload_bytes,
        rtt_ms=recorded.device.rtt_ms,
        bandwidth_kbps=recorded.device.bandwidth_kbps,
        device_load=recorded.device.device_load,
        online=recorded.device.online,
        cloud_infer_ms=round(recorded.device.cloud_infer_ms, 1),
        cloud_pressure=recorded.device.cloud_pressure,
        latency_ms=round(recorded.latency_ms, 1),
        cache_hit=recorded.cache_hit,
    )


def decided_events(
    fleet: Fleet,
    cells: Mapping[tuple[str, str, str], Cell],
    *,
    count: int,
    seed: int = 1,
    version: int = 1,
    cohort: str = "stable",
    hours: float = 6.0,
    pressure: float = 0.0,
    record_inputs: bool = True,
    store: bool = True,
) -> list[Event]:
    """`count` raw events of `fleet` whose routes are what `decide` says under `cells` (a
    version's table): random signals, latencies from a known model (device ~ lognormal 40 ms;
    cloud = the network part + lognormal 300 ms), 5% cache hits, 3% cloud fallbacks, spread over
    the last `hours`. `record_inputs=False` leaves out online / cloud_infer_ms / cloud_pressure,
    as an older SDK would. Stored with bulk_create unless `store=False`."""
    rng = random.Random(seed)
    keys = sorted(cells)
    now = datetime.now(UTC)
    events = []
    for index in range(count):
        key = keys[index % len(keys)]
        task = TaskSignals(
            tokens=rng.randrange(0, 1200),
            intent_conf=round(rng.random(), 3),
            lm_conf=round(rng.random(), 3),
            upload_bytes=rng.choice([0, 2_000, 40_000, 400_000]),
        )
        device = DeviceState(
            rtt_ms=round(rng.lognormvariate(math.log(90), 0.6), 1),
            bandwidth_kbps=round(rng.choice([300.0, 2_000.0, 8_000.0, 40_000.0])),
            device_load=round(rng.random(), 2),
            online=rng.random() > 0.03,
            cloud_infer_ms=round(rng.uniform(150, 600), 1),
            cloud_pressure=pressure,
        )
        decision = decide(cells[key], task, device)
        cache_hit = rng.random() < 0.05
        fallback = "none"
        if decision.route == "cloud" and not cache_hit and rng.random() < 0.03:
            fallback = "cloud_to_device"
        if decision.route == "device":
            latency = rng.lognormvariate(math.log(40), 0.4)
        else:
            network = task.upload_bytes * 8 / device.bandwidth_kbps + device.rtt_ms
            latency = network + rng.lognormvariate(math.log(300), 0.3)
        if cache_hit:
            latency = rng.uniform(1, 3)
        ts = now - timedelta(seconds=rng.uniform(60, hours * 3600))
        events.append(
            Event(
                event_id=uuid.UUID(int=rng.getrandbits(128), version=4),
                fleet=fleet,
                device_id=f"phone-{index % 20}",
                ts=ts,
                received_at=ts,
                policy_version=version,
                cohort=cohort,
                task_type=key[0],
                latency_budget=key[1],
                privacy_tier=key[2],
                route=decision.route,
                decided_by=decision.decided_by,
                fallback=fallback,
                latency_ms=round(latency, 3),
                cache_hit=cache_hit,
                ok=True,
                deidentified=False,
                score=decision.score,
                threshold=decision.threshold,
                tokens=task.tokens,
                intent_conf=task.intent_conf,
                lm_conf=task.lm_conf,
                upload_bytes=task.upload_bytes,
                rtt_ms=device.rtt_ms,
                bandwidth_kbps=device.bandwidth_kbps,
                device_load=device.device_load,
                online=device.online if record_inputs else None,
                cloud_infer_ms=device.cloud_infer_ms if record_inputs else None,
                cloud_pressure=pressure if record_inputs else None,
            )
        )
    if store:
        Event.objects.bulk_create(events, batch_size=2000)
    return events
