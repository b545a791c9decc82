"""What telemetry needs to know of a fleet: its published versions' dimensions, its rollouts,
the segments its devices are in."""

from __future__ import annotations

import threading
import time
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Count, Min, Sum
from django.utils import timezone

from edge_sdk.segments import device_attributes, rule_matches
from routing_policies.models import Device, PolicyCell, PolicyVersion, Rollout, Segment

from ..rollups import UploadHandling
from ..rollups.prometheus import IngestGauges
from .events import VersionDimensions
from .models import Cohort, LandedBatch

_CACHE_TTL_S = 60.0
_CANDIDATE: str = Cohort.CANDIDATE.value
_STABLE: str = Cohort.STABLE.value
_cache: dict[int, tuple[float, dict[int, VersionDimensions]]] = {}
_cache_lock = threading.Lock()


def _load_versions(fleet_id: int) -> dict[int, VersionDimensions]:
    rows = PolicyVersion.objects.filter(fleet_id=fleet_id, number__isnull=False).values_list(
        "number", "dimensions"
    )
    return {number: VersionDimensions.of(dimensions) for number, dimensions in rows if number}


class VersionCatalog:
    """A fleet's published versions → their dimension values.

    Published versions never change, so they are cached per process; a number not in the cache
    (a version published since) reloads it once per catalog.
    """

    def __init__(self, fleet_id: int) -> None:
        self.fleet_id = fleet_id
        self._reloaded = False
        with _cache_lock:
            cached = _cache.get(fleet_id)
        if cached is None or time.monotonic() - cached[0] > _CACHE_TTL_S:
            self._versions = self._reload()
        else:
            self._versions = cached[1]

    def _reload(self) -> dict[int, VersionDimensions]:
        versions = _load_versions(self.fleet_id)
        with _cache_lock:
            _cache[self.fleet_id] = (time.monotonic(), versions)
        return versions

    def get(self, number: int) -> VersionDimensions | None:
        """The version's dimensions, or None when the fleet has no such published version."""
        found = self._versions.get(number)
        if found is None and not self._reloaded:
            self._reloaded = True
            self._versions = self._reload()
            found = self._versions.get(number)
        return found


# (fleet id, version number) → cell key → (upload.allowed, upload.deidentify). Published
# versions never change, so an entry never goes stale; bounded by dropping the oldest.
_handling_cache: dict[tuple[int, int], dict[tuple[str, str, str], UploadHandling]] = {}
_HANDLING_CACHE_SIZE = 512
# A cell a version does not have (telemetry of unknown cells is refused at ingest, so never
# met): judged as strictly as the strictest cell.
STRICTEST: UploadHandling = (False, True)


class CellPrivacy:
    """The upload handling of each published cell, by fleet and version (for privacy
    violations, which depend on what the event's cell allows)."""

    def handling(
        self, fleet_id: int, version: int, task_type: str, latency_budget: str, tier: str
    ) -> UploadHandling:
        """(upload.allowed, upload.deidentify) of that cell of that published version."""
        key = (fleet_id, version)
        with _cache_lock:
            cells = _handling_cache.get(key)
        if cells is None:
            rows = PolicyCell.objects.filter(
                version__fleet_id=fleet_id, version__number=version
            ).values_list(
                "task_type", "latency_budget", "privacy_tier", "upload_allowed", "upload_deidentify"
            )
            cells = {(t, b, p): (allowed, deid) for t, b, p, allowed, deid in rows}
            with _cache_lock:
                while len(_handling_cache) >= _HANDLING_CACHE_SIZE:
                    _handling_cache.pop(next(iter(_handling_cache)))
                _handling_cache[key] = cells
        return cells.get((task_type, latency_budget, tier), STRICTEST)


@dataclass(slots=True)
class CandidateSpans:
    """For one fleet and version: the times it was a rollout's candidate, [start, end)."""

    starts: list[datetime] = field(default_factory=list)
    ends: list[datetime | None] = field(default_factory=list)

    def covers(self, moment: datetime) -> bool:
        """True when `moment` falls inside one of the spans."""
        position = bisect_right(self.starts, moment) - 1
        while position >= 0:
            end = self.ends[position]
            if end is None or moment < end:
                return True
            position -= 1
        return False


class CohortResolver:
    """Attributes an event to the stable or candidate cohort by its own time and version.

    An event is `candidate` when, at its timestamp, its fleet had a rollout (started and not yet
    finished) whose candidate is the version the event carries; otherwise `stable`. Late events
    are attributed by when they happened, not by when they arrived.
    """

    def __init__(self, fleet_ids: Iterable[int]) -> None:
        self._spans: dict[tuple[int, int], CandidateSpans] = {}
        rows = (
            Rollout.objects.filter(fleet_id__in=list(set(fleet_ids)))
            .order_by("started_at")
            .values_list("fleet_id", "candidate__number", "started_at", "finished_at")
        )
        for fleet_id, number, started_at, finished_at in rows:
            if number is None:
                continue
            spans = self._spans.setdefault((fleet_id, number), CandidateSpans())
            spans.starts.append(started_at)
            spans.ends.append(finished_at)

    def cohort(self, fleet_id: int, version: int, moment: datetime) -> str:
        """`candidate` or `stable`."""
        spans = self._spans.get((fleet_id, version))
        if spans is not None and spans.covers(moment):
            return _CANDIDATE
        return _STABLE


class SegmentResolver:
    """Which of its fleet's named segments each device of the claimed batches is in, fixed as
    the batches are processed (seconds after landing): the device's stored attributes (what it
    reported at enrolment and in its last `hello`) against the fleet's segments' rules at that
    moment, by the one evaluation (edge_sdk.segments.rule_matches). An event keeps this with it
    (Event.segments) and its rollups count it in each of those segments: an edit of a rule or a
    device's new attributes change what is counted from then on, never rows already written.

    Two queries for a whole transaction: the claimed fleets' segments and the claimed devices.
    """

    def __init__(self, batches: Iterable[tuple[int, int]]) -> None:
        pairs = set(batches)  # (fleet id, device pk)
        rules: dict[int, list[tuple[int, dict[str, Any]]]] = {}
        for segment_id, fleet_id, rule in (
            Segment.objects.filter(fleet_id__in={fleet for fleet, _ in pairs})
            .order_by("pk")
            .values_list("pk", "fleet_id", "rule")
        ):
            rules.setdefault(fleet_id, []).append((segment_id, rule))
        self._of_device: dict[int, tuple[int, ...]] = {}
        devices = Device.objects.filter(pk__in={device for _, device in pairs}).values_list(
            "pk", "fleet_id", "platform", "model", "attributes"
        )
        for pk, fleet_id, platform, model, reported in devices:
            known = reported if isinstance(reported, dict) else {}
            attributes = device_attributes(platform=platform, model=model, reported=known)
            self._of_device[pk] = tuple(
                segment_id
                for segment_id, rule in rules.get(fleet_id, ())
                if rule_matches(rule, attributes)
            )

    def segments(self, device_pk: int) -> tuple[int, ...] | None:
        """The ids of the segments the device is in (ascending), None when it is gone."""
        return self._of_device.get(device_pk)


def ingest_gauges(now: datetime | None = None) -> IngestGauges:
    """Landed (accepted, unprocessed) batches and events, and the age of the oldest."""
    now = now or timezone.now()
    summary = LandedBatch.objects.aggregate(
        batches=Count("id"), events=Sum("event_count"), oldest=Min("received_at")
    )
    oldest = summary["oldest"]
    return IngestGauges(
        landed_batches=summary["batches"] or 0,
        landed_events=summary["events"] or 0,
        lag_seconds=max(0.0, (now - oldest).total_seconds()) if oldest else 0.0,
    )
