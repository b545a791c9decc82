"""Generated events for the lab's tests whose answer is known by construction."""

import json
import random
from collections.abc import Collection
from datetime import UTC, datetime, timedelta
from typing import Any

from edge_sdk.decision import Cell, Decision, DeviceState, TaskSignals, decide
from lab.replay import RecordedEvent
from routing_policies.models import Device
from telemetry.ingest.services import landed_batches_process, telemetry_batch_ingest
from telemetry.models import Event
from tests.factories import demo_cell, protocol_event, recorded_sample

VOICE_KEY = ("voice", "interactive", "normal")
IMAGE_KEY = ("image", "interactive", "normal")  # a draft-refine cell of the demo table


def event_key(event: Event) -> tuple[str, str, str]:
    """A stored event's cell."""
    return (event.task_type, event.latency_budget, event.privacy_tier)


def stored_decision(cell: Cell, event: Event) -> Decision:
    """What `decide` gives for a stored event's recorded signals."""
    task = TaskSignals(
        tokens=event.tokens or 0,
        intent_conf=event.intent_conf or 0.0,
        lm_conf=event.lm_conf or 0.0,
        upload_bytes=event.upload_bytes or 0,
    )
    device = DeviceState(
        rtt_ms=event.rtt_ms or 0.0,
        bandwidth_kbps=event.bandwidth_kbps or 0.0,
        device_load=event.device_load or 0.0,
        online=bool(event.online),
        cloud_infer_ms=event.cloud_infer_ms or 0.0,
        cloud_pressure=event.cloud_pressure or 0.0,
    )
    return decide(cell, task, device)


def stored_route(cell: Cell, event: Event) -> str:
    """The route `decide` gives for a stored event's recorded signals."""
    return stored_decision(cell, event).route


def replayed_figures(
    cells: dict[tuple[str, str, str], Cell], events: list[Event]
) -> dict[str, Any]:
    """Routes (each of device, cloud, draft_refine), α, cloud calls and tokens of stored
    `events` decided under `cells`: the independent computation a replay is checked against."""
    routes = dict.fromkeys(("device", "cloud", "draft_refine"), 0)
    calls = tokens = 0
    for event in events:
        route = stored_route(cells[event_key(event)], event)
        routes[route] += 1
        if route != "device" and not event.cache_hit:
            calls += 1
            tokens += event.tokens
    return {
        "routes": routes,
        "alpha": routes["device"] / len(events),
        "calls": calls,
        "tokens": tokens,
    }


def slow_device_events(count: int = 400, *, seed: int = 5) -> list[dict[str, Any]]:
    """`count` events of voice/interactive/normal (budget 300 ms) as v1 decided them, ready to
    ingest: a device answer takes 600 ms, a cloud answer 140 ms (40 ms round trip, no upload,
    100 ms inference). Any α above a few percent breaks the cell's budget."""
    cell = demo_cell(VOICE_KEY)
    rng = random.Random(seed)
    now = datetime.now(UTC) - timedelta(minutes=5)
    events = []
    for _ in range(count):
        task = TaskSignals(
            tokens=rng.randint(0, 800),
            intent_conf=round(rng.random(), 3),
            lm_conf=round(rng.random(), 3),
            upload_bytes=0,
        )
        device = DeviceState(
            rtt_ms=40.0, bandwidth_kbps=8000.0, device_load=0.2, online=True, cloud_infer_ms=100.0
        )
        decision = decide(cell, task, device)
        recorded = RecordedEvent(
            ts=now,
            policy_version=1,
            cohort="stable",
            cell=VOICE_KEY,
            task=task,
            device=device,
            route=decision.route,
            decided_by=decision.decided_by,
            fallback="none",
            cache_hit=False,
            ok=True,
            latency_ms=600.0 if decision.route == "device" else 140.0,
            tokens=task.tokens,
            replayable=True,
        )
        events.append(protocol_event(recorded))
    return events


def true_kept(score: float) -> float:
    """The generated device model: the cloud keeps fewer drafts as the score rises."""
    return 0.97 - 0.6 * score


def refined_events(
    count: int, *, devices: Collection[str] = ("phone-1",), seed: int = 9
) -> list[dict[str, Any]]:
    """`count` events of the draft-refine image cell as the demo table decides them, ready to
    ingest, each from a device drawn from `devices`, with its score: every draft-refine
    reports whether the cloud changed the draft, and a third of the device answers were
    refined in the background (shadow refines), the draft kept as `true_kept` says."""
    cell = demo_cell(IMAGE_KEY)
    rng = random.Random(11)
    senders = random.Random(seed)
    choices = sorted(devices)
    events = []
    for recorded in recorded_sample(cell, count, seed=seed):
        event = protocol_event(recorded, senders.choice(choices))
        events.append(with_quality(event, cell, recorded, rng, shadow_share=1 / 3))
    return events


def with_quality(
    event: dict[str, Any],
    cell: Cell,
    recorded: RecordedEvent,
    rng: random.Random,
    *,
    shadow_share: float,
) -> dict[str, Any]:
    """`event` with its score and quality signals: a draft-refine reports whether the cloud
    changed the draft, `shadow_share` of the device answers (not cache hits) were refined in
    the background; the draft kept as `true_kept` says."""
    score = decide(cell, recorded.task, recorded.device).score
    event["score"] = score
    if score is not None and recorded.route == "draft_refine":
        event["refine_changed"] = rng.random() >= true_kept(score)
    elif (
        score is not None
        and recorded.route == "device"
        and not recorded.cache_hit
        and rng.random() < shadow_share
    ):
        event["shadow_refine"] = True
        event["refine_changed"] = rng.random() >= true_kept(score)
    return event


def ingest(fleet: Any, events: list[dict[str, Any]]) -> None:
    """Send `events` as their devices of `fleet` would (batches of at most 500 each), then let
    the worker process them (rollups, the segments' rows included)."""
    by_device: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        by_device.setdefault(event["device_id"], []).append(event)
    for device_id, own in by_device.items():
        device = Device.objects.get(fleet=fleet, device_id=device_id)
        for start in range(0, len(own), 500):
            batch = {"events": own[start : start + 500]}
            telemetry_batch_ingest(device=device, body=json.dumps(batch).encode())
    landed_batches_process()


# Segments (issue 26): the devices `decided_events` reports as (phone-0 … phone-19), each with
# an accelerator: every fourth an NPU, the next a GPU, the rest a CPU.
SEGMENT_DEVICES = 20
NPU_PHONES = frozenset(f"phone-{i}" for i in range(SEGMENT_DEVICES) if i % 4 == 0)


def accelerator_of(index: int) -> str:
    """The accelerator phone-`index` reports."""
    return ("npu", "gpu", "cpu", "cpu")[index % 4]


PHONES = tuple(f"phone-{i}" for i in range(SEGMENT_DEVICES))


def on_phones(events: list[Event], phones: Collection[str], *, seed: int = 3) -> list[Event]:
    """`events` (of `decided_events(..., store=False)`) each from a phone drawn at random
    from `phones`, stored: a phone's events then fall in every cell (decided_events' own
    device ids follow its cells in step)."""
    rng = random.Random(seed)
    choices = sorted(phones)
    for event in events:
        event.device_id = rng.choice(choices)
    Event.objects.bulk_create(events, batch_size=2000)
    return events


def phones_with_segments(*, fleet: Any, fleet_key: str, actor: Any) -> None:
    """Enrol phone-0 … phone-19 with their accelerators (`accelerator_of`) and create the
    fleet's segments `npu` (accelerator = npu), `gpu-or-npu` and `cars` (matches none)."""
    from routing_policies.devices.services import device_enroll
    from routing_policies.segments.services import segment_create

    for index in range(SEGMENT_DEVICES):
        device_enroll(
            fleet_key=fleet_key,
            device_id=f"phone-{index}",
            platform="android",
            attributes={"accelerator": accelerator_of(index)},
        )
    segment_create(
        actor=actor, fleet=fleet, name="npu", rule={"attribute": "accelerator", "equals": "npu"}
    )
    segment_create(
        actor=actor,
        fleet=fleet,
        name="gpu-or-npu",
        rule={"attribute": "accelerator", "in": ["gpu", "npu"]},
    )
    segment_create(
        actor=actor,
        fleet=fleet,
        name="cars",
        rule={"attribute": "platform", "equals": "android-automotive"},
    )
