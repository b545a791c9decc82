"""The telemetry event of PROTOCOL.md: decoding, validation and the landed (stored) form.

The struct `TelemetryEvent` is the one declaration of an event (types, enums, ranges); its JSON
Schema is the API's (telemetry.structs). Validation is in two passes, both by that struct:
- fast: msgspec decodes the whole body into typed structs in C; then one Python loop checks
  what depends on several fields or on the request (the quality signals, the device, the
  clock, the fleet's versions and dimension values). A batch of 1,000 events takes ~2 ms.
- complete: only when the fast pass refuses the body, the body is parsed again with the
  standard library and each event is checked against the struct field by field, so the 400
  names every bad event and field, not just the first msgspec met.
Unknown fields are ignored: the protocol grows by new optional fields.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Any, Final, Literal, Protocol

import msgspec

from controlplane import json_guard
from controlplane.exceptions import ValidationFailed
from edge_sdk.wire import codec

from ..structs import BatchBody
from ..structs import field_problems as struct_field_problems

logger = logging.getLogger(__name__)

MAX_EVENTS: Final = codec.MAX_EVENTS  # the protocol's most events per batch
FUTURE_TOLERANCE: Final = timedelta(minutes=5)
MAX_INT32: Final = 2**31 - 1
MAX_ERRORS: Final = 200  # a 400 names at most this many problems
# Physical ranges (docs/PROTOCOL.md, extensions): generous for any real device, but finite, so
# that no sum or sketch of stored figures can overflow (1e308 twice is infinity).
MAX_LATENCY_MS: Final = 86_400_000.0  # a day: a background task queued while offline
MAX_RTT_MS: Final = 600_000.0  # ten minutes
MAX_BANDWIDTH_KBPS: Final = 100_000_000.0  # 100 Gbit/s
MAX_TOKENS: Final = 10_000_000
MAX_UPLOAD_BYTES: Final = 2**40  # 1 TiB

ROUTES: Final = ("device", "cloud", "draft_refine")
DECIDED_BY: Final = ("policy", "privacy", "offline", "threshold", "latency")
FALLBACK_KINDS: Final = ("none", "cloud_to_device", "device_to_cloud")

Route = Literal["device", "cloud", "draft_refine"]
DecidedBy = Literal["policy", "privacy", "offline", "threshold", "latency"]
FallbackKind = Literal["none", "cloud_to_device", "device_to_cloud"]
Unit = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
LatencyMs = Annotated[float, msgspec.Meta(ge=0.0, le=MAX_LATENCY_MS)]
RttMs = Annotated[float, msgspec.Meta(ge=0.0, le=MAX_RTT_MS)]
BandwidthKbps = Annotated[float, msgspec.Meta(ge=0.0, le=MAX_BANDWIDTH_KBPS)]
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=32)]


class TelemetryEvent(msgspec.Struct, kw_only=True):
    """One routing decision as a device reports it (PROTOCOL.md), fields in the landed order."""

    event_id: uuid.UUID
    device_id: Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
    ts: Annotated[datetime, msgspec.Meta(tz=True, description="RFC 3339 with a time zone")]
    policy_version: Annotated[int, msgspec.Meta(ge=1, le=MAX_INT32)]
    task_type: Name
    latency_budget: Name
    privacy_tier: Name
    route: Route
    decided_by: DecidedBy
    fallback: FallbackKind
    latency_ms: LatencyMs
    cache_hit: bool
    ok: bool
    deidentified: bool = False
    score: Unit | None = None
    threshold: Unit | None = None
    tokens: Annotated[int, msgspec.Meta(ge=0, le=MAX_TOKENS)] | None = None
    intent_conf: Unit | None = None
    lm_conf: Unit | None = None
    upload_bytes: Annotated[int, msgspec.Meta(ge=0, le=MAX_UPLOAD_BYTES)] | None = None
    rtt_ms: RttMs | None = None
    bandwidth_kbps: BandwidthKbps | None = None
    device_load: Unit | None = None
    # PROTOCOL.md extensions: whether any of the task's data left the device; None (omitted by
    # older devices) is judged from route, fallback and cache hit (`rollup.left_device`).
    uploaded: bool | None = None
    # PROTOCOL.md extensions, the decision's remaining inputs (for backtests, docs/lab.md): the
    # device's online reading, its cloud-inference estimate and the θ offset in force.
    online: bool | None = None
    cloud_infer_ms: LatencyMs | None = None
    cloud_pressure: Annotated[float, msgspec.Meta(ge=-1.0, le=1.0)] | None = None
    # PROTOCOL.md extensions, the quality signals: whether the cloud changed the device's draft
    # (route draft_refine, or a device answer refined in the background: `shadow_refine`), how
    # much, and the app's own quality reading.
    refine_changed: bool | None = None
    refine_edit_ratio: Unit | None = None
    quality: Unit | None = None
    shadow_refine: bool | None = None


class TelemetryBatch(msgspec.Struct):
    """The body of `POST /api/v1/telemetry`."""

    # 1 to MAX_EVENTS: refused otherwise by the complete check (413 over the most).
    events: Annotated[list[TelemetryEvent], msgspec.Meta(min_length=1, max_length=MAX_EVENTS)]


_ENCODER: Final = msgspec.json.Encoder()


# The fields whose rules depend on one another (`_signal_problems`).
SIGNAL_FIELDS: Final = (
    "route",
    "cache_hit",
    "refine_changed",
    "refine_edit_ratio",
    "shadow_refine",
)


def _signal_problems(
    route: str,
    cache_hit: bool,
    refine_changed: bool | None,
    refine_edit_ratio: float | None,
    shadow_refine: bool | None,
) -> list[tuple[str, str]]:
    """(field, message) for quality signals the event cannot carry (PROTOCOL.md extensions).

    A shadow refine is a device answer the cloud also refined in the background, so only a
    device-route event that was not a cache hit has one; `refine_changed` says what a cloud
    refine did to the device's draft, so only a draft-refine event or a shadow refine carries
    it; `refine_edit_ratio` says how much it changed, so it needs `refine_changed` and is 0
    when nothing changed.
    """
    problems: list[tuple[str, str]] = []
    if shadow_refine:
        if route != "device":
            problems.append(("shadow_refine", "Only a device-route event has a shadow refine."))
        elif cache_hit:
            problems.append(("shadow_refine", "A cache hit is never refined in the background."))
    if (
        refine_changed is not None
        and route != "draft_refine"
        and not (route == "device" and shadow_refine)
    ):
        problems.append(
            (
                "refine_changed",
                "Only a draft_refine event, or a device event with shadow_refine true, says "
                "whether the cloud changed the draft.",
            )
        )
    if refine_edit_ratio is not None:
        if refine_changed is None:
            problems.append(("refine_edit_ratio", "Only sent with refine_changed."))
        elif not refine_changed and refine_edit_ratio != 0:
            problems.append(
                (
                    "refine_edit_ratio",
                    "Must be 0 when refine_changed is false (the draft was kept).",
                )
            )
    return problems


# --- what the request brings: the device, the clock, the fleet's versions ---------------------


@dataclass(frozen=True, slots=True)
class VersionDimensions:
    """The dimension values a published version's table has."""

    task_types: frozenset[str]
    latency_budgets: frozenset[str]
    privacy_tiers: frozenset[str]

    @classmethod
    def of(cls, dimensions: Mapping[str, Sequence[str]]) -> VersionDimensions:
        """From a version's `dimensions` document."""
        return cls(
            task_types=frozenset(dimensions.get("task_type", ())),
            latency_budgets=frozenset(dimensions.get("latency_budget", ())),
            privacy_tiers=frozenset(dimensions.get("privacy_tier", ())),
        )


class VersionLookup(Protocol):
    """A fleet's published versions by number (telemetry.ingest.selectors.VersionCatalog)."""

    def get(self, number: int, /) -> VersionDimensions | None:
        """The version's dimensions, or None when there is no such published version."""


@dataclass(frozen=True, slots=True)
class BatchContext:
    """Who sends the batch and what its events may say."""

    device_id: str
    now: datetime
    oldest: datetime  # the retention window's start
    versions: VersionLookup


def _context_problems(
    context: BatchContext,
    device_id: str,
    ts: datetime,
    version: int,
    task_type: str,
    latency_budget: str,
    privacy_tier: str,
) -> list[tuple[str, str]]:
    """(field, message) for what this event says that the request does not allow."""
    problems: list[tuple[str, str]] = []
    if device_id != context.device_id:
        problems.append(
            (
                "device_id",
                f"The event claims device {device_id!r}; this token belongs to "
                f"{context.device_id!r}.",
            )
        )
    if ts > context.now + FUTURE_TOLERANCE:
        problems.append(("ts", "More than 5 minutes in the future."))
    elif ts < context.oldest:
        problems.append(
            ("ts", f"Older than the retention window (since {context.oldest:%Y-%m-%dT%H:%M:%SZ}).")
        )
    dims = context.versions.get(version)
    if dims is None:
        problems.append(("policy_version", f"The fleet has no published version {version}."))
        return problems
    if task_type not in dims.task_types:
        problems.append(("task_type", f"Unknown task type {task_type!r} in v{version}."))
    if latency_budget not in dims.latency_budgets:
        problems.append(
            ("latency_budget", f"Unknown latency budget {latency_budget!r} in v{version}.")
        )
    if privacy_tier not in dims.privacy_tiers:
        problems.append(("privacy_tier", f"Unknown privacy tier {privacy_tier!r} in v{version}."))
    return problems


def _refuse(details: list[dict[str, Any]]) -> ValidationFailed:
    bad_events = len({d["event"] for d in details if "event" in d})
    message = (
        f"{bad_events} event(s) are invalid; nothing of this batch was stored."
        if bad_events
        else "The batch is invalid; nothing of it was stored."
    )
    return ValidationFailed(message, details=details[:MAX_ERRORS])


class BatchTooLarge(Exception):
    """More than MAX_EVENTS events (answered 413)."""


_EVENT_PATH: Final = re.compile(r"\Aevents\[(\d+)\](?:\.(.*))?\Z", re.DOTALL)


def _guard_problem(problem: json_guard.JsonProblem) -> dict[str, Any]:
    """A json_guard refusal as a telemetry detail: `events[3].x` names event 3, field `x`."""
    match = _EVENT_PATH.match(problem.field)
    if match is None:
        return {"field": problem.field or "events", "message": problem.message}
    return {"event": int(match.group(1)), "field": match.group(2) or "", "message": problem.message}


_BODY: Final = BatchBody(
    TelemetryBatch, too_large=BatchTooLarge, refuse=_refuse, guard_detail=_guard_problem
)


def decode_batch(
    body: bytes, context: BatchContext, read: list[Any] | None = None
) -> list[TelemetryEvent]:
    """The batch's events, all valid; raises ValidationFailed naming each bad event and field.

    `read`: the events of `body` as already read (a column-wise protobuf batch: objects whose
    attributes are the fields, `codec.batch_events_from_protobuf`), checked by the struct in
    place of decoding `body`; when the struct refuses them, `body` is read as any JSON body,
    so that the 400 is the JSON path's, naming each bad event and field.
    """
    batch = _converted(read) if read is not None else None
    if batch is None:
        batch = _BODY.decode(body, lambda index, raw: _item_problems(index, raw, context))
    events = batch.events  # 1 to MAX_EVENTS (the struct says so)
    details: list[dict[str, Any]] = []
    device_id = context.device_id
    newest = context.now + FUTURE_TOLERANCE
    oldest = context.oldest
    versions = context.versions
    for index, event in enumerate(events):
        if (
            event.refine_changed is not None
            or event.refine_edit_ratio is not None
            or event.shadow_refine
        ):
            details.extend(
                {"event": index, "field": field, "message": message}
                for field, message in _signal_problems(
                    event.route,
                    event.cache_hit,
                    event.refine_changed,
                    event.refine_edit_ratio,
                    event.shadow_refine,
                )
            )
        dims = versions.get(event.policy_version)
        if (
            event.device_id == device_id
            and oldest <= event.ts <= newest
            and dims is not None
            and event.task_type in dims.task_types
            and event.latency_budget in dims.latency_budgets
            and event.privacy_tier in dims.privacy_tiers
        ):
            continue
        for field, message in _context_problems(
            context,
            event.device_id,
            event.ts,
            event.policy_version,
            event.task_type,
            event.latency_budget,
            event.privacy_tier,
        ):
            details.append({"event": index, "field": field, "message": message})
    if details:
        raise _refuse(details)
    return events


def _converted(read: list[Any]) -> TelemetryBatch | None:
    """`read` checked by the struct as msgspec checks a JSON body (in C); None if it refuses."""
    try:
        return msgspec.convert({"events": read}, TelemetryBatch, from_attributes=True)
    except msgspec.ValidationError:
        return None


def _item_problems(index: int, raw: Any, context: BatchContext) -> list[dict[str, Any]]:
    """What the struct and the batch's context refuse of one event, as the standard library
    read it."""
    if not isinstance(raw, dict):
        return [{"event": index, "field": "", "message": "Must be an object."}]
    field_problems = struct_field_problems(TelemetryEvent, raw)
    context_fields = (
        "device_id",
        "ts",
        "policy_version",
        "task_type",
        "latency_budget",
        "privacy_tier",
    )
    if not any(name in field_problems for name in context_fields):
        for field, message in _context_problems(
            context,
            raw["device_id"],
            datetime.fromisoformat(raw["ts"]),
            raw["policy_version"],
            raw["task_type"],
            raw["latency_budget"],
            raw["privacy_tier"],
        ):
            field_problems.setdefault(field, message)
    if not any(name in field_problems for name in SIGNAL_FIELDS):
        for field, message in _signal_problems(
            raw["route"],
            raw["cache_hit"],
            raw.get("refine_changed"),
            raw.get("refine_edit_ratio"),
            raw.get("shadow_refine"),
        ):
            field_problems.setdefault(field, message)
    return [
        {"event": index, "field": field, "message": message}
        for field, message in field_problems.items()
    ]


# --- the landed form ---------------------------------------------------------------------------


def encode_landed(events: Sequence[TelemetryEvent], body: bytes | None = None) -> bytes:
    """The payload of a landed batch: a batch body in the JSON of the protocol.

    When every event of the request is landed, the request's own (validated) body is the
    payload, at no cost; otherwise the landed events are encoded again.
    """
    if body is not None:
        return body
    return _ENCODER.encode(TelemetryBatch(events=list(events)))


_EVENT_DECODER: Final = msgspec.json.Decoder(TelemetryEvent)


def decode_landed(payload: bytes) -> list[TelemetryEvent]:
    """The events of a landed batch's payload (validated when they were landed): the batch's
    JSON text (it starts with `{`), or a column-wise protobuf batch landed as it came (it
    starts with its field tag, never `{`: `columns.accepted`).

    A batch landed by an older version, before the numbers had physical ranges, may hold an
    event out of them (`latency_ms: 1e308`): that event is left out (and logged), the others
    are kept, so one such batch neither poisons the rollups nor stops processing.
    """
    if not payload.startswith(b"{"):
        columns = codec.batch_columns_from_protobuf(payload)
        assert columns is not None  # (only a column-wise batch is landed as protobuf)
        read, _ = columns.events()
        batch = _converted(read)
        if batch is not None:
            return batch.events
        payload = columns.json_events()[0]  # (landed by a version with other ranges)
    try:
        return _BODY.decoder.decode(payload).events
    except msgspec.ValidationError:
        pass
    kept: list[TelemetryEvent] = []
    raw_events = msgspec.json.decode(payload)["events"]
    for raw in raw_events:
        try:
            kept.append(_EVENT_DECODER.decode(_ENCODER.encode(raw)))
        except msgspec.ValidationError:
            continue
    logger.warning(
        "telemetry.landed_events_dropped count=%d reason=out_of_range", len(raw_events) - len(kept)
    )
    return kept
