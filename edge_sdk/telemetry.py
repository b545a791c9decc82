"""Telemetry: events of PROTOCOL.md, queued, batched, and kept until the server's 202.

Each event is encoded to JSON once, when it is recorded, with a fresh uuid4 `event_id`; a
resend sends the same bytes, so the server stores it once and counts the rest as duplicates.
The queue is bounded (`max_events`): when full, the oldest event is dropped and counted. On a
device with a `state_dir` the unsent events are written (atomically) to `telemetry.jsonl`
when a flush fails or the device stops, and read back at start.

Answers of `POST /api/v1/telemetry` and what the queue does:
- 202: the batch is durable; it leaves the queue (`delivered`, `duplicates` counted).
- 400: the events it names are dropped (`rejected`), the rest is sent again at once.
- 413: the batch is halved and sent again (a single event refused: rejected).
- 401: the token is revoked; TelemetryRevoked is raised.
- 429: nothing is lost; `retry_after` says how long to wait.
- anything else (5xx, network): nothing is lost; the next flush sends the batch again.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import os
from collections import deque
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import msgspec

from edge_sdk.decision import Decision, FallbackKind, Route
from edge_sdk.storage import atomic_write, read_bytes, remove

__all__ = [
    "MAX_BATCH_BYTES",
    "MAX_BATCH_EVENTS",
    "PostResult",
    "Poster",
    "TelemetryQueue",
    "TelemetryRevoked",
    "build_event",
    "new_event_id",
    "refine_fields",
]

logger = logging.getLogger(__name__)

MAX_BATCH_EVENTS: Final = 1000  # PROTOCOL.md: at most 1,000 events per batch
MAX_BATCH_BYTES: Final = 1_000_000  # and 1 MiB; kept below it for the envelope
TELEMETRY_FILE: Final = "telemetry.jsonl"
_PREFIX: Final = b'{"events":['
_SUFFIX: Final = b"]}"

# (HTTP status or 0 when the request did not complete, response body, Retry-After header)
PostResult = tuple[int, bytes, str | None]
Poster = Callable[[bytes], Awaitable[PostResult]]


class TelemetryRevoked(Exception):
    """The server answered 401: the device token no longer works."""


MAX_LATENCY_MS: Final = 86_400_000.0  # the server's range for latencies (PROTOCOL.md)


def _unit(value: float) -> float | None:
    """A value the server accepts as 0..1: clamped, or None (omitted) when not finite."""
    if not math.isfinite(value):
        return None
    return 0.0 if value < 0.0 else 1.0 if value > 1.0 else float(value)


def _non_negative(value: float) -> float | None:
    if not math.isfinite(value):
        return None
    return max(0.0, float(value))


def build_event(
    *,
    device_id: str,
    policy_version: int,
    task: Any,
    readings: Any,
    decision: Decision,
    route: Route,
    fallback: FallbackKind,
    latency_ms: float,
    cache_hit: bool,
    ok: bool,
    deidentified: bool,
    ts: float,
    uploaded: bool | None = None,
    cloud_pressure: float | None = None,
    event_id: str | None = None,
    quality: float | None = None,
    refine_changed: bool | None = None,
    refine_edit_ratio: float | None = None,
    shadow_refine: bool = False,
) -> dict[str, Any]:
    """One PROTOCOL.md telemetry event, with values kept inside what the server accepts.

    `route` is where the task was meant to run (the decision's route); `fallback` says
    whether it ran on the other side instead. Out-of-range signals from the app are clamped
    (a confidence of 1.02 becomes 1.0) and non-finite optional ones are left out, so one odd
    reading never gets a whole batch refused. `uploaded` says whether any of the task's data
    left the device (PROTOCOL.md extensions: what privacy violations are judged by);
    None leaves it out, and the server judges from the route, fallback and cache hit.
    The decision's remaining inputs go too (PROTOCOL.md extensions, for backtests): the
    readings' `online` and `cloud_infer_ms`, and `cloud_pressure`, the θ offset in force
    (None leaves it out).
    The quality signals (PROTOCOL.md extensions) go when known: `quality` (the app's, 0-1),
    `refine_changed` with `refine_edit_ratio` (0 when nothing changed; left out when the
    ratio is unknown), and `shadow_refine: true` for a device answer the cloud also refined.
    `event_id` is a fresh uuid4 unless the caller made one (a shadow refine's event is
    recorded after its Outcome names the id).
    """
    event: dict[str, Any] = {
        "event_id": event_id or _uuid4(),
        "device_id": device_id,
        "ts": datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")[:-6] + "Z",
        "policy_version": policy_version,
        "task_type": task.task_type,
        "latency_budget": task.latency_budget,
        "privacy_tier": task.privacy_tier,
        "route": route,
        "decided_by": decision.decided_by,
        "fallback": fallback,
        "latency_ms": _non_negative(latency_ms) or 0.0,
        "cache_hit": cache_hit,
        "ok": ok,
        "deidentified": deidentified,
        "tokens": max(0, min(int(task.tokens), 2**31 - 1)),
        "upload_bytes": max(0, min(int(task.upload_bytes), 2**62)),
    }
    if uploaded is not None:
        event["uploaded"] = uploaded
    event["online"] = bool(readings.online)
    if cloud_pressure is not None and math.isfinite(cloud_pressure):
        event["cloud_pressure"] = max(-1.0, min(1.0, float(cloud_pressure)))
    cloud_infer_ms = _non_negative(readings.cloud_infer_ms)
    if cloud_infer_ms is not None:
        event["cloud_infer_ms"] = min(cloud_infer_ms, MAX_LATENCY_MS)
    for name, value in (
        ("score", None if decision.score is None else _unit(decision.score)),
        ("threshold", None if decision.threshold is None else _unit(decision.threshold)),
        ("intent_conf", _unit(task.intent_conf)),
        ("lm_conf", _unit(task.lm_conf)),
        ("rtt_ms", _non_negative(readings.rtt_ms)),
        ("bandwidth_kbps", _non_negative(readings.bandwidth_kbps)),
        ("device_load", _unit(readings.device_load)),
    ):
        if value is not None:
            event[name] = value
    if quality is not None:
        unit_quality = _unit(quality)
        if unit_quality is not None:
            event["quality"] = unit_quality
    if shadow_refine:
        event["shadow_refine"] = True
    event.update(refine_fields(refine_changed, refine_edit_ratio))
    return event


def refine_fields(changed: bool | None, edit_ratio: float | None) -> dict[str, Any]:
    """`refine_changed` and `refine_edit_ratio` as an event carries them: nothing when it is
    unknown whether the cloud changed the draft; a ratio of 0 when it did not; the ratio
    (clamped to 0..1) when it did and the app said how much."""
    if changed is None:
        return {}
    fields: dict[str, Any] = {"refine_changed": bool(changed)}
    if not changed:
        fields["refine_edit_ratio"] = 0.0
    elif edit_ratio is not None and not isinstance(edit_ratio, bool):
        ratio = _unit(edit_ratio)
        if ratio is not None:
            fields["refine_edit_ratio"] = ratio
    return fields


def new_event_id() -> str:
    """A fresh uuid4 for an event (what `build_event` makes when given none)."""
    return _uuid4()


def _uuid4() -> str:
    """str(uuid.uuid4()) at a third of the cost (telemetry makes one per task)."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122 variant
    text = raw.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


class TelemetryQueue:
    """Unsent events of one device, oldest first, bounded; counters say what became of them."""

    # What the queue sends and where it keeps it (FeedbackQueue sends feedback items instead).
    _prefix: bytes = _PREFIX
    _file_name: str = TELEMETRY_FILE
    _kind: str = "telemetry"

    def __init__(
        self,
        *,
        max_events: int = 20_000,
        batch_max: int = 500,
        state_dir: Path | None = None,
        poster: Poster | None = None,
        on_full: Callable[[], None] | None = None,
    ) -> None:
        self.max_events = max(1, max_events)
        self.batch_max = max(1, min(batch_max, MAX_BATCH_EVENTS))
        self._path = state_dir / self._file_name if state_dir is not None else None
        self.poster = poster
        self._on_full = on_full
        self._events: deque[tuple[int, bytes]] = deque()
        self._seq = itertools.count()
        self._lock = asyncio.Lock()
        self._dirty = False
        self._saved = False  # the file exists (written by save, not yet removed)
        self._limit = self.batch_max
        # What became of the events: a resent event is counted once, when its 202 comes.
        self.dropped = 0  # pushed out by newer events while the queue was full
        self.delivered = 0  # accepted by the server (202), new to it
        self.duplicates = 0  # acknowledged by the server as already stored
        self.rejected = 0  # refused by the server's validation (400) and let go
        self.skipped = 0  # not recordable: no policy version to report against
        self.batches = 0  # batches acknowledged with 202
        self.failures = 0  # flushes that ended with the batch kept (network, 5xx, 429)
        self.retry_after = 0.0  # seconds the server asked to wait (429), else 0

    @property
    def pending(self) -> int:
        """Events waiting for a 202."""
        return len(self._events)

    def counters(self) -> dict[str, int]:
        """The queue's counters, for logs and progress lines."""
        return {
            "pending": self.pending,
            "delivered": self.delivered,
            "duplicates": self.duplicates,
            "dropped": self.dropped,
            "rejected": self.rejected,
            "skipped": self.skipped,
        }

    def record(self, event: dict[str, Any]) -> None:
        """Queue one event (encoded now, so a resend is byte-identical)."""
        self._append(msgspec.json.encode(event))

    def event_ids(self) -> list[str]:
        """The ids of the pending events, oldest first (for tests and diagnostics)."""
        return [msgspec.json.decode(raw)["event_id"] for _, raw in self._events]

    def _append(self, raw: bytes) -> None:
        self._events.append((next(self._seq), raw))
        self._dirty = True
        if len(self._events) > self.max_events:
            self._events.popleft()
            self.dropped += 1
        if self._on_full is not None and len(self._events) == self.batch_max:
            self._on_full()

    async def flush(self) -> bool:
        """Send everything pending; True when all of it was acknowledged (or nothing pended).

        Raises TelemetryRevoked on a 401. One flush at a time: a second caller waits.
        """
        if self.poster is None:
            return not self._events
        async with self._lock:
            while self._events:
                batch = self._take()
                status, content, retry_after = await self.poster(
                    self._prefix + b",".join(raw for _, raw in batch) + _SUFFIX
                )
                if status == 202:
                    self._acknowledged(batch, content)
                elif status == 400:
                    self._refused(batch, content)
                elif status == 413 and len(batch) > 1:
                    self._limit = max(1, len(batch) // 2)
                elif status == 413:
                    self._drop_batch(batch, "too_large")
                elif status == 401:
                    raise TelemetryRevoked(f"{self._kind} refused the device token (401)")
                else:
                    self.failures += 1
                    self.retry_after = _seconds(retry_after) if status == 429 else 0.0
                    return False
            self._limit = self.batch_max
            self.retry_after = 0.0
            return True

    def _take(self) -> list[tuple[int, bytes]]:
        batch: list[tuple[int, bytes]] = []
        size = len(self._prefix) + len(_SUFFIX)
        for item in self._events:
            size += len(item[1]) + 1
            if batch and (len(batch) >= self._limit or size > MAX_BATCH_BYTES):
                break
            batch.append(item)
        return batch

    def _acknowledged(self, batch: list[tuple[int, bytes]], content: bytes) -> None:
        try:
            answer = msgspec.json.decode(content)
            accepted, duplicates = int(answer["accepted"]), int(answer["duplicates"])
        except (msgspec.DecodeError, KeyError, TypeError, ValueError):
            accepted, duplicates = len(batch), 0
        self.delivered += accepted
        self.duplicates += duplicates
        self.batches += 1
        last = batch[-1][0]
        # Events pushed out while the batch was in flight are gone already: forget by sequence.
        while self._events and self._events[0][0] <= last:
            self._events.popleft()
        self._dirty = True

    def _named(self, detail: Any) -> int | None:
        """The index in the batch of the event a 400's detail names, if any."""
        index = detail.get("event") if isinstance(detail, dict) else None
        return index if isinstance(index, int) and not isinstance(index, bool) else None

    def _refused(self, batch: list[tuple[int, bytes]], content: bytes) -> None:
        named: set[int] = set()
        try:
            details = msgspec.json.decode(content)["error"]["details"]
            for detail in details:
                index = self._named(detail)
                if index is not None and 0 <= index < len(batch):
                    named.add(index)
        except (msgspec.DecodeError, KeyError, TypeError):
            pass
        if not named:  # the batch as a whole was refused: nothing in it can ever pass
            self._drop_batch(batch, "bad_batch")
            return
        logger.warning(
            "%s.events_rejected count=%d answer=%s",
            self._kind,
            len(named),
            content[:500].decode(errors="replace"),
        )
        self._drop({batch[index][0] for index in named})

    def _drop_batch(self, batch: list[tuple[int, bytes]], reason: str) -> None:
        logger.warning("%s.batch_rejected reason=%s events=%d", self._kind, reason, len(batch))
        self._drop({seq for seq, _ in batch})

    def _drop(self, seqs: set[int]) -> None:
        before = len(self._events)
        self._events = deque(item for item in self._events if item[0] not in seqs)
        self.rejected += before - len(self._events)
        self._dirty = True

    # --- disk ------------------------------------------------------------------------------

    def load(self) -> int:
        """Queue the events a previous run left unsent; how many were read."""
        if self._path is None:
            return 0
        raw = read_bytes(self._path)
        if not raw:
            return 0
        lines = [line for line in raw.split(b"\n") if line.strip()]
        for line in lines:
            self._append(line)
        self._dirty = False
        self._saved = True
        return len(lines)

    def save(self) -> None:
        """Write the unsent events to disk (or remove the file when none are left)."""
        snapshot = self._snapshot()
        if snapshot is not None:
            self._write(snapshot)

    async def save_async(self) -> None:
        """`save()` with the disk write on a worker thread (the event loop does not wait)."""
        snapshot = self._snapshot()
        if snapshot is not None:
            await asyncio.to_thread(self._write, snapshot)

    async def refresh_saved(self) -> None:
        """`save_async()`, but only when a file of an earlier save exists (it would be stale)."""
        if self._saved:
            await self.save_async()

    def _snapshot(self) -> bytes | None:
        """The file's new content (b"" to remove it), or None when nothing changed."""
        if self._path is None or not self._dirty:
            return None
        self._dirty = False
        return b"\n".join(raw for _, raw in self._events)

    def _write(self, content: bytes) -> None:
        assert self._path is not None
        try:
            if content:
                atomic_write(self._path, content)
                self._saved = True
            else:
                remove(self._path)
                self._saved = False
        except OSError as error:
            self._dirty = True
            logger.warning("%s.save_failed path=%s error=%s", self._kind, self._path, error)


def _seconds(header: str | None) -> float:
    try:
        return max(1.0, float(header)) if header else 1.0
    except ValueError:
        return 1.0
