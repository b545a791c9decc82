"""What the rollup tables hold: the summed metric columns, the sketches and the three levels.

Every summed column of the minute, hour and fleet-hour rollups is named once, in
`MetricField`; the fold that writes rows, the compaction that merges them, the reader and
the figures built from them all go by this list, so a new summed column is added here (and
to `telemetry.models.RollupMetrics`, whose fields a test compares with this list).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, get_args

from ..models import FleetHourRollup, HourRollup, MinuteRollup, RollupMetrics

MetricField = Literal[
    "events",
    "fallback_cloud_to_device",
    "fallback_device_to_cloud",
    "cache_hits",
    "errors",
    "privacy_violations",
    "latency_sum_ms",
    "score_count",
    "score_sum",
    "tokens_sum",
    # PROTOCOL.md extensions, the quality signals (docs/telemetry.md): events that report
    # `refine_changed`, those where the cloud kept the draft (`refine_changed` false), the
    # summed `refine_edit_ratio` and how many gave one, the app's `quality` (from the event or
    # from late feedback) and the device-route events the cloud also refined in the background.
    "refine_reported",
    "refine_kept",
    "refine_edit_sum",
    "refine_edit_count",
    "quality_count",
    "quality_sum",
    "shadow_refines",
]
METRIC_FIELDS: Final[tuple[MetricField, ...]] = get_args(MetricField)
# Where each summed column stands in a row's `sums` (RollupRow, Figures).
FIELD_INDEX: Final[dict[MetricField, int]] = {name: i for i, name in enumerate(METRIC_FIELDS)}
FLOAT_FIELDS: Final = frozenset({"latency_sum_ms", "score_sum", "refine_edit_sum", "quality_sum"})
# Nothing summed yet: zeros of each column's type.
ZERO_SUMS: Final[tuple[float, ...]] = tuple(
    0.0 if name in FLOAT_FIELDS else 0 for name in METRIC_FIELDS
)
# The mergeable sketches: {"<log bucket>": count} (sketch.py) and {"<score bin>": count}:
# the scores of all events, of those reporting `refine_changed`, and of those the cloud kept.
HISTOGRAM_FIELDS: Final = ("latency_hist", "score_hist", "refine_hist", "kept_hist")
# The histograms keyed by score bin (read with `scores=True`).
SCORE_HISTOGRAMS: Final = ("score_hist", "refine_hist", "kept_hist")

ROUTES: Final = ("device", "cloud", "draft_refine")
CELL_DIMENSIONS: Final = ("task_type", "latency_budget", "privacy_tier")
# Every level is also keyed by `segment`: 0 for the all-devices rows, else one of the fleet's
# named segments' ids (telemetry.models.segment_field); a read names one (read_rows).
ALL_DEVICES: Final = 0
CELL_KEY: Final = ("policy_version", "cohort", *CELL_DIMENSIONS, "route", "segment")
FLEET_KEY: Final = ("policy_version", "cohort", "route", "decided_by", "segment")


@dataclass(frozen=True, slots=True)
class Level:
    """One rollup table: its model, time column and key columns (after fleet and time)."""

    name: str
    model: type[RollupMetrics]
    time_column: str
    key_columns: tuple[str, ...]

    @property
    def table(self) -> str:
        """The table's name in SQL."""
        return self.model._meta.db_table

    @property
    def has_cell(self) -> bool:
        """Whether rows are kept per cell (task type × latency budget × privacy tier)."""
        return "task_type" in self.key_columns


MINUTE: Final = Level("minute", MinuteRollup, "minute", CELL_KEY)
HOUR: Final = Level("hour", HourRollup, "hour", CELL_KEY)
FLEET_HOUR: Final = Level("fleet_hour", FleetHourRollup, "hour", FLEET_KEY)
LEVELS: Final = (MINUTE, HOUR, FLEET_HOUR)
