"""Rollups: the one model of rollup rows, written and read.

- `schema`: the summed metric columns (METRIC_FIELDS) and the three levels (minute, hour,
  fleet hour) with their tables and keys.
- `fold`: the write side, events folded into tallies per key (the ingest worker, benchmarks).
- `planner`: which level and buckets answer a window.
- `reader`: rows of a level read in one query, typed (`RollupRow`).
- `figures`: mergeable figures of rows (`Figures`): shares, rates, means, quantiles.
- `sketch`: the mergeable latency sketch and the stored histograms.
"""

from .figures import Figures, figures_at, merged, ratio
from .fold import (
    SENSITIVE_TIER,
    EventLike,
    RollupAccumulator,
    Tally,
    UploadHandling,
    is_privacy_violation,
    left_device,
    merge_columns,
)
from .planner import WindowPlan, plan_window
from .reader import RollupRow, as_utc, read_rows, rows_to_compact
from .schema import (
    ALL_DEVICES,
    CELL_DIMENSIONS,
    FLEET_HOUR,
    HOUR,
    LEVELS,
    METRIC_FIELDS,
    MINUTE,
    ROUTES,
    Level,
    MetricField,
)
from .sketch import (
    LOG_GAMMA,
    MIN_VALUE,
    SCORE_BINS,
    ZERO_INDEX,
    LatencySketch,
    bucket_index,
    score_bin,
    score_counts,
    stored_histogram,
)

__all__ = [
    "ALL_DEVICES",
    "CELL_DIMENSIONS",
    "FLEET_HOUR",
    "HOUR",
    "LEVELS",
    "LOG_GAMMA",
    "METRIC_FIELDS",
    "MINUTE",
    "MIN_VALUE",
    "ROUTES",
    "SCORE_BINS",
    "SENSITIVE_TIER",
    "ZERO_INDEX",
    "EventLike",
    "Figures",
    "LatencySketch",
    "Level",
    "MetricField",
    "RollupAccumulator",
    "RollupRow",
    "Tally",
    "UploadHandling",
    "WindowPlan",
    "as_utc",
    "bucket_index",
    "figures_at",
    "is_privacy_violation",
    "left_device",
    "merge_columns",
    "merged",
    "plan_window",
    "ratio",
    "read_rows",
    "rows_to_compact",
    "score_bin",
    "score_counts",
    "stored_histogram",
]
