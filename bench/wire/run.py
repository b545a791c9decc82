"""Bytes on the wire and CPU of the policy document's encodings, each against the whole JSON
document in the same run (issue 25).

The tables: the demo fleet's 12 cells (`routing_policies.demo.demo_table`), and a 200-cell table
(25 task types × 4 latency budgets × 2 privacy tiers, the demo's cells plus varied θ). The change:
one cell's θ (text/interactive/normal), published as the next version (new number, ETag and
publication time), which is what a device moving from vN to vM receives.

Each figure is one function returning rows (`Row`); `main` prints them as one table. A figure
with a baseline shows ours / baseline. CPU is the best of `--rounds` rounds of `--loops` calls,
timed in this thread's CPU time (`time.thread_time`), so other processes on a shared machine do
not count against either side.

    .venv/bin/python -m bench.wire                    # ~10 s
    .venv/bin/python -m bench.wire --rounds 1 --loops 3   # the smoke run's size
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

import django

django.setup()

from edge_sdk.delta import apply_delta, canonical_hash, make_delta  # noqa: E402
from edge_sdk.wire.codec import (  # noqa: E402
    delta_from_protobuf,
    delta_to_protobuf,
    frame_to_protobuf,
)
from routing_policies.cell_schema import DEFAULT_CELL_VALUES  # noqa: E402
from routing_policies.demo import DEMO_FLEET, demo_table  # noqa: E402
from routing_policies.documents import Table, build_document, ordered_keys  # noqa: E402

_COMPACT = (",", ":")
CHANGED_CELL = ("text", "interactive", "normal")


@dataclass(frozen=True)
class Row:
    """One line of the printed table: `value` in `unit`, and the baseline's when there is one."""

    figure: str
    case: str
    value: float
    unit: str
    baseline: float | None = None

    @property
    def ratio(self) -> str:
        return f"{self.value / self.baseline:.3f}" if self.baseline else ""


@dataclass(frozen=True)
class Pair:
    """A table before and after its one-cell change, as the documents a device receives."""

    name: str
    before: dict[str, Any]
    after: dict[str, Any]

    @property
    def full_json(self) -> bytes:
        """The whole target document, as the control plane serves it (compact JSON)."""
        return json.dumps(self.after, separators=_COMPACT).encode()


def _large_table() -> tuple[dict[str, list[str]], Table]:
    dimensions = {
        "task_type": ["voice", "text", "image", *(f"task_{n:02d}" for n in range(22))],
        "latency_budget": ["interactive", "background", "batch", "realtime"],
        "privacy_tier": ["sensitive", "normal"],
    }
    demo = demo_table()
    table: Table = {}
    for index, key in enumerate(ordered_keys(dimensions)):
        values = dict(demo.get(key, DEFAULT_CELL_VALUES))
        values["threshold"] = round(0.3 + (index % 50) / 100, 2)
        table[key] = values
    return dimensions, table


def _pair(name: str, dimensions: dict[str, list[str]], table: Table) -> Pair:
    published = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
    changed = {key: dict(values) for key, values in table.items()}
    changed[CHANGED_CELL]["threshold"] = round(changed[CHANGED_CELL]["threshold"] - 0.05, 2)
    before, after = (
        build_document(
            fleet_slug=DEMO_FLEET,
            number=number,
            published_at=published + timedelta(hours=number),
            dimensions=dimensions,
            table=content,
        )
        for number, content in ((3, table), (4, changed))
    )
    return Pair(name, before, after)


def pairs() -> list[Pair]:
    """The demo's 12-cell table and the 200-cell one, each with its one-cell change."""
    from routing_policies.cell_schema import SEED_DIMENSIONS

    return [
        _pair("12 cells", SEED_DIMENSIONS, demo_table()),
        _pair("200 cells", *_large_table()),
    ]


def _ws_frame_bytes(payload: bytes) -> int:
    """A server → device WebSocket text frame (RFC 6455: unmasked, 2, 4 or 10 header bytes)."""
    size = len(payload)
    return size + (2 if size < 126 else 4 if size < 65536 else 10)


def _policy_frame(document: dict[str, Any]) -> bytes:
    return json.dumps({"type": "policy", **document, "rollout": None}, separators=_COMPACT).encode()


def _delta_frame(delta: dict[str, Any]) -> bytes:
    return json.dumps(
        {"type": "policy_delta", **delta, "rollout": None}, separators=_COMPACT
    ).encode()


def _cpu_us(work: Callable[[], object], rounds: int, loops: int) -> float:
    """Microseconds of this thread's CPU per call, best round."""
    best = float("inf")
    for _ in range(rounds):
        began = time.thread_time()
        for _ in range(loops):
            work()
        best = min(best, (time.thread_time() - began) / loops)
    return best * 1e6


# --- the figures: one function each ---------------------------------------------------------


def delta_bytes(pair: Pair, rounds: int, loops: int) -> list[Row]:
    """Bytes a device receives for the change: the delta against the whole document, as the
    JSON body (HTTP, MQTT) and as a WebSocket frame."""
    delta = make_delta(pair.before, pair.after)
    assert delta is not None
    body = json.dumps(delta, separators=_COMPACT, ensure_ascii=False).encode()
    figure = f"bytes, one-cell change, {pair.name}"
    return [
        Row(figure, "delta JSON body vs full JSON document", len(body), "B", len(pair.full_json)),
        Row(
            figure,
            "policy_delta WS frame vs policy WS frame",
            _ws_frame_bytes(_delta_frame(delta)),
            "B",
            _ws_frame_bytes(_policy_frame(pair.after)),
        ),
        Row(
            figure,
            "delta protobuf body vs full JSON document",
            len(delta_to_protobuf(delta)),
            "B",
            len(pair.full_json),
        ),
        Row(
            figure,
            "policy_delta protobuf WS frame vs policy WS frame",
            _ws_frame_bytes(frame_to_protobuf({"type": "policy_delta", **delta, "rollout": None})),
            "B",
            _ws_frame_bytes(_policy_frame(pair.after)),
        ),
    ]


def delta_make_cpu(pair: Pair, rounds: int, loops: int) -> list[Row]:
    """Server: making the delta (and encoding it) against encoding the whole document."""
    make = _cpu_us(
        lambda: json.dumps(make_delta(pair.before, pair.after), separators=_COMPACT),
        rounds,
        loops,
    )
    encode = _cpu_us(lambda: json.dumps(pair.after, separators=_COMPACT), rounds, loops)
    return [Row(f"server CPU, {pair.name}", "make delta vs encode full JSON", make, "µs", encode)]


def delta_apply_cpu(pair: Pair, rounds: int, loops: int) -> list[Row]:
    """Device: decoding and applying the delta (hash checked) against decoding the whole
    document; and the canonical hash alone."""
    delta = make_delta(pair.before, pair.after)
    body = json.dumps(delta, separators=_COMPACT).encode()
    full = pair.full_json
    apply = _cpu_us(lambda: apply_delta(pair.before, json.loads(body)), rounds, loops)
    binary = delta_to_protobuf(delta)  # type: ignore[arg-type]
    apply_binary = _cpu_us(
        lambda: apply_delta(pair.before, delta_from_protobuf(binary)), rounds, loops
    )
    decode = _cpu_us(lambda: json.loads(full), rounds, loops)
    hashing = _cpu_us(lambda: canonical_hash(pair.after), rounds, loops)
    figure = f"device CPU, {pair.name}"
    return [
        Row(figure, "apply delta (hash checked) vs decode full JSON", apply, "µs", decode),
        Row(
            figure,
            "apply protobuf delta (hash checked) vs decode full JSON",
            apply_binary,
            "µs",
            decode,
        ),
        Row(figure, "canonical hash of the document vs decode full JSON", hashing, "µs", decode),
    ]


FIGURES: list[Callable[[Pair, int, int], list[Row]]] = [
    delta_bytes,
    delta_make_cpu,
    delta_apply_cpu,
]


def _print(rows: list[Row]) -> None:
    print("| figure | case | ours | baseline (full JSON) | ours / baseline |")
    print("|---|---|---:|---:|---:|")
    for row in rows:
        value = (
            f"{row.value:,.0f} {row.unit}" if row.unit == "B" else f"{row.value:,.1f} {row.unit}"
        )
        base = (
            ""
            if row.baseline is None
            else (
                f"{row.baseline:,.0f} {row.unit}"
                if row.unit == "B"
                else f"{row.baseline:,.1f} {row.unit}"
            )
        )
        print(f"| {row.figure} | {row.case} | {value} | {base} | {row.ratio} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.wire", description=__doc__)
    parser.add_argument("--rounds", type=int, default=7, help="rounds per CPU figure (best kept)")
    parser.add_argument("--loops", type=int, default=200, help="calls per round")
    args = parser.parse_args(argv)
    print(
        f"bench/wire: {platform.python_implementation()} {platform.python_version()}, "
        f"{platform.machine()}, {os.cpu_count()} CPUs; rounds {args.rounds} x loops {args.loops}"
    )
    rows = [
        row
        for pair in pairs()
        for figure in FIGURES
        for row in figure(pair, args.rounds, args.loops)
    ]
    _print(rows)
    return 0
