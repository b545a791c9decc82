"""The write side: folding events into rollup tallies, shared by the worker and the benchmark.

One pass over the events fills the finest tallies (minute × fleet × version × cohort × cell ×
route × deciding step × the device's segments); the three stored levels are then merged from
those, so the per-event work is done once. Each fine tally counts into its key's all-devices row
(segment 0) and into the row of each named segment its events' device was in: the segment
dimension is fanned out when the levels are merged, not per event.

Every figure merges by addition, so tallies of any two sets of events add up to the tally of
their union: that is what lets partial rows be written in any order and compacted later.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Protocol

from edge_sdk.decision import left_device_by_route, privacy_violation

from .schema import ALL_DEVICES, HISTOGRAM_FIELDS, METRIC_FIELDS, ZERO_SUMS
from .sketch import SCORE_BINS, bucket_index, merge_counts

SENSITIVE_TIER = "sensitive"
# A cell's privacy handling: (upload.allowed, upload.deidentify).
UploadHandling = tuple[bool, bool]

# The ids of the fleet's named segments an event's device was in (ascending; () for none).
Segments = tuple[int, ...]
# (fleet_id, minute since epoch, version, cohort, task_type, latency_budget, privacy_tier,
#  route, decided_by, segments)
FineKey = tuple[int, int, int, str, str, str, str, str, str, Segments]
# (fleet_id, minute or hour start, version, cohort, task_type, latency_budget, privacy_tier,
#  route, segment)
CellKey = tuple[int, datetime, int, str, str, str, str, str, int]
# (fleet_id, hour start, version, cohort, route, decided_by, segment)
FleetKey = tuple[int, datetime, int, str, str, str, int]


class EventKeyLike(Protocol):
    """What places an event at its rollup keys (a stored Event row does too); read-only."""

    @property
    def ts(self) -> datetime: ...
    @property
    def policy_version(self) -> int: ...
    @property
    def task_type(self) -> str: ...
    @property
    def latency_budget(self) -> str: ...
    @property
    def privacy_tier(self) -> str: ...
    @property
    def route(self) -> str: ...
    @property
    def decided_by(self) -> str: ...


# What an event's rollup keys read of it (`EventKeyLike`), for a query's `only()`.
EVENT_KEY_FIELDS: Final = (
    "ts",
    "policy_version",
    "task_type",
    "latency_budget",
    "privacy_tier",
    "route",
    "decided_by",
)
# (version, cohort, task_type, latency_budget, privacy_tier, route, decided_by)
EventCell = tuple[int, str, str, str, str, str, str]


def event_cell(event: EventKeyLike, cohort: str) -> EventCell:
    """Where an event counts below its fleet and its time: its version, cohort, cell, route
    and decider (the rollups' keys, and the raw table's columns in the same order)."""
    return (
        event.policy_version,
        cohort,
        event.task_type,
        event.latency_budget,
        event.privacy_tier,
        event.route,
        event.decided_by,
    )


class EventLike(EventKeyLike, Protocol):
    """What folding needs of an event (a TelemetryEvent or a benchmark's row); read-only."""

    @property
    def fallback(self) -> str: ...
    @property
    def latency_ms(self) -> float: ...
    @property
    def cache_hit(self) -> bool: ...
    @property
    def ok(self) -> bool: ...
    @property
    def deidentified(self) -> bool: ...
    @property
    def score(self) -> float | None: ...
    @property
    def tokens(self) -> int | None: ...
    @property
    def uploaded(self) -> bool | None: ...
    @property
    def refine_changed(self) -> bool | None: ...
    @property
    def refine_edit_ratio(self) -> float | None: ...
    @property
    def quality(self) -> float | None: ...
    @property
    def shadow_refine(self) -> bool | None: ...


def left_device(event: EventLike) -> bool:
    """Whether the event's task data left the device: what the device said (`uploaded`), or,
    from a device that does not say, its route, fallback and cache hit. A cache hit never left.
    A shadow refine (`shadow_refine`: the cloud refined the device's answer in the background)
    sent the task to the cloud whatever else the event says, so it left, like a cloud call.
    """
    if event.cache_hit:
        return False
    if event.shadow_refine:
        return True
    if event.uploaded is not None:
        return event.uploaded
    return left_device_by_route(event.route, event.fallback, event.cache_hit)


def is_privacy_violation(event: EventLike, handling: UploadHandling) -> bool:
    """PROTOCOL.md extensions: a sensitive task's data left the device where its cell
    (`handling`, of the version the event ran) forbids upload, or left without
    de-identification where the cell requires it."""
    if event.privacy_tier != SENSITIVE_TIER:
        return False
    allowed, deidentify = handling
    return privacy_violation(
        privacy_tier=event.privacy_tier,
        upload_allowed=allowed,
        upload_deidentify=deidentify,
        left_device=left_device(event),
        deidentified=event.deidentified,
    )


@dataclass(slots=True)
class Tally:
    """The figures of one rollup key as they are written (one attribute per METRIC_FIELDS
    column, histograms keyed by bucket number); `merge` adds another tally."""

    events: int = 0
    fallback_cloud_to_device: int = 0
    fallback_device_to_cloud: int = 0
    cache_hits: int = 0
    errors: int = 0
    privacy_violations: int = 0
    latency_sum_ms: float = 0.0
    score_count: int = 0
    score_sum: float = 0.0
    tokens_sum: int = 0
    refine_reported: int = 0
    refine_kept: int = 0
    refine_edit_sum: float = 0.0
    refine_edit_count: int = 0
    quality_count: int = 0
    quality_sum: float = 0.0
    shadow_refines: int = 0
    latency_hist: dict[int, int] = field(default_factory=dict)
    score_hist: dict[int, int] = field(default_factory=dict)
    refine_hist: dict[int, int] = field(default_factory=dict)
    kept_hist: dict[int, int] = field(default_factory=dict)

    def add(self, event: EventLike, violation: bool = False) -> None:
        """Count one event; `violation`: it is a privacy violation (`is_privacy_violation`,
        which needs the cell's handling, so the caller judges it)."""
        self.events += 1
        fallback = event.fallback
        if fallback == "cloud_to_device":
            self.fallback_cloud_to_device += 1
        elif fallback == "device_to_cloud":
            self.fallback_device_to_cloud += 1
        if event.cache_hit:
            self.cache_hits += 1
        if not event.ok:
            self.errors += 1
        if violation:
            self.privacy_violations += 1
        latency = event.latency_ms
        self.latency_sum_ms += latency
        index = bucket_index(latency)
        hist = self.latency_hist
        hist[index] = hist.get(index, 0) + 1
        score = event.score
        score_index = -1
        if score is not None:
            self.score_count += 1
            self.score_sum += score
            score_index = int(score * SCORE_BINS)  # score_bin, inlined: scores are in [0, 1]
            if score_index >= SCORE_BINS:
                score_index = SCORE_BINS - 1
            self.score_hist[score_index] = self.score_hist.get(score_index, 0) + 1
        if event.tokens is not None:
            self.tokens_sum += event.tokens
        changed = event.refine_changed
        if changed is not None:
            self.refine_reported += 1
            if score_index >= 0:
                self.refine_hist[score_index] = self.refine_hist.get(score_index, 0) + 1
            if not changed:
                self.refine_kept += 1
                if score_index >= 0:
                    self.kept_hist[score_index] = self.kept_hist.get(score_index, 0) + 1
            edit = event.refine_edit_ratio
            if edit is not None:
                self.refine_edit_count += 1
                self.refine_edit_sum += edit
        if event.quality is not None:
            self.add_quality(event.quality)
        if event.shadow_refine and event.route == "device":
            self.shadow_refines += 1

    def add_quality(self, quality: float) -> None:
        """Count one `quality` reading: the event's own, or late feedback joined to it."""
        self.quality_count += 1
        self.quality_sum += quality

    def merge(self, other: Tally) -> None:
        """Add `other` into this tally."""
        for name in METRIC_FIELDS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for target, source in (
            (self.latency_hist, other.latency_hist),
            (self.score_hist, other.score_hist),
            (self.refine_hist, other.refine_hist),
            (self.kept_hist, other.kept_hist),
        ):
            for index, count in source.items():
                target[index] = target.get(index, 0) + count

    def columns(self) -> dict[str, Any]:
        """The tally as rollup-row column values (histograms keyed by strings, as JSON)."""
        columns: dict[str, Any] = {name: getattr(self, name) for name in METRIC_FIELDS}
        for name in HISTOGRAM_FIELDS:
            columns[name] = {str(k): v for k, v in getattr(self, name).items()}
        return columns


def merge_columns(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Merge stored rollup rows (column dicts) into one column dict."""
    merged: dict[str, Any] = dict(zip(METRIC_FIELDS, ZERO_SUMS, strict=True))
    histograms: dict[str, dict[str, int]] = {name: {} for name in HISTOGRAM_FIELDS}
    for row in rows:
        for name in METRIC_FIELDS:
            merged[name] += row[name]
        for column, histogram in histograms.items():
            merge_counts(histogram, row[column])
    merged.update(histograms)
    return merged


def _epoch_minute(ts: datetime) -> int:
    return int(ts.timestamp()) // 60


def _moment(epoch_minute: int) -> datetime:
    return datetime.fromtimestamp(epoch_minute * 60, tz=UTC)


class RollupAccumulator:
    """Tallies of a set of events at the three stored levels."""

    def __init__(self) -> None:
        self.fine: dict[FineKey, Tally] = {}

    def add(
        self,
        fleet_id: int,
        cohort: str,
        event: EventLike,
        violation: bool = False,
        segments: Segments = (),
    ) -> None:
        """Count one event of `fleet_id`, attributed to `cohort` (`violation`: see Tally.add),
        in the all-devices rows and in those of each of `segments`."""
        self._tally(fleet_id, cohort, event, segments).add(event, violation)

    def add_quality(
        self,
        fleet_id: int,
        cohort: str,
        event: EventKeyLike,
        quality: float,
        segments: Segments = (),
    ) -> None:
        """Count late feedback's `quality` of an event (folded now or before) at its keys (and
        its `segments`, as stored with it): a tally with no event of its own, which merges with
        the event's rows like any other."""
        self._tally(fleet_id, cohort, event, segments).add_quality(quality)

    def _tally(self, fleet_id: int, cohort: str, event: EventKeyLike, segments: Segments) -> Tally:
        key: FineKey = (fleet_id, _epoch_minute(event.ts), *event_cell(event, cohort), segments)
        tally = self.fine.get(key)
        if tally is None:
            tally = self.fine[key] = Tally()
        return tally

    def _level(self, make_key: Any) -> dict[Any, Tally]:
        """Fine tallies merged by `make_key(fine key, segment)`, for the all-devices rows
        (segment 0) and for each segment of the fine key."""
        out: dict[Any, Tally] = {}
        for fine_key, tally in self.fine.items():
            for segment in (ALL_DEVICES, *fine_key[9]):
                key = make_key(fine_key, segment)
                existing = out.get(key)
                if existing is None:
                    existing = out[key] = Tally()
                existing.merge(tally)
        return out

    def minutes(self) -> dict[CellKey, Tally]:
        """Per minute × cell × route × segment."""
        return self._level(lambda k, s: (k[0], _moment(k[1]), *k[2:8], s))

    def hours(self) -> dict[CellKey, Tally]:
        """Per hour × cell × route × segment."""
        return self._level(lambda k, s: (k[0], _moment(k[1] - k[1] % 60), *k[2:8], s))

    def fleet_hours(self) -> dict[FleetKey, Tally]:
        """Per hour × route × deciding step × segment, without the cell."""
        return self._level(
            lambda k, s: (k[0], _moment(k[1] - k[1] % 60), k[2], k[3], k[7], k[8], s)
        )

    def __iter__(self) -> Iterator[FineKey]:
        return iter(self.fine)
