"""A column-wise protobuf batch checked column by column, without an event struct per event.

`TelemetryEvent` (events.py) stays the one declaration of an event: the rules here are read
from it (`msgspec.inspect`: which fields are required, each string's lengths, each number's
range, each literal's values), and each column is checked whole against its field's rule (the
smallest and largest value, the longest string, the set of enum numbers), then the request's
context (the device, the clock, the fleet's versions and their dimension values) and the
quality signals. `accepted` says only "surely valid": when a column breaks a rule, or when it
cannot tell cheaply, it answers None, and the caller reads the batch as before (its events
built and checked by the struct, then the JSON path's complete check), so every refusal, its
400 and the fields it names are the JSON path's whatever the encoding.

A batch accepted here is landed as its protobuf bytes (`events.decode_landed` reads either).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from math import isfinite
from typing import Any, Final

import msgspec.inspect as mi

from edge_sdk.wire.codec import EVENT_ENUMS, BatchColumns

from .events import (
    FUTURE_TOLERANCE,
    SIGNAL_FIELDS,
    BatchContext,
    TelemetryEvent,
    _signal_problems,
)

__all__ = ["ColumnsAccepted", "accepted"]

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND: Final = timedelta(microseconds=1)
_US_PER_DAY: Final = 86_400_000_000
_ENDS: Final = range(32, 32 * 1_000_000, 32)  # each event id's end in the blob's hex

Check = Callable[[Any], bool]


@dataclass(frozen=True, slots=True)
class ColumnsAccepted:
    """What landing a batch needs: its event ids (hex, in event order, no two alike) and each
    event's UTC day (days since 1970, an int[] literal)."""

    ids: list[str]
    days: str


def _within(info: Any) -> Callable[[float, float], bool]:
    """Whether the smallest and largest value keep to a number type's bounds."""
    ge, le, gt, lt = info.ge, info.le, info.gt, info.lt

    def check(low: float, high: float) -> bool:
        return (
            (ge is None or low >= ge)
            and (gt is None or low > gt)
            and (le is None or high <= le)
            and (lt is None or high < lt)
        )

    return check


def _column_check(key: str, info: Any) -> Check | None:
    """The check of one column's values (the events having the field) against its type; None:
    this type has no column check (the caller then never accepts the column)."""
    if isinstance(info, mi.StrType):
        shortest, longest = info.min_length or 0, info.max_length

        def strings(values: list[str]) -> bool:
            lengths = list(map(len, values))
            return (
                min(lengths) >= shortest
                and (longest is None or max(lengths) <= longest)
                and "\x00" not in "".join(values)  # refused by the JSON path's guard
            )

        return strings
    if isinstance(info, mi.IntType):
        bounds = _within(info)
        return lambda values: bounds(min(values), max(values))
    if isinstance(info, mi.FloatType):
        bounds = _within(info)
        # NaN and inf make the sum non-finite (finite values in range cannot overflow it).
        return lambda values: isfinite(sum(values)) and bounds(min(values), max(values))
    if isinstance(info, mi.BoolType):
        return lambda values: True  # a bool column holds bools
    if isinstance(info, mi.LiteralType) and key in EVENT_ENUMS:
        allowed = frozenset(
            number for number, text in enumerate(EVENT_ENUMS[key]) if text in info.values
        )
        return lambda values: allowed.issuperset(values)
    if isinstance(info, mi.UUIDType) or (isinstance(info, mi.DateTimeType) and info.tz):
        return lambda values: True  # any 16 bytes; microseconds (the context bounds them)
    return None


@dataclass(frozen=True, slots=True)
class _Rule:
    key: str
    required: bool
    check: Check


def _rules() -> tuple[_Rule, ...]:
    info = mi.type_info(TelemetryEvent)
    assert isinstance(info, mi.StructType)
    rules = []
    for field in info.fields:
        kind = field.type
        if isinstance(kind, mi.UnionType):
            kinds = [t for t in kind.types if not isinstance(t, mi.NoneType)]
            kind = kinds[0] if len(kinds) == 1 else kind
        while isinstance(kind, mi.Metadata):
            kind = kind.type
        check = _column_check(field.encode_name, kind)
        if check is None:
            raise TypeError(f"TelemetryEvent.{field.name}: no column check for {kind!r}")
        rules.append(_Rule(field.encode_name, field.required, check))
    return tuple(rules)


_RULES: Final = _rules()


def _micros(when: datetime) -> int:
    """An aware datetime as microseconds since 1970 (as `ts_us` counts them)."""
    return (when - _EPOCH) // _MICROSECOND


def accepted(columns: BatchColumns, context: BatchContext) -> ColumnsAccepted | None:
    """What landing needs when every event of `columns` is surely valid for `context`; None
    when one may not be (the caller then checks its events one by one, as before)."""
    count = columns.count
    if not count:
        return None
    values, present = columns.values, columns.present
    for rule in _RULES:
        if rule.key in present:
            if rule.required:
                return None
            if not values[rule.key]:
                continue
        if not rule.check(values[rule.key]):
            return None
    if not _context_holds(columns, context) or not _signals_hold(columns):
        return None
    blob = values["event_id"].hex()
    ids = list(map(blob.__getitem__, map(slice, range(0, len(blob), 32), _ENDS)))
    if len(set(ids)) != count:
        return None  # an id twice in the batch: counted as a duplicate by the event path
    days = ",".join(map(str, map(_US_PER_DAY.__rfloordiv__, values["ts"])))
    return ColumnsAccepted(ids, "{" + days + "}")


def _context_holds(columns: BatchColumns, context: BatchContext) -> bool:
    """The device, the clock window and the fleet's versions and dimension values."""
    values = columns.values
    if set(values["device_id"]) != {context.device_id}:
        return False
    stamps = values["ts"]
    oldest, newest = _micros(context.oldest), _micros(context.now + FUTURE_TOLERANCE)
    if min(stamps) < oldest or max(stamps) > newest:
        return False
    by_version = set(
        zip(
            values["policy_version"],
            values["task_type"],
            values["latency_budget"],
            values["privacy_tier"],
            strict=True,
        )
    )
    for version, task_type, latency_budget, privacy_tier in by_version:
        dims = context.versions.get(version)
        if (
            dims is None
            or task_type not in dims.task_types
            or latency_budget not in dims.latency_budgets
            or privacy_tier not in dims.privacy_tiers
        ):
            return False
    return True


def _signals_hold(columns: BatchColumns) -> bool:
    """The quality signals that depend on one another (`events._signal_problems`), checked for
    the events that carry one."""
    values = columns.values
    if not (
        values["refine_changed"] or values["refine_edit_ratio"] or any(values["shadow_refine"])
    ):
        return True
    names = EVENT_ENUMS["route"]
    route, cache_hit, changed, ratio, shadow = (columns.full(key) for key in SIGNAL_FIELDS)
    for index in range(columns.count):
        if changed[index] is None and ratio[index] is None and not shadow[index]:
            continue
        if _signal_problems(
            names[route[index]], cache_hit[index], changed[index], ratio[index], shadow[index]
        ):
            return False
    return True
