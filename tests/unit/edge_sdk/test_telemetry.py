"""TelemetryQueue and build_event: what the server's validation accepts, and what each answer
of `POST /api/v1/telemetry` does to the queue."""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from edge_sdk import Decision, PolicyStore, Router, TelemetryQueue, TelemetryRevoked, build_event
from edge_sdk.telemetry import MAX_BATCH_BYTES, PostResult
from telemetry.ingest.events import BatchContext, VersionDimensions, decode_batch

from .sdk_helpers import policy_document, readings, task

DEVICE = "phone-0001"


def _event(**overrides: Any) -> dict[str, Any]:
    the_task = overrides.pop("task", task())
    reading = overrides.pop("readings", readings())
    decision = Router(_store()).route(the_task, reading)
    values: dict[str, Any] = {
        "device_id": DEVICE,
        "policy_version": 1,
        "task": the_task,
        "readings": reading,
        "decision": decision,
        "route": decision.route,
        "fallback": "none",
        "latency_ms": 35.2,
        "cache_hit": False,
        "ok": True,
        "deidentified": False,
        "ts": time.time(),
        **overrides,
    }
    return build_event(**values)


def _store() -> PolicyStore:
    store = PolicyStore()
    store.apply(policy_document())
    return store


class _Versions:
    def get(self, number: int, /) -> VersionDimensions | None:
        return VersionDimensions.of(policy_document()["dimensions"]) if number == 1 else None


def _server_accepts(events: Iterable[dict[str, Any]]) -> int:
    """Run the server's own validation (telemetry.ingest.events.decode_batch) on a batch."""
    now = datetime.now(UTC)
    context = BatchContext(
        device_id=DEVICE, now=now, oldest=now - timedelta(days=30), versions=_Versions()
    )
    body = json.dumps({"events": list(events)}).encode()
    return len(decode_batch(body, context))


class Server:
    """A scripted `POST /api/v1/telemetry`: answers in order, records every body."""

    def __init__(self, *answers: PostResult) -> None:
        self.answers = list(answers)
        self.bodies: list[list[dict[str, Any]]] = []

    async def __call__(self, body: bytes) -> PostResult:
        self.bodies.append(json.loads(body)["events"])
        if self.answers:
            return self.answers.pop(0)
        return _accepted(len(self.bodies[-1]))


def _accepted(count: int, duplicates: int = 0) -> PostResult:
    return 202, json.dumps({"accepted": count, "duplicates": duplicates}).encode(), None


def _ids(body: list[dict[str, Any]]) -> list[str]:
    return [event["event_id"] for event in body]


# --- build_event ------------------------------------------------------------------------------


def test_build_event__every_route_and_decided_by__passes_the_servers_validation() -> None:
    events = [
        _event(),
        _event(task=task(tokens=5, intent_conf=0.99, lm_conf=0.99)),
        _event(task=task(task_type="image", privacy_tier="normal"), fallback="cloud_to_device"),
        _event(readings=readings(online=False)),
        _event(cache_hit=True, latency_ms=0.0, ok=False, deidentified=True),
    ]

    assert _server_accepts(events) == 5
    assert len({event["event_id"] for event in events}) == 5
    assert all(uuid.UUID(event["event_id"]).version == 4 for event in events)


def test_build_event__protocol_fields__present_with_the_decisions_numbers() -> None:
    event = _event(ts=datetime(2026, 11, 29, 15, 0, 0, 123000, tzinfo=UTC).timestamp())

    assert event["ts"] == "2026-11-29T15:00:00.123Z"
    assert {k: event[k] for k in ("route", "decided_by", "score", "threshold", "tokens")} == {
        "route": "cloud",
        "decided_by": "threshold",
        "score": pytest.approx(0.7),
        "threshold": 0.6,
        "tokens": 400,
    }
    assert (event["rtt_ms"], event["bandwidth_kbps"], event["device_load"]) == (80.0, 5000.0, 0.3)


def test_build_event__decision_inputs__online_estimate_and_pressure_sent() -> None:
    # Given a task decided under a cloud-pressure offset, and one with odd readings
    event = _event(cloud_pressure=0.15)
    odd = _event(readings=readings(cloud_infer_ms=math.nan, online=False), cloud_pressure=3.0)

    # Then the backtest gets every input of the decision (PROTOCOL.md extensions)
    assert (event["online"], event["cloud_infer_ms"], event["cloud_pressure"]) == (
        True,
        250.0,
        0.15,
    )
    # and out-of-range ones are clamped or left out, never refused by the server
    assert (odd["online"], odd["cloud_pressure"]) == (False, 1.0)
    assert "cloud_infer_ms" not in odd
    assert _server_accepts([event, odd]) == 2


def test_build_event__out_of_range_readings_from_the_app__clamped_or_left_out() -> None:
    event = _event(
        task=task(intent_conf=1.2, lm_conf=-0.1),
        readings=readings(device_load=1.7, rtt_ms=math.nan, bandwidth_kbps=math.inf),
        latency_ms=-3.0,
    )

    assert (event["intent_conf"], event["lm_conf"], event["device_load"]) == (1.0, 0.0, 1.0)
    assert "rtt_ms" not in event
    assert "bandwidth_kbps" not in event
    assert event["latency_ms"] == 0.0
    assert _server_accepts([event]) == 1


def test_build_event__decided_before_scoring__omits_score_and_threshold() -> None:
    decision = Decision(
        route="device", decided_by="policy", base_threshold=0.6, latency_budget_ms=300
    )

    event = _event(decision=decision, route="device")

    assert "score" not in event
    assert "threshold" not in event
    assert _server_accepts([event]) == 1


# --- the queue --------------------------------------------------------------------------------


async def test_flush__202__events_leave_the_queue_and_are_counted() -> None:
    server = Server()
    queue = TelemetryQueue(poster=server)
    for _ in range(3):
        queue.record(_event())

    assert await queue.flush()

    assert (queue.pending, queue.delivered, queue.batches) == (0, 3, 1)


async def test_flush__network_failure__keeps_the_batch_and_resends_the_same_ids() -> None:
    # Given a first attempt that never reaches the server, then a 202
    server = Server((0, b"", None))
    queue = TelemetryQueue(poster=server)
    for _ in range(4):
        queue.record(_event())

    assert not await queue.flush()
    assert (queue.pending, queue.failures) == (4, 1)
    assert await queue.flush()

    # Then the resend carried the very same events (same ids, same bytes)
    assert server.bodies[0] == server.bodies[1]
    assert queue.pending == 0


async def test_flush__202_with_duplicates__counts_them_apart_from_delivered() -> None:
    queue = TelemetryQueue(poster=Server(_accepted(1, duplicates=2)))
    for _ in range(3):
        queue.record(_event())

    assert await queue.flush()

    assert (queue.delivered, queue.duplicates, queue.pending) == (1, 2, 0)


async def test_flush__400_naming_events__drops_only_those_and_sends_the_rest() -> None:
    refusal = {
        "error": {
            "code": "validation_failed",
            "message": "1 event(s) are invalid; nothing of this batch was stored.",
            "details": [{"event": 1, "field": "ts", "message": "More than 5 minutes ahead."}],
        }
    }
    server = Server((400, json.dumps(refusal).encode(), None))
    queue = TelemetryQueue(poster=server)
    for _ in range(3):
        queue.record(_event())

    assert await queue.flush()

    first, second = server.bodies
    assert _ids(second) == [_ids(first)[0], _ids(first)[2]]
    assert (queue.rejected, queue.delivered, queue.pending) == (1, 2, 0)


async def test_flush__400_without_event_names__drops_the_batch_rather_than_loop() -> None:
    body = json.dumps({"error": {"code": "malformed_json", "message": "x", "details": []}})
    queue = TelemetryQueue(poster=Server((400, body.encode(), None)))
    for _ in range(2):
        queue.record(_event())

    assert await queue.flush()

    assert (queue.rejected, queue.pending) == (2, 0)


async def test_flush__413__halves_the_batch_until_it_passes() -> None:
    too_large = (413, b'{"error":{"code":"payload_too_large"}}', None)
    server = Server(too_large, too_large)
    queue = TelemetryQueue(poster=server, batch_max=8)
    for _ in range(8):
        queue.record(_event())

    assert await queue.flush()

    assert [len(body) for body in server.bodies] == [8, 4, 2, 2, 2, 2]
    assert (queue.delivered, queue.pending, queue.rejected) == (8, 0, 0)


async def test_flush__401__raises_revoked_and_keeps_the_events() -> None:
    queue = TelemetryQueue(poster=Server((401, b"{}", None)))
    queue.record(_event())

    with pytest.raises(TelemetryRevoked):
        await queue.flush()
    assert queue.pending == 1


async def test_flush__429__keeps_the_events_and_says_how_long_to_wait() -> None:
    queue = TelemetryQueue(poster=Server((429, b"{}", "17")))
    queue.record(_event())

    assert not await queue.flush()

    assert (queue.pending, queue.retry_after) == (1, 17.0)


async def test_flush__more_than_a_batch__sends_batches_of_batch_max_oldest_first() -> None:
    server = Server()
    queue = TelemetryQueue(poster=server, batch_max=4)
    recorded = []
    for _ in range(10):
        event = _event()
        recorded.append(event["event_id"])
        queue.record(event)

    assert await queue.flush()

    assert [len(body) for body in server.bodies] == [4, 4, 2]
    assert [i for body in server.bodies for i in _ids(body)] == recorded


def test_queue__batch_max_over_the_protocols_limit__capped_at_1000() -> None:
    assert TelemetryQueue(batch_max=5000).batch_max == 1000


async def test_take__batch_near_one_mebibyte__split_below_the_limit() -> None:
    server = Server()
    queue = TelemetryQueue(poster=server, batch_max=1000, max_events=5000)
    big = _event()
    big["device_id"] = "d" * 128
    size = len(json.dumps(big))
    count = MAX_BATCH_BYTES // size + 10
    for _ in range(count):
        queue.record({**big, "event_id": str(uuid.uuid4())})

    assert await queue.flush()

    assert len(server.bodies) == 2
    assert all(len(json.dumps({"events": body})) <= MAX_BATCH_BYTES for body in server.bodies)


def test_record__queue_full__drops_the_oldest_and_counts_it() -> None:
    queue = TelemetryQueue(max_events=3)
    events = [_event() for _ in range(5)]
    for event in events:
        queue.record(event)

    assert queue.pending == 3
    assert queue.dropped == 2
    assert queue.event_ids() == [event["event_id"] for event in events[2:]]
    assert queue.counters()["dropped"] == 2


async def test_flush__events_pushed_out_while_in_flight__not_removed_twice() -> None:
    # Given a full queue of 3 whose flush is in flight when 2 newer events push 2 old ones out
    queue = TelemetryQueue(max_events=3)
    newer = [_event(), _event()]

    async def post(body: bytes) -> PostResult:
        while newer:
            queue.record(newer.pop(0))
        return _accepted(len(json.loads(body)["events"]))

    queue.poster = post
    for _ in range(3):
        queue.record(_event())
    queue.batch_max = queue._limit = 3

    await queue.flush()

    # Then the 202 removes only what was sent: the two newer events are still there (and sent)
    assert queue.dropped == 2
    assert queue.pending == 0
    assert queue.delivered == 3 + 2


def test_wake__queue_reaches_a_batch__calls_on_full_once() -> None:
    calls: list[int] = []
    queue = TelemetryQueue(batch_max=2, on_full=lambda: calls.append(1))

    for _ in range(3):
        queue.record(_event())

    assert calls == [1]


# --- disk -------------------------------------------------------------------------------------


def test_save_and_load__unsent_events__survive_a_restart_byte_for_byte(tmp_path: Path) -> None:
    queue = TelemetryQueue(state_dir=tmp_path)
    for _ in range(3):
        queue.record(_event())
    queue.save()

    again = TelemetryQueue(state_dir=tmp_path)
    assert again.load() == 3

    assert again.event_ids() == queue.event_ids()
    assert list(tmp_path.iterdir()) == [tmp_path / "telemetry.jsonl"]  # no temporary left


def test_load__more_stored_than_the_bound__keeps_the_newest_and_counts_the_rest(
    tmp_path: Path,
) -> None:
    queue = TelemetryQueue(state_dir=tmp_path)
    for _ in range(5):
        queue.record(_event())
    queue.save()

    small = TelemetryQueue(state_dir=tmp_path, max_events=2)
    small.load()

    assert small.event_ids() == queue.event_ids()[3:]
    assert small.dropped == 3


async def test_save__after_everything_was_delivered__removes_the_file(tmp_path: Path) -> None:
    queue = TelemetryQueue(state_dir=tmp_path, poster=Server())
    queue.record(_event())
    queue.save()
    assert (tmp_path / "telemetry.jsonl").exists()

    await queue.flush()
    queue.save()

    assert not (tmp_path / "telemetry.jsonl").exists()


async def test_refresh_saved__deliveries_succeeding__nothing_written_unless_a_file_exists(
    tmp_path: Path,
) -> None:
    queue = TelemetryQueue(state_dir=tmp_path, poster=Server())
    queue.record(_event())
    await queue.refresh_saved()
    assert not (tmp_path / "telemetry.jsonl").exists()

    queue.save()
    queue.record(_event())
    await queue.refresh_saved()

    assert len((tmp_path / "telemetry.jsonl").read_bytes().splitlines()) == 2
