"""JSON ↔ protobuf for the policy document, the device frames and the telemetry batch.

The JSON value is the meaning; protobuf is a more compact spelling of it. Decoding a protobuf
message gives the JSON value (dicts, lists, strings, numbers) that the JSON path would have
parsed, and the caller validates that as it validates JSON: the server's limits and refusals
(naming `events[3].route`) and the SDK's document check are the JSON path's, not a copy.

- Encoding (`*_to_protobuf`) takes a JSON value; a part the schema does not describe (a field
  added to the protocol after this schema, a value of an unexpected type) travels as JSON text
  in the message's `extra_json` (documents) or in the frame's `json` kind, so nothing is lost.
  A telemetry event the schema cannot hold raises `NotRepresentable`: the sender uses JSON.
- Decoding (`*_from_protobuf`) raises `WireError` for bytes that are not the message (truncated,
  not protobuf, invalid UTF-8 in a string, nested past protobuf's recursion limit). Values
  the JSON rules would refuse are passed on as they are (an unknown enum number becomes a
  string the JSON rules refuse, naming the field). Unknown fields are ignored, as in JSON.

The mapping is documented in docs/PROTOCOL.md ("Binary frames and compression").
"""

from __future__ import annotations

import json
import uuid
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import compress, repeat
from math import isfinite
from typing import Any, Final

import msgspec
from google.protobuf.message import DecodeError, Message

from edge_sdk.wire import edge_routing_pb2 as pb

__all__ = [
    "EVENT_ENUMS",
    "MAX_EVENTS",
    "BatchColumns",
    "NotRepresentable",
    "TooManyEvents",
    "WireError",
    "batch_columns_from_protobuf",
    "batch_events_from_protobuf",
    "batch_from_protobuf",
    "batch_json_from_protobuf",
    "batch_to_protobuf",
    "delta_from_protobuf",
    "delta_to_protobuf",
    "document_from_protobuf",
    "document_to_protobuf",
    "frame_from_protobuf",
    "frame_to_protobuf",
]


class WireError(ValueError):
    """Bytes that are not the protobuf message they should be."""


class TooManyEvents(ValueError):
    """A column-wise batch of more events than a batch may hold (read no further)."""


# The most events of a telemetry batch (docs/PROTOCOL.md: 413 over it).
MAX_EVENTS: Final = 1000


class NotRepresentable(ValueError):
    """A JSON value this schema cannot carry (send it as JSON)."""


_COMPACT: Final = (",", ":")
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def _json_text(value: Any) -> str:
    return json.dumps(value, separators=_COMPACT, ensure_ascii=False, allow_nan=False)


def _parse(message: Message, raw: bytes) -> None:
    try:
        message.ParseFromString(raw)
    except (DecodeError, RecursionError, ValueError) as error:
        raise WireError(f"not a valid {message.DESCRIPTOR.name}: {error}") from None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


# Each scalar field a JSON object may hold, by the protobuf type that carries it.
_FITS: Final = {
    "string": lambda v: isinstance(v, str),
    "int": lambda v: _is_int(v) and -(2**63) <= v < 2**63,
    "double": _is_number,
    "bool": lambda v: isinstance(v, bool),
}


def _kind(field: Any) -> str:
    t = field.type
    if t == field.TYPE_STRING:
        return "string"
    if t in (field.TYPE_INT64, field.TYPE_INT32):
        return "int"
    if t == field.TYPE_DOUBLE:
        return "double"
    if t == field.TYPE_BOOL:
        return "bool"
    return "message"


def _fill_flat(message: Message, value: Mapping[str, Any]) -> bool:
    """Set `message`'s scalar fields from a JSON object; False (nothing relied on) when the
    object holds a key or a type the message cannot carry."""
    fields = message.DESCRIPTOR.fields_by_name
    for key, item in value.items():
        field = fields.get(key)
        if field is None or key == "extra_json":
            return False
        kind = _kind(field)
        if kind == "message" or not _FITS[kind](item):
            return False
        setattr(message, key, item)
    return True


def _flat_of(message: Message) -> dict[str, Any]:
    return {field.name: value for field, value in message.ListFields()}


# --- the policy document ------------------------------------------------------------------------

_NESTED: Final = ("weights", "upload", "network", "load")
_DIMENSIONS: Final = ("task_type", "latency_budget", "privacy_tier")


def _cell_to_protobuf(cell: Mapping[str, Any], out: pb.Cell) -> None:
    extra: dict[str, Any] = {}
    fields = out.DESCRIPTOR.fields_by_name
    for key, value in cell.items():
        field = fields.get(key)
        if field is None or key == "extra_json":
            extra[key] = value
        elif key in _NESTED:
            if not isinstance(value, Mapping) or not _fill_flat(getattr(out, key), value):
                out.ClearField(key)
                extra[key] = value
            elif not value:
                getattr(out, key).SetInParent()
        elif _FITS[_kind(field)](value):
            setattr(out, key, value)
        else:
            extra[key] = value
    if extra:
        out.extra_json = _json_text(extra)


def _cell_from_protobuf(cell: pb.Cell) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field, value in cell.ListFields():
        name = field.name
        if name == "extra_json":
            continue
        out[name] = _flat_of(value) if name in _NESTED else value
    if cell.extra_json:
        out.update(_extra(cell.extra_json))
    return out


def _extra(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise WireError(f"extra_json is not JSON: {error}") from None
    if not isinstance(value, dict):
        raise WireError("extra_json is not a JSON object")
    return value


def document_to_protobuf(document: Mapping[str, Any]) -> bytes:
    """A policy document (PROTOCOL.md's JSON, as a dict) as a `PolicyDocument`."""
    out = pb.PolicyDocument()
    extra: dict[str, Any] = {}
    for key, value in document.items():
        if key in ("fleet", "etag") and isinstance(value, str):
            setattr(out, key, value)
        elif key == "version" and (value is None or _FITS["int"](value)):
            if value is not None:
                out.version = value
        elif key == "published_at" and (value is None or isinstance(value, str)):
            if value is not None:
                out.published_at = value
        elif key == "dimensions" and _dimensions_fit(value):
            dims = out.dimensions
            dims.SetInParent()
            others = {k: v for k, v in value.items() if k not in _DIMENSIONS}
            for name in _DIMENSIONS:
                if name in value:
                    getattr(dims, name).extend(value[name])
            # A dimension left out (not an empty list) must stay left out.
            missing = [name for name in _DIMENSIONS if name not in value]
            if others or missing:
                others["__missing__"] = missing
                dims.extra_json = _json_text(others)
        elif key == "cells" and isinstance(value, list) and all(isinstance(c, dict) for c in value):
            for cell in value:
                _cell_to_protobuf(cell, out.cells.add())
        else:
            extra[key] = value
    # Keys that were absent in JSON stay absent: say which of the always-set ones were.
    absent = [k for k in ("fleet", "etag", "version", "published_at") if k not in document]
    if "dimensions" not in document:
        absent.append("dimensions")
    if "cells" not in document:
        absent.append("cells")
    if absent:
        extra["__absent__"] = absent
    if extra:
        out.extra_json = _json_text(extra)
    return out.SerializeToString()


def _dimensions_fit(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(value.get(name, []), list)
        and all(isinstance(v, str) for v in value.get(name, []))
        for name in _DIMENSIONS
    )


def document_from_protobuf(raw: bytes) -> dict[str, Any]:
    """The JSON document a `PolicyDocument` stands for (to be checked like any document)."""
    message = pb.PolicyDocument()
    _parse(message, raw)
    return _document_value(message)


def _document_value(message: pb.PolicyDocument) -> dict[str, Any]:
    dims: dict[str, Any] = {name: list(getattr(message.dimensions, name)) for name in _DIMENSIONS}
    if message.dimensions.extra_json:
        others = _extra(message.dimensions.extra_json)
        for name in others.pop("__missing__", ()):
            dims.pop(name, None)
        dims.update(others)
    document: dict[str, Any] = {
        "fleet": message.fleet,
        "version": message.version if message.HasField("version") else None,
        "etag": message.etag,
        "published_at": message.published_at if message.HasField("published_at") else None,
        "dimensions": dims,
        "cells": [_cell_from_protobuf(cell) for cell in message.cells],
    }
    if message.extra_json:
        extra = _extra(message.extra_json)
        for key in extra.pop("__absent__", ()):
            if isinstance(key, str):
                document.pop(key, None)
        document.update(extra)
    return document


# --- the policy delta ---------------------------------------------------------------------------

_DELTA_KEYS: Final = frozenset({"fleet", "base", "version", "hash", "patch", "order"})
_PATCH_TYPED_TEXT: Final = {"etag": "patch_etag", "published_at": "patch_published_at"}


def delta_to_protobuf(delta: Mapping[str, Any]) -> bytes:
    """A policy delta (docs/PROTOCOL.md, "Policy deltas", as a dict) as a `PolicyDelta`; one
    these fields cannot spell goes whole as its JSON text (`PolicyDelta.json`)."""
    out = pb.PolicyDelta()
    if not _delta_fits(out, delta):
        out = pb.PolicyDelta(json=_json_text(dict(delta)))
    return out.SerializeToString()


def _delta_fits(out: pb.PolicyDelta, delta: Mapping[str, Any]) -> bool:
    patch, order = delta.get("patch"), delta.get("order")
    if (
        not {"fleet", "base", "version", "hash", "patch"} <= delta.keys() <= _DELTA_KEYS
        or not isinstance(delta["fleet"], str)
        or not isinstance(delta["hash"], str)
        or not all(v is None or _FITS["int"](v) for v in (delta["base"], delta["version"]))
        or not isinstance(patch, Mapping)
        or not (order is None or isinstance(order, list))
    ):
        return False
    out.fleet, out.hash = delta["fleet"], delta["hash"]
    for key in ("base", "version"):
        if delta[key] is not None:
            setattr(out, key, delta[key])
    if "order" in delta:
        if order is None or not all(isinstance(label, str) for label in order):
            return False
        out.order.extend(order)
        out.has_order = True
    extra: dict[str, Any] = {}
    for key, value in patch.items():
        if key == "version" and _FITS["int"](value):
            out.patch_version = value
        elif key in _PATCH_TYPED_TEXT and isinstance(value, str):
            setattr(out, _PATCH_TYPED_TEXT[key], value)
        elif key == "cells" and isinstance(value, Mapping) and value:
            if not _cells_patch(out, value):
                return False
        else:
            extra[key] = value
    if extra:
        out.patch_extra_json = _json_text(extra)
    return True


def _cells_patch(out: pb.PolicyDelta, cells: Mapping[str, Any]) -> bool:
    for key, cell in cells.items():
        if not isinstance(key, str) or not (cell is None or isinstance(cell, Mapping)):
            return False
        entry = out.cells.add(key=key)
        if cell is None:
            entry.removed = True
        else:
            entry.cell.SetInParent()
            _cell_to_protobuf(cell, entry.cell)
    return True


def delta_from_protobuf(raw: bytes) -> dict[str, Any]:
    """The delta a `PolicyDelta` stands for (WireError: not one)."""
    message = pb.PolicyDelta()
    _parse(message, raw)
    return _delta_value(message)


def _delta_value(message: pb.PolicyDelta) -> dict[str, Any]:
    if message.json:
        return _extra(message.json)
    patch: dict[str, Any] = {}
    if message.HasField("patch_version"):
        patch["version"] = message.patch_version
    for key, name in _PATCH_TYPED_TEXT.items():
        if message.HasField(name):
            patch[key] = getattr(message, name)
    if message.cells:
        patch["cells"] = {
            entry.key: None if entry.removed else _cell_from_protobuf(entry.cell)
            for entry in message.cells
        }
    if message.patch_extra_json:
        patch.update(_extra(message.patch_extra_json))
    delta: dict[str, Any] = {
        "fleet": message.fleet,
        "base": message.base if message.HasField("base") else None,
        "version": message.version if message.HasField("version") else None,
        "hash": message.hash,
        "patch": patch,
    }
    if message.has_order:
        delta["order"] = list(message.order)
    return delta


# --- the telemetry batch ------------------------------------------------------------------------

_ROUTES: Final = ("", "device", "cloud", "draft_refine")
_DECIDED_BY: Final = ("", "policy", "privacy", "offline", "threshold", "latency")
_FALLBACKS: Final = ("", "none", "cloud_to_device", "device_to_cloud")
_ENUMS: Final = {"route": _ROUTES, "decided_by": _DECIDED_BY, "fallback": _FALLBACKS}
# Each enum field of an event: its texts by number (0, "": missing).
EVENT_ENUMS: Final = _ENUMS
_ENUM_NUMBERS: Final = {
    name: {text: number for number, text in enumerate(values) if text}
    for name, values in _ENUMS.items()
}
# A descriptor's name by the descriptor (a dict lookup is cheaper than its `name`).
_EVENT_NAMES: Final = {field: field.name for field in pb.TelemetryEvent.DESCRIPTOR.fields}
_DOUBLES: Final = frozenset(
    field.name for field in pb.TelemetryEvent.DESCRIPTOR.fields if field.type == field.TYPE_DOUBLE
)
# The plain fields of an event, each with the check of the JSON values its type carries.
_EVENT_KINDS: Final = {
    field.name: _FITS[_kind(field)]
    for field in pb.TelemetryEvent.DESCRIPTOR.fields
    if field.name not in ("event_id", "ts_us", *_ENUMS)
}


def _event_fields(event: Mapping[str, Any]) -> dict[str, Any]:
    """The `TelemetryEvent` fields of a JSON event (NotRepresentable when one has no form)."""
    fields: dict[str, Any] = {}
    for key, value in event.items():
        if value is None:
            continue  # null: as absent (every nullable field of the event defaults to null)
        if key == "event_id":
            try:
                fields[key] = uuid.UUID(value).bytes
            except (TypeError, ValueError, AttributeError):
                raise NotRepresentable(f"event_id {value!r} is not a UUID") from None
        elif key == "ts":
            fields["ts_us"] = _micros(value)
        elif key in _ENUM_NUMBERS:
            number = _ENUM_NUMBERS[key].get(value) if isinstance(value, str) else None
            if number is None:
                raise NotRepresentable(f"{key} {value!r} has no protobuf value")
            fields[key] = number
        else:
            fits = _EVENT_KINDS.get(key)
            if fits is None or not fits(value):
                raise NotRepresentable(f"field {key!r} = {value!r} has no protobuf form")
            fields[key] = value
    return fields


def _micros(value: Any) -> int:
    try:
        when = datetime.fromisoformat(value)
    except (TypeError, ValueError):
        raise NotRepresentable(f"ts {value!r} is not RFC 3339") from None
    if when.tzinfo is None:
        raise NotRepresentable(f"ts {value!r} has no time zone")
    delta = when - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def batch_to_protobuf(batch: Mapping[str, Any], *, columns: bool = True) -> bytes:
    """A telemetry batch (`{"events": [...]}`) as a `TelemetryBatch`, column by column
    (`TelemetryColumns`; `columns=False`: row by row, as `TelemetryEvent`s); NotRepresentable
    when an event holds what the schema cannot (a field added later): send that batch as JSON."""
    events = batch.get("events")
    if not isinstance(events, list) or set(batch) != {"events"}:
        raise NotRepresentable('a batch is {"events": [...]}')
    if not all(isinstance(event, Mapping) for event in events):
        raise NotRepresentable("an event is an object")
    out = pb.TelemetryBatch()
    if not columns:
        add = out.events.add
        for event in events:
            add(**_event_fields(event))
        return out.SerializeToString()
    unknown = set().union(*events) - _COLUMN_KEYS
    if unknown:
        raise NotRepresentable(f"fields {sorted(unknown)} have no protobuf form")
    table = out.columns
    table.count = len(events)
    for key, name, number in _COLUMNS:
        values = [event.get(key) for event in events]
        if None in values:
            values = [value for value in values if value is not None]
            if not values:
                continue  # absent from every event: an empty column, no presence entry
            table.presence.add(field=number, events=_bitmap([event.get(key) for event in events]))
        if key == "event_id":
            table.event_id = b"".join(_uuid_bytes(value) for value in values)
        else:
            getattr(table, name).extend(_column_values(key, values))
    return out.SerializeToString()


def _bitmap(values: list[Any]) -> bytes:
    """Which values are not None, bit i (least significant first) for value i."""
    bits = "".join("0" if value is None else "1" for value in reversed(values))
    return int(bits, 2).to_bytes((len(values) + 7) // 8, "little")


def _uuid_bytes(value: Any) -> bytes:
    try:
        return uuid.UUID(value).bytes
    except (TypeError, ValueError, AttributeError):
        raise NotRepresentable(f"event_id {value!r} is not a UUID") from None


def _column_values(key: str, values: list[Any]) -> list[Any]:
    """One column's values as its repeated field holds them (NotRepresentable: one has no
    protobuf form)."""
    if key == "ts":
        return [_micros(value) for value in values]
    numbers = _ENUM_NUMBERS.get(key)
    if numbers is not None:
        try:
            return [numbers[value] for value in values]
        except (KeyError, TypeError):
            raise NotRepresentable(f"{key} has a value with no protobuf form") from None
    fits = _EVENT_KINDS[key]
    if not all(map(fits, values)):
        raise NotRepresentable(f"{key} has a value with no protobuf form")
    return values


def _ts_text(micros: int) -> str:
    try:
        when = _EPOCH + timedelta(microseconds=micros)
    except OverflowError:
        return f"ts_us {micros} is out of range"  # the JSON rules refuse it, naming `ts`
    return when.isoformat().replace("+00:00", "Z")


def batch_from_protobuf(raw: bytes) -> dict[str, Any]:
    """The JSON batch a `TelemetryBatch` stands for (`{"events": [...]}`), to be validated as
    a JSON body is."""
    value: dict[str, Any] = msgspec.json.decode(batch_json_from_protobuf(raw))
    return value


def batch_json_from_protobuf(raw: bytes) -> bytes:
    """The JSON text of the batch a `TelemetryBatch` stands for, to be validated as a JSON body
    is."""
    return batch_events_from_protobuf(raw)[0]


def batch_events_from_protobuf(raw: bytes) -> tuple[bytes, list[Any] | None]:
    """The JSON text of the batch a `TelemetryBatch` stands for, and, for a column-wise batch,
    its events as read (what the server reads: no Python step per event and field).

    The events are structs whose attributes are the JSON event's fields (None: absent), with
    `event_id` a UUID and `ts` an aware datetime; a value the JSON rules refuse is there as the
    JSON text holds it. They are None for a row-wise batch, and when a string holds a NUL (the
    JSON text's check refuses it, naming the field): the caller then reads the JSON text.
    Raises WireError (not a batch), TooManyEvents (more than MAX_EVENTS columns-wise, refused
    before any column is read)."""
    message = pb.TelemetryBatch()
    _parse(message, raw)
    if message.HasField("columns"):
        if message.events:
            raise WireError("a TelemetryBatch holds events or columns, not both")
        return _columns_of(message.columns).json_events()
    return _JSON_ENCODER.encode({"events": _row_events(message)}), None


def batch_columns_from_protobuf(raw: bytes) -> BatchColumns | None:
    """A column-wise `TelemetryBatch` as its columns, their shape checked (the same WireError
    and TooManyEvents as `batch_events_from_protobuf`); None for a row-wise batch."""
    message = pb.TelemetryBatch()
    _parse(message, raw)
    if not message.HasField("columns"):
        return None
    if message.events:
        raise WireError("a TelemetryBatch holds events or columns, not both")
    return _columns_of(message.columns)


def _row_events(message: pb.TelemetryBatch) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    append = events.append
    for event in message.events:
        # The fields as they are; then the few whose JSON form differs (one pass over the
        # present fields, the rest by key).
        out = {_EVENT_NAMES[field]: value for field, value in event.ListFields()}
        if "event_id" in out:
            out["event_id"] = _uuid_text(out["event_id"])
        if "ts_us" in out:
            out["ts"] = _ts_text(out.pop("ts_us"))
        for name, names in _ENUMS.items():
            if name in out:
                value = out[name]
                out[name] = names[value] if 0 < value < len(names) else f"<enum number {value}>"
        for name in _DOUBLES.intersection(out):
            if not isfinite(out[name]):
                out[name] = str(out[name])  # NaN, inf: refused by the JSON rules, naming it
        append(out)
    return events


@dataclass(frozen=True, slots=True)
class BatchColumns:
    """A column-wise batch as its columns hold it, its shape checked (one value per event
    having the field, whole UUIDs, at most MAX_EVENTS events).

    `values[key]`, by the JSON event's key: the values of the events having the field, as the
    repeated field holds them (`ts`: microseconds since 1970; `route`, `decided_by`,
    `fallback`: enum numbers, 0 meaning missing, `EVENT_ENUMS`; `event_id`: the 16-byte
    blob). `present[key]`: one byte per event, 1 for the events having it, for a field some
    (or all) events leave out; no entry: every event has it."""

    count: int
    values: dict[str, Any]
    present: dict[str, bytes]

    def full(self, key: str) -> list[Any]:
        """One value per event (None: absent), as the column holds them."""
        values = self.values[key]
        if key == "event_id":
            values = _uuids(values)
        mask = self.present.get(key)
        if mask is None:
            return list(values)
        if not values:
            return [None] * self.count
        full: list[Any] = [None] * self.count
        deque(map(full.__setitem__, compress(range(self.count), mask), values), maxlen=0)
        return full

    def json_events(self) -> tuple[bytes, list[Any] | None]:
        """The JSON text of the batch and its events as read (`batch_events_from_protobuf`)."""
        read, clean = self.events()
        return _JSON_ENCODER.encode(_JsonBatch(read)), read if clean else None

    def events(self) -> tuple[list[Any], bool]:
        """The events as read (`batch_events_from_protobuf`), and False when a string holds a
        NUL (the JSON text's check refuses it)."""
        columns: list[list[Any]] = []
        clean = True
        for key, _, _ in _COLUMNS:
            values = self.values[key]
            if key == "event_id":
                values = _uuids(values)
            else:
                convert = _COLUMN_VALUES.get(key)
                if convert is not None:
                    values = convert(values)
                elif key in _STRINGS and "\x00" in "".join(values):
                    clean = False
            mask = self.present.get(key)
            if mask is not None:
                if not values:
                    values = [None] * self.count
                elif len(values) != self.count:
                    full: list[Any] = [None] * self.count
                    deque(map(full.__setitem__, compress(range(self.count), mask), values), 0)
                    values = full
            columns.append(values)
        return list(map(_JsonEvent, *columns)), clean


def _columns_of(table: pb.TelemetryColumns) -> BatchColumns:
    """The columns of a column-wise batch, each read whole (one C call), their shape checked."""
    count = table.count
    if count > MAX_EVENTS:
        raise TooManyEvents(f"{count} events; at most {MAX_EVENTS} per batch.")
    by_number: dict[int, bytes] = {}
    for entry in table.presence:
        if entry.field in by_number:
            raise WireError(f"presence names field {entry.field} twice")
        if len(entry.events) != (count + 7) // 8:
            raise WireError(f"presence of field {entry.field} is not one bit per event")
        bits = format(int.from_bytes(entry.events, "little"), f"0{len(entry.events) * 8}b")
        by_number[entry.field] = bits[::-1][:count].encode().translate(_BIT_BYTES)
    values: dict[str, Any] = {}
    present: dict[str, bytes] = {}
    for key, name, number in _COLUMNS:
        column: Any
        if key == "event_id":
            column = table.event_id
            if len(column) % 16:
                raise WireError(f"event_id holds {len(column)} bytes, not 16 per event")
            size = len(column) // 16
        else:
            column = getattr(table, name)[:]  # (a slice: one C call)
            size = len(column)
        mask = by_number.get(number)
        if mask is None and not size and count:
            mask = bytes(count)  # an empty column: absent from every event
        having = count if mask is None else mask.count(1)
        if size != having:
            raise WireError(f"column {name} holds {size} values for {having} events")
        values[key] = column
        if mask is not None:
            present[key] = mask
    return BatchColumns(count, values, present)


_BIT_BYTES: Final = bytes.maketrans(b"01", b"\x00\x01")
_UUID_LIST: Final = list[uuid.UUID]


def _uuid_text(raw: bytes) -> str:
    """A UUID's 16 bytes in their text form (other lengths: hex, which the JSON rules refuse)."""
    h = raw.hex()
    if len(raw) != 16:
        return h
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _uuids(blob: bytes) -> list[uuid.UUID]:
    """16 bytes per UUID, as UUIDs (a blob that is not whole UUIDs: malformed)."""
    if len(blob) % 16:
        raise WireError(f"event_id holds {len(blob)} bytes, not 16 per event")
    h = blob.hex()
    return msgspec.convert([h[i : i + 32] for i in range(0, len(h), 32)], _UUID_LIST)


def _times(values: list[int]) -> list[Any]:
    """Microseconds since 1970 as datetimes (written as RFC 3339 text in UTC, `Z`); one past
    any date, as text the JSON rules refuse, naming `ts`."""
    try:
        return list(map(_EPOCH.__add__, map(timedelta, repeat(0), repeat(0), values)))
    except OverflowError:
        return [_ts_text(micros) for micros in values]


def _enum_texts(names: tuple[str, ...]) -> Any:
    # 0 (unspecified) is missing; a number the schema lacks, a text the JSON rules refuse.
    table = {number: name or None for number, name in enumerate(names)}

    def convert(values: list[int]) -> list[str | None]:
        try:
            return list(map(table.__getitem__, values))
        except KeyError:
            return [table.get(v, f"<enum number {v}>") for v in values]

    return convert


def _finite(values: list[float]) -> list[Any]:
    if isfinite(sum(values)):
        return values
    # NaN, inf (or a sum past the largest double): each non-finite one as text, which the JSON
    # rules refuse naming the field.
    return [v if isfinite(v) else str(v) for v in values]


# The columns in the JSON event's field order: (JSON key, protobuf field, field number).
_COLUMNS: Final = tuple(
    ("ts" if field.name == "ts_us" else field.name, field.name, field.number)
    for field in pb.TelemetryEvent.DESCRIPTOR.fields
)
_COLUMN_KEYS: Final = frozenset(key for key, _, _ in _COLUMNS)
_STRINGS: Final = frozenset(
    field.name for field in pb.TelemetryEvent.DESCRIPTOR.fields if field.type == field.TYPE_STRING
)
_COLUMN_VALUES: Final = {
    "ts": _times,
    **{name: _enum_texts(names) for name, names in _ENUMS.items()},
    **dict.fromkeys(_DOUBLES, _finite),
}


# A JSON event as the columns give it, built in C from one value per column (positional); a
# None (absent) field is left out of its JSON, as a field the event did not have.
_JsonEvent: Final = msgspec.defstruct(
    "_JsonEvent",
    [(key, Any, None) for key, _, _ in _COLUMNS],
    omit_defaults=True,
    gc=False,  # holds scalars only (no cycle): not tracked by the garbage collector
)


class _JsonBatch(msgspec.Struct):
    events: list[Any]


_JSON_ENCODER: Final = msgspec.json.Encoder()


# --- the device frames --------------------------------------------------------------------------

# The frame types that have a message of their own, and the JSON keys each may hold.
_FRAME_KEYS: Final = {
    "hello": frozenset({"device_id", "policy_version", "sdk", "platform", "model"}),
    "up_to_date": frozenset({"version"}),
    "ack": frozenset({"version"}),
    "cloud_pressure": frozenset({"theta_offset", "ttl_s"}),
    "error": frozenset({"code", "detail", "field"}),
}
_REQUIRED: Final = {
    "hello": ("device_id",),
    "cloud_pressure": ("theta_offset", "ttl_s"),
    "error": ("code", "detail"),
}
_ROLLOUT_KEYS: Final = frozenset({"id", "stage", "holdback"})


def frame_to_protobuf(frame: Mapping[str, Any]) -> bytes:
    """A `/ws/device/` frame (a JSON object with its `type`) as a `Frame`."""
    out = pb.Frame()
    kind = frame.get("type")
    if not _frame_fits(out, kind, frame):
        out = pb.Frame(json=_json_text(dict(frame)))
    return out.SerializeToString()


def _frame_fits(out: pb.Frame, kind: Any, frame: Mapping[str, Any]) -> bool:
    if kind == "policy":
        rollout = frame.get("rollout")
        document = {k: v for k, v in frame.items() if k not in ("type", "rollout")}
        policy = out.policy
        policy.SetInParent()
        policy.document.ParseFromString(document_to_protobuf(document))
        if rollout is None:
            return "rollout" in frame
        return (
            isinstance(rollout, Mapping)
            and {"id", "stage"} <= rollout.keys() <= _ROLLOUT_KEYS
            and _fill_flat(policy.rollout, rollout)
        )
    if kind == "policy_delta":
        rollout = frame.get("rollout")
        policy_delta = out.policy_delta
        policy_delta.SetInParent()
        delta = {k: v for k, v in frame.items() if k not in ("type", "rollout")}
        if "rollout" not in frame or not _delta_fits(policy_delta.delta, delta):
            return False
        return rollout is None or (
            isinstance(rollout, Mapping)
            and {"id", "stage"} <= rollout.keys() <= _ROLLOUT_KEYS
            and _fill_flat(policy_delta.rollout, rollout)
        )
    keys = _FRAME_KEYS.get(kind) if isinstance(kind, str) else None
    if keys is None:
        return False
    body = {k: v for k, v in frame.items() if k != "type"}
    nulls = {k for k, v in body.items() if v is None}
    nullable = {"policy_version", "version"}
    if not body.keys() <= keys or not nulls <= nullable:
        return False
    if any(name not in body for name in _REQUIRED.get(kind, ())):
        return False
    # "version": null and a missing version differ in JSON; only the former is sent.
    if kind in ("up_to_date", "ack") and "version" not in body:
        return False
    if kind == "hello" and "policy_version" not in body:
        return False
    message = getattr(out, kind)
    message.SetInParent()
    return _fill_flat(message, {k: v for k, v in body.items() if v is not None})


def frame_from_protobuf(raw: bytes) -> dict[str, Any] | str:
    """The frame a `Frame` stands for: a JSON object with its `type`, or, for the `json`
    kind, the JSON text it carries (to be read as a JSON text frame is)."""
    message = pb.Frame()
    _parse(message, raw)
    kind = message.WhichOneof("kind")
    if kind is None:
        return {"type": ""}  # a kind this schema does not know
    if kind == "json":
        return message.json
    if kind == "policy":
        policy = message.policy
        rollout = _flat_of(policy.rollout) if policy.HasField("rollout") else None
        return {"type": "policy", **_document_value(policy.document), "rollout": rollout}
    if kind == "policy_delta":
        frame = message.policy_delta
        rollout = _flat_of(frame.rollout) if frame.HasField("rollout") else None
        return {"type": "policy_delta", **_delta_value(frame.delta), "rollout": rollout}
    body = _flat_of(getattr(message, kind))
    if kind == "hello":
        body.setdefault("policy_version", None)
    elif kind in ("up_to_date", "ack"):
        body.setdefault("version", None)
    elif kind == "cloud_pressure":
        body = {"theta_offset": message.cloud_pressure.theta_offset, "ttl_s": body.get("ttl_s", 0)}
    elif kind == "error":
        body = {"code": message.error.code, "detail": message.error.detail, **body}
    return {"type": kind, **body}
