"""bench/wire, protobuf part: protobuf and compression against JSON, in the same run (issue 25).

    .venv/bin/python -m bench.wire.protobuf                 # ~2-3 minutes
    .venv/bin/python -m bench.wire.protobuf --events 1000 --rounds 1 --loops 3 --ingest-rounds 1

(a) bytes per telemetry event: a batch of 500 events as the edge SDK sends them (every field,
    the decision inputs too), in JSON, protobuf, and each gzip- and zstd-compressed;
(b) bytes of the full policy document: the demo's 12 cells and a 200-cell table (50 task types
    × 4), JSON against protobuf, and compressed;
(c) CPU per call, in this thread's CPU time (`time.thread_time`, best of `--rounds` rounds of
    `--loops` calls): on the server, what the ingest path runs on a 500-event batch before it
    lands it (JSON: the guard's scan, the struct's decode, the context checks, the ids and days,
    `events.decode_batch`; protobuf: the columns read and checked whole against the same rules
    and context, `columns.accepted`, no event built), and the worker's read of the landed
    payload (the JSON text, or the protobuf bytes the column check lands); writing a document
    (JSON as DRF renders it, or protobuf); in the SDK, writing a batch's body (JSON: the queued
    lines joined; protobuf: `TelemetryWire.http_body`) and reading a document;
(d) ingest events/s: the same number of events posted as JSON batches and as protobuf batches
    of 500 (8 connections) to uvicorn serving the real app over PostgreSQL and its own
    redis-server, timed until every batch has its 202 (landed durably); the rounds alternate
    JSON and protobuf and the best of each counts. Processing by the worker is not timed (its
    CPU per batch is in (c)).

Uses bench/ingest's database (`bench_ingest`, recreated) and processes: not at the same time
as `python -m bench.ingest`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from random import Random
from typing import Any

from bench.ingest.run import (
    BATCH,
    BenchEvent,
    Processes,
    _answers,
    _django,
    _env,
    _free_port,
    _make_fleet,
    _own_redis,
    _post_all,
    _profiles,
    _setup_database,
    _wait,
    _wire_event,
)

CONNECTIONS = 8


def _events(count: int, device_id: str, seed: int) -> list[dict[str, Any]]:
    rng = Random(seed)
    profiles, weights = _profiles()
    now = datetime.now(UTC)
    return [
        _wire_event(
            BenchEvent(profile, now - timedelta(seconds=rng.uniform(0, 120)), rng),
            device_id,
            uuid.UUID(int=rng.getrandbits(128), version=4),
        )
        for profile in rng.choices(profiles, weights, k=count)
    ]


def _cpu_us(call: Callable[[], Any], rounds: int, loops: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.thread_time()
        for _ in range(loops):
            call()
        best = min(best, (time.thread_time() - started) / loops)
    return best * 1e6


def _row(name: str, value: float, baseline: float, unit: str) -> str:
    return f"  {name:<52} {value:>12,.1f} {unit:<6} {value / baseline:>8.3f}"


def bench_bytes() -> dict[str, Any]:
    """(a) and (b)."""
    from edge_sdk.wire import codec, compression

    events = _events(BATCH, "bench-device-0001", seed=1)
    batch_json = json.dumps({"events": events}, separators=(",", ":")).encode()
    batch_pb = codec.batch_to_protobuf({"events": events})
    out: dict[str, Any] = {"per_event_bytes": {}, "document_bytes": {}}
    print(f"\n(a) bytes per telemetry event (a batch of {BATCH}); ratio against JSON")
    for name, body in (("json", batch_json), ("protobuf", batch_pb)):
        for coding in ("", *compression.CODINGS):
            size = len(compression.compress(body, coding)) / BATCH
            label = f"{name}{'+' + coding if coding else ''}"
            out["per_event_bytes"][label] = round(size, 1)
            print(_row(label, size, len(batch_json) / BATCH, "B"))
    print("\n(b) bytes of the full policy document; ratio against its JSON")
    for label, document in _documents().items():
        plain = json.dumps(document, separators=(",", ":")).encode()
        encoded = codec.document_to_protobuf(document)
        assert codec.document_from_protobuf(encoded) == json.loads(plain)
        figures = {
            "json": len(plain),
            "protobuf": len(encoded),
            "json+gzip": len(compression.compress(plain, "gzip")),
            "protobuf+gzip": len(compression.compress(encoded, "gzip")),
        }
        out["document_bytes"][label] = figures
        for name, size in figures.items():
            print(_row(f"{label}: {name}", size, len(plain), "B"))
    return out


def _documents() -> dict[str, dict[str, Any]]:
    from routing_policies.cell_schema import DEFAULT_CELL_VALUES, SEED_DIMENSIONS
    from routing_policies.demo import demo_table
    from routing_policies.documents import build_document, ordered_keys

    published = datetime(2026, 11, 29, 15, tzinfo=UTC)
    dims = {**SEED_DIMENSIONS, "task_type": [f"task{i:02d}" for i in range(50)]}
    large = {
        key: {**DEFAULT_CELL_VALUES, "threshold": round(0.3 + (i % 50) / 100, 2)}
        for i, key in enumerate(ordered_keys(dims))
    }
    documents = {
        "demo 12 cells": build_document(
            fleet_slug="voice-assistant-android",
            number=7,
            published_at=published,
            dimensions=SEED_DIMENSIONS,
            table=demo_table(),
        ),
        "200 cells": build_document(
            fleet_slug="voice-assistant-android",
            number=7,
            published_at=published,
            dimensions=dims,
            table=large,
        ),
    }
    return {label: json.loads(json.dumps(doc)) for label, doc in documents.items()}


def bench_cpu(rounds: int, loops: int) -> dict[str, Any]:
    """(c)."""
    import msgspec
    from rest_framework.renderers import JSONRenderer

    from edge_sdk.wire import codec
    from edge_sdk.wire.negotiation import TelemetryWire
    from telemetry.ingest.columns import accepted
    from telemetry.ingest.events import decode_batch, decode_landed
    from telemetry.ingest.services.landing import _day_numbers

    events = _events(BATCH, "bench-device-0001", seed=2)
    lines = [msgspec.json.encode(event) for event in events]
    batch_json = b'{"events":[' + b",".join(lines) + b"]}"
    batch_pb = codec.batch_to_protobuf({"events": events})
    wire = TelemetryWire("auto")
    wire.protobuf = True
    renderer = JSONRenderer()
    document = _documents()["demo 12 cells"]
    doc_json = renderer.render(document)
    doc_pb = codec.document_to_protobuf(document)

    context = _context("bench-device-0001")

    def read_json_batch() -> Any:
        # What the ingest path runs on a JSON body before it lands it: the guard's scan and the
        # struct's decode (events.decode_batch), the context checks, the ids and days.
        events = decode_batch(batch_json, context)
        unique = {event.event_id.hex: event for event in events}
        return list(unique), _day_numbers(unique)

    def read_protobuf_batch() -> Any:
        # ... and on a column-wise protobuf one: its columns read and checked whole against the
        # same struct's rules and the same context (columns.accepted), no event built.
        whole = accepted(codec.batch_columns_from_protobuf(batch_pb), context)
        assert whole is not None
        return whole.ids, whole.days

    assert read_protobuf_batch() == read_json_batch()
    pairs = {
        "server: read and check a 500-event batch": (
            read_json_batch,
            read_protobuf_batch,
        ),
        # The worker, later: the events of the landed payload (the batch's JSON text, or the
        # protobuf bytes a batch accepted column by column is landed as).
        "worker: read a landed 500-event batch": (
            lambda: decode_landed(batch_json),
            lambda: decode_landed(batch_pb),
        ),
        "server: write the 12-cell document": (
            lambda: renderer.render(document),
            lambda: codec.document_to_protobuf(document),
        ),
        "sdk: write a 500-event batch's body": (
            lambda: b'{"events":[' + b",".join(lines) + b"]}",
            lambda: wire.http_body(batch_json),
        ),
        "sdk: read the 12-cell document": (
            lambda: json.loads(doc_json),
            lambda: codec.document_from_protobuf(doc_pb),
        ),
    }
    print(f"\n(c) CPU per call, µs (best of {rounds} × {loops}); ratio protobuf / JSON")
    out: dict[str, Any] = {}
    for name, (on_json, on_protobuf) in pairs.items():
        json_us = _cpu_us(on_json, rounds, loops)
        protobuf_us = _cpu_us(on_protobuf, rounds, loops)
        out[name] = {"json_us": round(json_us, 1), "protobuf_us": round(protobuf_us, 1)}
        print(_row(f"{name}: json", json_us, json_us, "µs"))
        print(_row(f"{name}: protobuf", protobuf_us, json_us, "µs"))
    return out


def _context(device_id: str) -> Any:
    """The request's context of a bench device's batch: the demo fleet's versions 1 and 2."""
    from routing_policies.cell_schema import SEED_DIMENSIONS
    from telemetry.ingest.events import BatchContext, VersionDimensions
    from telemetry.ingest.services.landing import retention_start

    now = datetime.now(UTC)
    dims = VersionDimensions.of(SEED_DIMENSIONS)
    return BatchContext(
        device_id=device_id, now=now, oldest=retention_start(now), versions={1: dims, 2: dims}
    )


def bench_ingest(args: argparse.Namespace, processes: Processes, redis_url: str) -> dict[str, Any]:
    """(d)."""
    from edge_sdk.wire import PROTOBUF_MEDIA_TYPE, codec

    fleet_id, tokens = _make_fleet("bench-wire", args.devices)
    port = _free_port()
    processes.start(
        "web",
        [
            *(sys.executable, "-m", "uvicorn", "controlplane.asgi:application"),
            *("--host", "127.0.0.1", "--port", str(port), "--lifespan", "off"),
            *("--no-access-log", "--log-level", "warning", "--workers", str(args.web_workers)),
        ],
        _env(redis_url),
    )
    base_url = f"http://127.0.0.1:{port}"
    _wait(lambda: _answers(f"{base_url}/healthz"), 60, "the web process")
    per_round = args.events - args.events % BATCH
    seed = 10

    def bodies(protobuf: bool) -> list[tuple[str, bytes]]:
        nonlocal seed
        out = []
        for index in range(per_round // BATCH):
            device_id, token = tokens[index % len(tokens)]
            seed += 1
            events = _events(BATCH, device_id, seed)
            body = (
                codec.batch_to_protobuf({"events": events})
                if protobuf
                else json.dumps({"events": events}).encode()
            )
            out.append((token, body))
        return out

    media = {False: "application/json", True: PROTOBUF_MEDIA_TYPE}
    asyncio.run(_post_all(base_url, bodies(False)[:4], 4))  # warm up
    asyncio.run(_post_all(base_url, bodies(True)[:4], 4, media[True]))
    rates: dict[str, list[float]] = {"json": [], "protobuf": []}
    print(f"\n(d) ingest: {per_round} events per round in batches of {BATCH}, until all 202s")
    for _ in range(args.ingest_rounds):
        for protobuf in (False, True):
            posted = bodies(protobuf)
            size = sum(len(b) for _, b in posted) / len(posted)
            started = time.perf_counter()
            asyncio.run(_post_all(base_url, posted, CONNECTIONS, media[protobuf]))
            rate = per_round / (time.perf_counter() - started)
            name = "protobuf" if protobuf else "json"
            rates[name].append(rate)
            print(f"    {name:<8} {rate:>10,.0f} events/s (batch body {size / 1024:,.0f} KiB)")
    best_json, best_protobuf = max(rates["json"]), max(rates["protobuf"])
    print(_row("ingest, best round: json", best_json, best_json, "ev/s"))
    print(_row("ingest, best round: protobuf", best_protobuf, best_json, "ev/s"))
    print(f"    landed events in the database: {_landed_events(fleet_id):,}")
    return {
        "events_per_round": per_round,
        "rounds": args.ingest_rounds,
        "json_events_per_s": [round(r) for r in rates["json"]],
        "protobuf_events_per_s": [round(r) for r in rates["protobuf"]],
        "ratio_best_protobuf_to_json": round(best_protobuf / best_json, 3),
    }


def _landed_events(fleet_id: int) -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT coalesce(sum(event_count), 0) FROM telemetry_landedbatch")
        return int(cursor.fetchone()[0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.wire.protobuf")
    parser.add_argument("--events", type=int, default=40_000, help="(d) events per round")
    parser.add_argument("--ingest-rounds", type=int, default=2)
    parser.add_argument("--devices", type=int, default=32)
    parser.add_argument("--web-workers", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5, help="(c) rounds")
    parser.add_argument("--loops", type=int, default=50, help="(c) calls per round")
    parser.add_argument("--skip-ingest", action="store_true")
    parser.add_argument("--json", default="", help="write the figures here")
    args = parser.parse_args(argv)
    print(
        f"bench/wire protobuf: Python {platform.python_version()}, "
        f"protobuf {_protobuf_version()}, {platform.machine()}"
    )
    processes = Processes()
    results: dict[str, Any] = {"started_at": datetime.now(UTC).isoformat()}
    try:
        _setup_database()
        with _own_redis(processes) as redis_url:
            _django(redis_url)
            results["bytes"] = bench_bytes()
            results["cpu"] = bench_cpu(args.rounds, args.loops)
            if not args.skip_ingest:
                results["ingest"] = bench_ingest(args, processes, redis_url)
    finally:
        processes.stop_all()
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=2)
    print("\nbench/wire protobuf: done (ratios are protobuf / JSON, same run)")
    return 0


def _protobuf_version() -> str:
    from google.protobuf import __version__
    from google.protobuf.internal import api_implementation

    return f"{__version__} ({api_implementation.Type()})"


if __name__ == "__main__":
    sys.exit(main())
