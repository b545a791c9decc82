"""Mergeable figures of rollup rows: sums per route, merged sketches, and what follows from them.

`Figures` sums every METRIC_FIELDS column of the rows added to it, kept per route, and merges
their sketches; two `Figures` merge by addition, so figures of any grouping (a time bucket, a
cell, a cohort, the whole window) are built from smaller ones without reading rows again.
Every figure a reader shows is a method here: shares, rates, means, tokens per task per route,
latency quantiles, the score distribution. A new figure is one method (and, for a new summed
column, one name in schema.MetricField).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, Final, TypeVar

from .reader import RollupRow
from .schema import FIELD_INDEX, ROUTES, ZERO_SUMS, MetricField
from .sketch import SCORE_BINS, LatencySketch, merge_counts, score_counts

HEADLINE_QUANTILES: Final = (0.5, 0.95, 0.99)
_DEVICE_OR_CLOUD: Final = frozenset(ROUTES[:2])
_OTHER_ROUTE: Final = ROUTES[2]  # a route neither device nor cloud counts as draft-refine
Key = TypeVar("Key")


def ratio(part: float, whole: float) -> float | None:
    """part / whole; None when unknown: no whole, or a sum made infinite or NaN by a row stored
    before telemetry numbers had ranges (JSON has no infinity: the answer would be a 500)."""
    if not whole:
        return None
    value = part / whole
    return value if math.isfinite(value) else None


class Figures:
    """Summed columns of some rollup rows per route, and their merged sketches."""

    __slots__ = ("_parts", "_totals", "kept_hist", "latency_hist", "refine_hist", "score_hist")

    def __init__(self) -> None:
        # route → the METRIC_FIELDS sums of its rows and merged figures, added up when read
        # (one C-level pass per column instead of ten additions per row).
        self._parts: dict[str, list[Sequence[float]]] = {}
        self.latency_hist: dict[str, int] = {}
        self.score_hist: dict[str, int] = {}
        # {"<score bin>": count} of the events reporting `refine_changed` / of those kept.
        self.refine_hist: dict[str, int] = {}
        self.kept_hist: dict[str, int] = {}
        self._totals: Sequence[float] | None = None

    def add(self, row: RollupRow, *, latency: bool = True, scores: bool = True) -> None:
        """Fold one row in (its sketches too, where read and unless told otherwise)."""
        route = row.route
        if route not in _DEVICE_OR_CLOUD:
            route = _OTHER_ROUTE
        parts = self._parts.get(route)
        if parts is None:
            self._parts[route] = [row.sums]
        else:
            parts.append(row.sums)
        self._totals = None
        if latency and row.latency_hist:
            merge_counts(self.latency_hist, row.latency_hist)
        if scores:
            if row.score_hist:
                merge_counts(self.score_hist, row.score_hist)
            if row.refine_hist:
                merge_counts(self.refine_hist, row.refine_hist)
            if row.kept_hist:
                merge_counts(self.kept_hist, row.kept_hist)

    def merge(self, other: Figures, *, latency: bool = True, scores: bool = True) -> None:
        """Add `other` into these figures (its sketches too, unless told otherwise)."""
        parts = self._parts
        for route in other._parts:
            sums = other.route_sums(route)
            mine = parts.get(route)
            if mine is None:
                parts[route] = [sums]
            else:
                mine.append(sums)
        self._totals = None
        if latency:
            merge_counts(self.latency_hist, other.latency_hist)
        if scores:
            merge_counts(self.score_hist, other.score_hist)
            merge_counts(self.refine_hist, other.refine_hist)
            merge_counts(self.kept_hist, other.kept_hist)

    # --- sums ----------------------------------------------------------------------------------

    def route_sums(self, route: str) -> Sequence[float]:
        """The METRIC_FIELDS sums of one route's rows (zeros without any)."""
        parts = self._parts.get(route)
        if parts is None:
            return ZERO_SUMS
        if len(parts) > 1:
            parts[:] = [tuple(map(sum, zip(*parts)))]  # noqa: B905  # one length: METRIC_FIELDS
        return parts[0]

    @property
    def routes(self) -> dict[str, Sequence[float]]:
        """route → the METRIC_FIELDS sums of its rows, for the routes that have rows."""
        return {route: self.route_sums(route) for route in self._parts}

    def totals(self) -> Sequence[float]:
        """The METRIC_FIELDS sums over every route."""
        if self._totals is None:
            sums = list(self.routes.values())
            if not sums:
                self._totals = ZERO_SUMS
            elif len(sums) == 1:
                self._totals = sums[0]
            else:
                self._totals = tuple(map(sum, zip(*sums)))  # noqa: B905  # one length
        return self._totals

    def total(self, name: MetricField, route: str | None = None) -> float:
        """The sum of column `name`, over every route or over one."""
        if route is None:
            return self.totals()[FIELD_INDEX[name]]
        return self.route_sums(route)[FIELD_INDEX[name]]

    @property
    def events(self) -> int:
        """How many events."""
        return int(self.totals()[FIELD_INDEX["events"]])

    @property
    def privacy_violations(self) -> int:
        """Privacy violations (PROTOCOL.md)."""
        return int(self.totals()[FIELD_INDEX["privacy_violations"]])

    @property
    def fallbacks(self) -> float:
        """Fallbacks either way."""
        totals = self.totals()
        return (
            totals[FIELD_INDEX["fallback_cloud_to_device"]]
            + totals[FIELD_INDEX["fallback_device_to_cloud"]]
        )

    # --- figures -------------------------------------------------------------------------------

    def rate(self, name: MetricField) -> float | None:
        """Column `name` per event (cache_hits: the cache hit rate, errors: the error rate…)."""
        totals = self.totals()
        return ratio(totals[FIELD_INDEX[name]], totals[FIELD_INDEX["events"]])

    def share(self, route: str) -> float | None:
        """The share of events on `route` (device: α)."""
        return ratio(self.total("events", route), self.events)

    def fallback_rate(self) -> float | None:
        """Fallbacks either way per event."""
        return ratio(self.fallbacks, self.events)

    def latency_mean(self) -> float | None:
        """Mean latency in ms."""
        return self.rate("latency_sum_ms")

    def score_mean(self) -> float | None:
        """Mean complexity score of the events that carried one."""
        return ratio(self.total("score_sum"), self.total("score_count"))

    def tokens_per_task(self) -> dict[str, float | None]:
        """Mean tokens per task on each route (None where the route had no task; a task
        reported without `tokens` counts as 0)."""
        return {
            route: ratio(self.total("tokens_sum", route), self.total("events", route))
            for route in ROUTES
        }

    def latency_quantiles(self, qs: Iterable[float] = HEADLINE_QUANTILES) -> list[float | None]:
        """Latency quantiles in ms from the merged sketches (None without events)."""
        wanted = list(qs)
        if not self.latency_hist:
            return [None for _ in wanted]
        return LatencySketch.from_json(self.latency_hist).quantiles(wanted)

    def score_distribution(self) -> list[int]:
        """Events per complexity-score bin (sketch.SCORE_BINS bins, 0 first)."""
        return score_counts(self.score_hist)

    # --- quality signals (PROTOCOL.md extensions) -----------------------------------------------

    def draft_kept_rate(self) -> float | None:
        """The share of events reporting `refine_changed` (a draft-refine, or a shadow refine of
        a device answer) whose draft the cloud kept, over every route; None without reports."""
        return ratio(self.total("refine_kept"), self.total("refine_reported"))

    def device_kept(self) -> tuple[float | None, int]:
        """The draft-kept rate of the device route's reports alone (shadow refines: the cloud
        refined a device answer in the background) and their count: the device's quality
        below θ, measured (docs/lab.md, "Device quality")."""
        reported = int(self.total("refine_reported", "device"))
        return ratio(self.total("refine_kept", "device"), reported), reported

    def mean_quality(self) -> float | None:
        """The mean of the app's `quality` (carried by the event or sent later as feedback)."""
        return ratio(self.total("quality_sum"), self.total("quality_count"))

    def refine_edit_mean(self) -> float | None:
        """The mean `refine_edit_ratio` of the events that gave one."""
        return ratio(self.total("refine_edit_sum"), self.total("refine_edit_count"))

    def kept_curve(self) -> list[dict[str, Any]]:
        """Score → draft kept: per score bin with reports (by score), how many events reported
        `refine_changed`, how many of them the cloud kept, and the share kept. Needs the score
        histograms (rows read and added with `scores`); an event without a score is in
        `draft_kept_rate` but in no bin."""
        reported = score_counts(self.refine_hist)
        kept = score_counts(self.kept_hist)
        curve: list[dict[str, Any]] = []
        for index, count in enumerate(reported):
            if count <= 0:
                continue
            kept_count = min(kept[index], count)  # never above 1, even from a bad stored row
            curve.append(
                {
                    "score_from": index / SCORE_BINS,
                    "score_to": (index + 1) / SCORE_BINS,
                    "reported": count,
                    "kept": kept_count,
                    "kept_rate": kept_count / count,
                }
            )
        return curve

    def headline(self) -> dict[str, Any]:
        """The figures the metrics API and the dashboard both show, as they show them."""
        p50, p95, p99 = self.latency_quantiles()
        return {
            "events": self.events,
            "alpha": self.share("device"),
            "cloud_share": self.share("cloud"),
            "draft_refine_share": self.share("draft_refine"),
            "fallback_rate": self.fallback_rate(),
            "fallback_rates": {
                "cloud_to_device": self.rate("fallback_cloud_to_device"),
                "device_to_cloud": self.rate("fallback_device_to_cloud"),
            },
            "cache_hit_rate": self.rate("cache_hits"),
            "error_rate": self.rate("errors"),
            "privacy_violations": self.privacy_violations,
            "latency_ms": {"p50": p50, "p95": p95, "p99": p99},
            "draft_kept_rate": self.draft_kept_rate(),
            "mean_quality": self.mean_quality(),
            "refine_reported": int(self.total("refine_reported")),
            "quality_count": int(self.total("quality_count")),
        }


def figures_at(groups: dict[Key, Figures], key: Key) -> Figures:
    """The figures of `key` in `groups`, new (empty) ones the first time."""
    figures = groups.get(key)
    if figures is None:
        figures = groups[key] = Figures()
    return figures


def merged(figures: Iterable[Figures], *, latency: bool = True, scores: bool = True) -> Figures:
    """All of `figures` merged into new figures (their sketches too, unless told otherwise)."""
    total = Figures()
    for part in figures:
        total.merge(part, latency=latency, scores=scores)
    return total
