"""Which rollup rows answer a window: minute buckets up to 6 hours, hour buckets beyond.

A window is a number of whole buckets ending with the current (partial) one: "1h" is the
current minute and the 59 before it, "24h" the current hour and the 23 before it. Hour windows
read the hour rollups when the cell matters (grouped or filtered by it) and the fleet-hour
rollups, which have no cell and so far fewer rows, otherwise. The metrics API, the dashboard
and the benchmarks plan with this one function.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final, Literal

from .schema import FLEET_HOUR, HOUR, MINUTE, Level

MINUTE_RESOLUTION_UP_TO: Final = timedelta(hours=6)
MINUTE_STEP: Final = timedelta(minutes=1)
HOUR_STEP: Final = timedelta(hours=1)


@dataclass(frozen=True, slots=True)
class WindowPlan:
    """The buckets of a window: the first, the current (last, partial) one, and now."""

    start: datetime
    current: datetime
    end: datetime
    step: timedelta

    @property
    def resolution(self) -> Literal["minute", "hour"]:
        """`minute` or `hour`."""
        return "minute" if self.step == MINUTE_STEP else "hour"

    @property
    def buckets(self) -> int:
        """How many buckets the window has (the last one is the current, partial one)."""
        return (self.current - self.start) // self.step + 1

    def level(self, *, cell_level: bool) -> Level:
        """The rollup table to read: minutes; hours with the cell, or fleet hours without."""
        if self.resolution == "minute":
            return MINUTE
        return HOUR if cell_level else FLEET_HOUR

    def bucket_index(self, moment: datetime) -> int:
        """The bucket (0 … buckets-1) holding `moment` (an aware datetime), clamped."""
        index = int((moment - self.start).total_seconds() // self.step.total_seconds())
        return min(max(index, 0), self.buckets - 1)


def plan_window(window: timedelta, *, now: datetime) -> WindowPlan:
    """The buckets of `window` ending with the one holding `now`."""
    now = now.astimezone(UTC)
    if window <= MINUTE_RESOLUTION_UP_TO:
        current = now.replace(second=0, microsecond=0)
        return WindowPlan(current - (window - MINUTE_STEP), current, now, MINUTE_STEP)
    current = now.replace(minute=0, second=0, microsecond=0)
    hours = max(1, -(-window // HOUR_STEP))
    return WindowPlan(current - HOUR_STEP * (hours - 1), current, now, HOUR_STEP)
