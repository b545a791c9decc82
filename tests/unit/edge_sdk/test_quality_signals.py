"""The SDK's quality signals (PROTOCOL.md extensions): refine outcomes and quality on events,
late feedback (queue, batches, resends, offline, bounds) and shadow refines (rate, privacy,
de-identification, never delaying the answer, the SDK's budget). No server: the HTTP seam is
the queues' poster or an httpx MockTransport, as in test_device.py."""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from edge_sdk import (
    Answer,
    Decision,
    Device,
    DeviceConfig,
    Readings,
    RefineOutcome,
    RefineRequest,
    Task,
)
from edge_sdk.feedback import FeedbackQueue
from edge_sdk.telemetry import PostResult, TelemetryRevoked

from .sdk_helpers import Inference, policy_document, readings, task

EVENT_ID = "0b9f7c4e-2f5d-4c1a-9a37-5e0c3f1d2b6a"
LOW = {"tokens": 10, "intent_conf": 0.95, "lm_conf": 0.95}  # scores 0.04: stays on the device
NORMAL = "text/interactive/normal"


class Network:
    def __init__(self, **overrides: Any) -> None:
        self.reading = readings(**overrides)

    def __call__(self) -> Readings:
        return self.reading


class Refiner:
    """The app's `refine_infer`: records requests; changes drafts as told, or stalls."""

    def __init__(self, changed: bool = True, edit_ratio: float | None = 0.25) -> None:
        self.requests: list[RefineRequest] = []
        self.changed = changed
        self.edit_ratio = edit_ratio
        self.delay_s = 0.0
        self.fails = False

    async def __call__(self, request: RefineRequest) -> RefineOutcome:
        self.requests.append(request)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.fails:
            raise ConnectionError("cloud answered 503")
        return RefineOutcome(
            result=f"refined:{request.draft}", changed=self.changed, edit_ratio=self.edit_ratio
        )


def _document(
    *,
    version: int = 1,
    shadow: dict[str, float] | None = None,
    cells: dict[str, dict[str, Any]] | None = None,
) -> Any:
    document = policy_document(version, **(cells or {}))
    for cell in document["cells"]:
        label = f"{cell['task_type']}/{cell['latency_budget']}/{cell['privacy_tier']}"
        if shadow and label in shadow:
            cell["shadow_refine_rate"] = shadow[label]
    return document


def _device(
    *,
    inference: Inference | None = None,
    refiner: Refiner | None = None,
    network: Network | None = None,
    document: dict[str, Any] | None = None,
    device_infer: Any = None,
    cloud_infer: Any = None,
    http: httpx.AsyncClient | None = None,
    clock: Any = time.perf_counter,
    rng: random.Random | None = None,
    **config: Any,
) -> Device:
    inference = inference or Inference()
    device = Device(
        DeviceConfig(
            base_url="http://127.0.0.1:9",
            fleet_key="fk",
            device_id="phone-1",
            platform="android",
            model="pixel",
            **config,
        ),
        readings=network or Network(),
        device_infer=device_infer or inference.on_device,
        cloud_infer=cloud_infer or inference.on_cloud,
        refine_infer=refiner,
        http=http,
        clock=clock,
        rng=rng or random.Random(7),
    )
    if document is not None:
        device.policy.apply(document, save=False)
    return device


def _events(device: Device) -> list[dict[str, Any]]:
    return [json.loads(raw) for _, raw in device.telemetry._events]


async def _settle(device: Device) -> None:
    while device.shadow_pending:
        await asyncio.sleep(0.001)


# --- refine outcomes on draft_refine events ---------------------------------------------------


async def test_run__draft_refine_cloud_changed_the_draft__event_says_changed_and_how_much() -> None:
    # Given a draft_refine cell and an app whose refine changes a quarter of the draft
    refiner = Refiner(changed=True, edit_ratio=0.25)
    device = _device(refiner=refiner, document=_document(cells={NORMAL: {"mode": "draft_refine"}}))

    # When a task goes past θ
    outcome = await device.run(task())

    # Then the refine saw the device's draft, the answer is the refined one, and the event
    # carries refine_changed and refine_edit_ratio
    (request,) = refiner.requests
    assert (request.draft, request.shadow, request.deidentify) == ("device:400", False, False)
    assert (outcome.route, outcome.result) == ("draft_refine", "refined:device:400")
    assert (outcome.refine_changed, outcome.refine_edit_ratio) == (True, 0.25)
    (event,) = _events(device)
    assert (event["route"], event["refine_changed"], event["refine_edit_ratio"]) == (
        "draft_refine",
        True,
        0.25,
    )
    assert event["event_id"] == outcome.event_id
    assert "shadow_refine" not in event


async def test_run__draft_refine_cloud_kept_the_draft__edit_ratio_zero() -> None:
    # Given an app whose refine keeps the draft (it reports no ratio)
    refiner = Refiner(changed=False, edit_ratio=None)
    device = _device(refiner=refiner, document=_document(cells={NORMAL: {"mode": "draft_refine"}}))

    # When a task is drafted and refined
    outcome = await device.run(task())

    # Then the event (and the outcome) say unchanged, with ratio 0
    (event,) = _events(device)
    assert (event["refine_changed"], event["refine_edit_ratio"]) == (False, 0.0)
    assert (outcome.refine_changed, outcome.refine_edit_ratio) == (False, 0.0)


async def test_run__draft_refine_changed_ratio_unknown_or_odd__ratio_left_out_or_clamped() -> None:
    # Given refines that report no ratio, then a ratio above 1
    for ratio, expected in ((None, None), (1.7, 1.0), (math.nan, None)):
        refiner = Refiner(changed=True, edit_ratio=ratio)
        device = _device(
            refiner=refiner, document=_document(cells={NORMAL: {"mode": "draft_refine"}})
        )

        # When a task is refined
        await device.run(task())

        # Then refine_changed is sent; the ratio is left out when unknown, clamped to 0..1
        (event,) = _events(device)
        assert event["refine_changed"] is True
        assert event.get("refine_edit_ratio") == expected


async def test_run__draft_refine_with_cloud_infer_returning_refine_outcome__reported() -> None:
    # Given an app without refine_infer whose cloud_infer returns a RefineOutcome
    async def on_cloud(task: Task, decision: Decision) -> RefineOutcome:
        return RefineOutcome(result="better", changed=True, edit_ratio=0.5)

    device = _device(
        cloud_infer=on_cloud, document=_document(cells={NORMAL: {"mode": "draft_refine"}})
    )

    # When a task is refined
    outcome = await device.run(task())

    # Then its outcome is reported and the answer unwrapped
    assert outcome.result == "better"
    (event,) = _events(device)
    assert (event["refine_changed"], event["refine_edit_ratio"]) == (True, 0.5)


async def test_run__cloud_route_returning_refine_outcome__no_refine_fields() -> None:
    # Given an auto cell (route cloud, no draft) and a cloud call that says "changed"
    async def on_cloud(task: Task, decision: Decision) -> RefineOutcome:
        return RefineOutcome(result="cloud", changed=True, edit_ratio=0.5)

    device = _device(cloud_infer=on_cloud, document=_document())

    # When a task goes to the cloud
    outcome = await device.run(task())

    # Then there was no draft to change: the event has no refine_changed
    (event,) = _events(device)
    assert (event["route"], outcome.refine_changed) == ("cloud", None)
    assert "refine_changed" not in event
    assert "refine_edit_ratio" not in event


async def test_run__draft_refine_cloud_fails__draft_answers_without_refine_fields() -> None:
    # Given a refine that fails
    refiner = Refiner()
    refiner.fails = True
    device = _device(refiner=refiner, document=_document(cells={NORMAL: {"mode": "draft_refine"}}))

    # When a task is drafted and the refine fails
    outcome = await device.run(task())

    # Then the draft answers (cloud_to_device) and nothing is said about a refine
    assert (outcome.route, outcome.fallback, outcome.result) == (
        "device",
        "cloud_to_device",
        "device:400",
    )
    (event,) = _events(device)
    assert "refine_changed" not in event


async def test_run__refine_offline__no_refine_call() -> None:
    # Given a background draft_refine task on an offline device (queued until online)
    refiner = Refiner()
    device = _device(
        refiner=refiner,
        network=Network(online=False),
        document=_document(cells={"text/background/normal": {"mode": "draft_refine"}}),
    )

    # When it is run
    outcome = await device.run(task(latency_budget="background"))

    # Then it waits for the network; nothing was refined
    assert outcome.queued
    assert refiner.requests == []


# --- quality at the time -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("quality", "expected"), [(0.8, 0.8), (1.3, 1.0), (-0.2, 0.0), (math.nan, None), (None, None)]
)
async def test_run__device_answer_with_quality__event_carries_it_within_0_1(
    quality: float | None, expected: float | None
) -> None:
    # Given an app whose device model judges its answer
    async def on_device(task: Task) -> Answer:
        return Answer(result="hi", quality=quality)

    device = _device(device_infer=on_device, document=_document())

    # When a task is answered on the device
    outcome = await device.run(task(**LOW))

    # Then the answer is unwrapped and the event carries the quality, clamped, or none
    assert outcome.result == "hi"
    (event,) = _events(device)
    assert event.get("quality") == expected


# --- late feedback: the queue -------------------------------------------------------------------


class Server:
    """The feedback endpoint as a poster: answers in turn, records every body."""

    def __init__(self, *answers: PostResult) -> None:
        self.answers = list(answers)
        self.bodies: list[dict[str, Any]] = []
        self.raw: list[bytes] = []

    async def __call__(self, body: bytes) -> PostResult:
        self.raw.append(body)
        self.bodies.append(msgspec.json.decode(body))
        if self.answers:
            return self.answers.pop(0)
        items = len(self.bodies[-1]["feedback"])
        return 202, json.dumps({"accepted": items, "duplicates": 0}).encode(), None


def _ids(n: int) -> list[str]:
    rng = random.Random(n)
    return [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(n)]


async def test_feedback_queue__1200_items__batches_of_500_in_the_contracts_shape() -> None:
    # Given 1,200 feedback items
    server = Server()
    queue = FeedbackQueue(batch_max=500, poster=server)
    ids = _ids(1200)
    for index, event_id in enumerate(ids):
        queue.add(event_id, (index % 11) / 10)

    # When the queue is flushed
    assert await queue.flush()

    # Then three posts carried them all, in order, as {"feedback": [{event_id, quality}]}
    assert [len(body["feedback"]) for body in server.bodies] == [500, 500, 200]
    sent = [item for body in server.bodies for item in body["feedback"]]
    assert [item["event_id"] for item in sent] == ids
    assert set(sent[0]) == {"event_id", "quality"}
    assert (queue.pending, queue.delivered) == (0, 1200)


@pytest.mark.parametrize(
    "failure",
    [(503, b"", None), (0, b"", None), (429, b"", "3"), (404, b"", None)],
    ids=["5xx", "network", "429", "no-endpoint-yet"],
)
async def test_feedback_queue__failed_post__kept_and_resent_byte_for_byte(
    failure: PostResult,
) -> None:
    # Given feedback and a server that fails once
    server = Server(failure)
    queue = FeedbackQueue(poster=server)
    queue.add(EVENT_ID, 0.7)

    # When it is flushed twice
    assert not await queue.flush()
    assert queue.pending == 1
    assert await queue.flush()

    # Then the second post is the same bytes (idempotent per event_id), delivered once
    assert server.raw[0] == server.raw[1]
    assert (queue.pending, queue.delivered, queue.failures) == (0, 1, 1)


async def test_feedback_queue__duplicate_answered__counted_as_duplicate() -> None:
    # Given feedback the server already holds
    server = Server((202, b'{"accepted": 0, "duplicates": 1}', None))
    queue = FeedbackQueue(poster=server)
    queue.add(EVENT_ID, 0.7)

    # When it is flushed
    assert await queue.flush()

    # Then it leaves the queue as a duplicate
    assert (queue.pending, queue.delivered, queue.duplicates) == (0, 0, 1)


@pytest.mark.parametrize(
    "detail",
    [{"item": 1, "field": "quality"}, {"field": "feedback[1].quality", "message": "x"}],
    ids=["item-index", "field-path"],
)
async def test_feedback_queue__400_names_one_item__that_one_dropped_rest_sent(
    detail: dict[str, Any],
) -> None:
    # Given three items and a server that refuses the second
    refusal = json.dumps(
        {"error": {"code": "validation_failed", "message": "m", "details": [detail]}}
    ).encode()
    server = Server((400, refusal, None))
    queue = FeedbackQueue(poster=server)
    ids = _ids(3)
    for event_id in ids:
        queue.add(event_id, 0.5)

    # When the queue is flushed
    assert await queue.flush()

    # Then the named item is dropped and the other two are sent again at once
    assert [i["event_id"] for i in server.bodies[1]["feedback"]] == [ids[0], ids[2]]
    assert (queue.rejected, queue.delivered, queue.pending) == (1, 2, 0)


async def test_feedback_queue__401__revoked() -> None:
    queue = FeedbackQueue(poster=Server((401, b"", None)))
    queue.add(EVENT_ID, 0.5)

    with pytest.raises(TelemetryRevoked):
        await queue.flush()
    assert queue.pending == 1


async def test_feedback_queue__413__halved_until_it_fits() -> None:
    # Given 4 items and a server that finds 4 too many
    server = Server((413, b"", None))
    queue = FeedbackQueue(poster=server)
    for event_id in _ids(4):
        queue.add(event_id, 0.5)

    # When flushed
    assert await queue.flush()

    # Then it sends halves
    assert [len(b["feedback"]) for b in server.bodies] == [4, 2, 2]


def test_feedback_queue__full__oldest_dropped_and_counted() -> None:
    # Given a queue bounded at 3
    queue = FeedbackQueue(max_events=3)
    ids = _ids(5)

    # When 5 items are added
    for event_id in ids:
        queue.add(event_id, 0.5)

    # Then the 2 oldest are gone, counted
    assert (queue.pending, queue.dropped) == (3, 2)
    assert queue.event_ids() == ids[2:]


@pytest.mark.parametrize(
    ("event_id", "quality"),
    [
        ("not-a-uuid", 0.5),
        (42, 0.5),
        (EVENT_ID, 1.01),
        (EVENT_ID, -0.1),
        (EVENT_ID, math.nan),
        (EVENT_ID, True),
        (EVENT_ID, "0.5"),
    ],
)
def test_feedback__bad_id_or_quality__value_error_nothing_queued(
    event_id: Any, quality: Any
) -> None:
    device = _device(document=_document())

    with pytest.raises(ValueError):
        device.feedback(event_id, quality)
    assert device.feedback_queue.pending == 0


def test_feedback_queue__saved__read_back_by_the_next_run(tmp_path: Path) -> None:
    # Given feedback that could not be sent before the app stopped
    queue = FeedbackQueue(state_dir=tmp_path)
    queue.add(EVENT_ID, 0.9)
    queue.save()

    # When the next run starts
    again = FeedbackQueue(state_dir=tmp_path)
    loaded = again.load()

    # Then the item is pending again, the same
    assert (loaded, again.event_ids()) == (1, [EVENT_ID])
    assert (tmp_path / "feedback.jsonl").exists()
    assert not (tmp_path / "telemetry.jsonl").exists()


async def test_device_feedback__offline_then_restarted__kept_on_disk_and_pending(
    tmp_path: Path,
) -> None:
    # Given an offline device that gets feedback for an earlier answer
    device = _device(
        network=Network(online=False), state_dir=tmp_path, online_check_s=0.01, document=_document()
    )
    await device.start()
    outcome = await device.run(task(**LOW))
    assert outcome.event_id is not None
    device.feedback(outcome.event_id, 0.4)

    # When the app stops and starts again, still offline
    await device.stop()
    again = _device(network=Network(online=False), state_dir=tmp_path, online_check_s=0.01)
    await again.start()

    # Then the feedback is still pending, nothing sent
    assert again.feedback_queue.event_ids() == [outcome.event_id]
    await again.stop()


async def test_device_feedback__online__sent_after_its_event_and_acknowledged() -> None:
    # Given an online device whose server takes telemetry and feedback
    posts: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path in (
            "/api/v1/telemetry",
            "/api/v1/telemetry/feedback",
        ):
            posts.append(request.url.path)
            assert request.headers["Authorization"] == "Bearer tok"
            body = json.loads(request.content)
            items = len(body.get("events") or body.get("feedback"))
            return httpx.Response(202, json={"accepted": items, "duplicates": 0})
        return httpx.Response(404)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        device = _device(
            http=http, document=_document(), telemetry_flush_s=0.01, backoff_base_s=0.01
        )
        device.token = "tok"
        outcome = await device.run(task(**LOW))
        assert outcome.event_id is not None
        device.feedback(outcome.event_id, 0.6)

        # When its telemetry loop runs
        await device.start()
        for _ in range(500):
            if device.feedback_queue.delivered:
                break
            await asyncio.sleep(0.01)
        await device.stop()

    # Then the event went first, then the feedback, each acknowledged
    assert posts[:2] == ["/api/v1/telemetry", "/api/v1/telemetry/feedback"]
    assert (device.telemetry.delivered, device.feedback_queue.delivered) == (1, 1)


async def test_device_feedback__endpoint_missing__telemetry_still_delivered() -> None:
    # Given a server without the feedback endpoint yet (404)
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/v1/telemetry":
            items = len(json.loads(request.content)["events"])
            return httpx.Response(202, json={"accepted": items, "duplicates": 0})
        return httpx.Response(404)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        device = _device(
            http=http, document=_document(), telemetry_flush_s=0.01, backoff_base_s=0.01
        )
        device.token = "tok"
        first = await device.run(task(**LOW))
        assert first.event_id is not None
        device.feedback(first.event_id, 0.6)
        await device.start()

        # When more tasks run meanwhile
        for _ in range(3):
            await device.run(task(**LOW))
            await asyncio.sleep(0.05)
        for _ in range(300):
            if device.telemetry.delivered == 4:
                break
            await asyncio.sleep(0.01)
        await device.stop()

    # Then every event was delivered and the feedback waits for the endpoint
    assert (device.telemetry.delivered, device.feedback_queue.pending) == (4, 1)


# --- shadow refines -----------------------------------------------------------------------------


async def test_shadow__rate_5_percent__share_of_device_answers_within_sampling_error() -> None:
    # Given a cell with shadow_refine_rate 0.05 and a budget that never binds
    refiner = Refiner()
    device = _device(
        refiner=refiner,
        document=_document(shadow={NORMAL: 0.05}),
        shadow_refines_per_minute=10**9,
        rng=random.Random(11),
    )
    runs = 6000

    # When that many tasks are answered on the device
    shadowed = 0
    for _ in range(runs):
        shadowed += (await device.run(task(**LOW))).shadow_refine
    await _settle(device)

    # Then about 5% were refined in the background (4 standard errors), each reported once
    sigma = math.sqrt(0.05 * 0.95 / runs)
    assert abs(shadowed / runs - 0.05) < 4 * sigma
    assert len(refiner.requests) == shadowed == device.shadow_started
    events = _events(device)
    assert len(events) == runs
    assert sum(bool(e.get("shadow_refine")) for e in events) == shadowed


async def test_shadow__event__uploaded_with_outcome_and_draft_as_answer() -> None:
    # Given a cell that always shadow-refines (the simulator's extreme), a refine that edits
    refiner = Refiner(changed=True, edit_ratio=0.4)
    device = _device(refiner=refiner, document=_document(shadow={NORMAL: 1.0}))

    # When a task is answered on the device
    outcome = await device.run(task(**LOW))
    await _settle(device)

    # Then the answer is the device's; its event says the draft left the device (not
    # de-identified: the cell does not ask) and what the cloud made of it
    assert (outcome.route, outcome.result, outcome.shadow_refine) == ("device", "device:10", True)
    (request,) = refiner.requests
    assert (request.draft, request.shadow, request.deidentify) == ("device:10", True, False)
    (event,) = _events(device)
    assert event["event_id"] == outcome.event_id
    assert (event["route"], event["decided_by"], event["cache_hit"]) == (
        "device",
        "threshold",
        False,
    )
    assert (event["shadow_refine"], event["uploaded"], event["deidentified"]) == (True, True, False)
    assert (event["refine_changed"], event["refine_edit_ratio"]) == (True, 0.4)


async def test_shadow__cell_requires_deidentification__request_and_event_say_so() -> None:
    # Given a sensitive cell that allows de-identified uploads, shadow-refining
    refiner = Refiner(changed=False)
    label = "text/interactive/sensitive"
    document = _document(
        shadow={label: 1.0}, cells={label: {"upload_allowed": True, "upload_deidentify": True}}
    )
    device = _device(refiner=refiner, document=document)

    # When a task of it is answered on the device
    await device.run(task(privacy_tier="sensitive", **LOW))
    await _settle(device)

    # Then the app is told to de-identify, and the event says it was
    (request,) = refiner.requests
    assert request.deidentify is True
    (event,) = _events(device)
    assert (event["uploaded"], event["deidentified"], event["refine_changed"]) == (
        True,
        True,
        False,
    )


@pytest.mark.parametrize("tier", ["sensitive", "normal"])
async def test_shadow__cell_forbids_upload__never_refined(tier: str) -> None:
    # Given a cell that forbids uploads but (wrongly) carries a rate of 1
    refiner = Refiner()
    label = f"text/interactive/{tier}"
    document = _document(shadow={label: 1.0}, cells={label: {"upload_allowed": False}})
    device = _device(refiner=refiner, document=document)

    # When many tasks are answered on the device
    for _ in range(200):
        outcome = await device.run(task(privacy_tier=tier, **LOW))
        assert not outcome.shadow_refine

    # Then nothing left the device
    assert refiner.requests == []
    assert all(e["uploaded"] is False and "shadow_refine" not in e for e in _events(device))


async def test_shadow__slow_cloud__answer_not_delayed_event_sent_when_it_ends() -> None:
    # Given a refine that takes 300 ms, and a cloud timeout above it
    refiner = Refiner()
    refiner.delay_s = 0.3
    device = _device(
        refiner=refiner,
        document=_document(shadow={NORMAL: 1.0}, cells={NORMAL: {"cloud_timeout_ms": 5000}}),
    )

    # When a task is answered on the device
    started = time.perf_counter()
    outcome = await device.run(task(**LOW))
    elapsed = time.perf_counter() - started

    # Then the answer came at once (the device's latency only), the event waits for the
    # refine, and is recorded with its outcome once it ends
    assert elapsed < 0.1
    assert outcome.shadow_refine
    assert outcome.latency_ms < 100
    assert device.telemetry.pending == 0
    assert device.shadow_pending == 1
    await _settle(device)
    (event,) = _events(device)
    assert event["refine_changed"] is True
    assert event["latency_ms"] < 100


async def test_shadow__feedback_while_refining__queued_only_after_its_event() -> None:
    # Given a device answer whose shadow refine is still running
    refiner = Refiner()
    refiner.delay_s = 0.05
    device = _device(
        refiner=refiner,
        document=_document(shadow={NORMAL: 1.0}, cells={NORMAL: {"cloud_timeout_ms": 5000}}),
    )
    outcome = await device.run(task(**LOW))
    assert outcome.event_id is not None

    # When the app rates the answer at once
    device.feedback(outcome.event_id, 0.3)

    # Then the feedback waits for the event (the server never gets it first), then follows it
    assert (device.telemetry.pending, device.feedback_queue.pending) == (0, 0)
    await _settle(device)
    assert (device.telemetry.pending, device.feedback_queue.pending) == (1, 1)
    assert device.feedback_queue.event_ids() == [outcome.event_id]


async def test_shadow__cloud_timeout_or_failure__event_sent_without_outcome() -> None:
    # Given a refine that stalls past the cell's cloud timeout, and one that fails
    for stall in (True, False):
        refiner = Refiner()
        refiner.delay_s = 1.0 if stall else 0.0
        refiner.fails = not stall
        device = _device(
            refiner=refiner,
            document=_document(shadow={NORMAL: 1.0}, cells={NORMAL: {"cloud_timeout_ms": 20}}),
        )

        # When a task is answered on the device
        await device.run(task(**LOW))
        await _settle(device)

        # Then its event is sent as a shadow refine whose outcome is unknown
        (event,) = _events(device)
        assert (event["shadow_refine"], event["uploaded"]) == (True, True)
        assert "refine_changed" not in event
        assert device.shadow_failed == 1


async def test_shadow__device_stopped_meanwhile__event_still_recorded() -> None:
    # Given a shadow refine still running
    refiner = Refiner()
    refiner.delay_s = 60
    network = Network()
    device = _device(
        refiner=refiner,
        network=network,
        document=_document(shadow={NORMAL: 1.0}, cells={NORMAL: {"cloud_timeout_ms": 600_000}}),
    )
    await device.run(task(**LOW))
    assert device.shadow_pending == 1
    network.reading = readings(online=False)  # stop's last flush does not try the network

    # When the device stops
    await device.stop()

    # Then the refine is cut and the answer's event kept, without the outcome
    (event,) = _events(device)
    assert event["shadow_refine"] is True
    assert "refine_changed" not in event
    assert device.shadow_pending == 0


async def test_shadow__budget_per_minute__at_most_k_then_again_a_minute_later() -> None:
    # Given a rate of 1 and a budget of 3 shadow refines a minute, on a clock the test moves
    now = [1000.0]
    refiner = Refiner()
    device = _device(
        refiner=refiner,
        document=_document(shadow={NORMAL: 1.0}),
        shadow_refines_per_minute=3,
        clock=lambda: now[0],
    )

    # When 10 tasks are answered in one minute, then 10 more a minute later
    first = [(await device.run(task(**LOW))).shadow_refine for _ in range(10)]
    now[0] += 60.0
    second = [(await device.run(task(**LOW))).shadow_refine for _ in range(10)]
    await _settle(device)

    # Then 3 of each ten were refined; the others counted as over budget
    assert (sum(first), sum(second)) == (3, 3)
    assert (device.shadow_started, device.shadow_over_budget) == (6, 14)


async def test_shadow__budget_zero__none() -> None:
    refiner = Refiner()
    device = _device(
        refiner=refiner, document=_document(shadow={NORMAL: 1.0}), shadow_refines_per_minute=0
    )

    for _ in range(20):
        await device.run(task(**LOW))

    assert refiner.requests == []


async def test_shadow__not_answered_fresh_on_the_device__never_refined() -> None:
    # Given a cell that always shadow-refines
    refiner = Refiner()
    document = _document(shadow={NORMAL: 1.0, "text/background/normal": 1.0})

    # When tasks are answered by the cloud, from the cache, offline, or after a device failure
    cloud = _device(refiner=refiner, document=document)
    await cloud.run(task())  # scores 0.7: the cloud answers
    cached = _device(refiner=Refiner(), document=document)
    await cached.run(task(cache_key="k", **LOW))
    await _settle(cached)
    cached_again = await cached.run(task(cache_key="k", **LOW))
    offline = _device(refiner=refiner, network=Network(online=False), document=document)
    offline_outcome = await offline.run(task(latency_budget="background", **LOW))
    failing = Inference()
    failing.device_fails = True
    failed = _device(inference=failing, refiner=refiner, document=document)
    failed_outcome = await failed.run(task(**LOW))

    # Then none of them is shadow-refined
    assert cached_again.cache_hit
    assert not cached_again.shadow_refine
    assert offline_outcome.route == "device"
    assert not offline_outcome.shadow_refine
    assert failed_outcome.fallback == "device_to_cloud"
    assert not failed_outcome.shadow_refine
    assert refiner.requests == []


async def test_shadow__no_refine_infer__none() -> None:
    # Given an app that gives no refine_infer (an app written before shadow refines)
    device = _device(document=_document(shadow={NORMAL: 1.0}))

    # When tasks are answered on the device
    outcomes = [await device.run(task(**LOW)) for _ in range(10)]

    # Then none is shadow-refined and every event goes at once
    assert not any(o.shadow_refine for o in outcomes)
    assert device.telemetry.pending == 10
