"""When the autopilot runs: daily at `run_at` in the objective's time zone, never inside a
quiet period (local "HH:MM"–"HH:MM" windows, one may cross midnight)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

__all__ = ["in_quiet_period", "next_run"]


def _minutes(text: str) -> int:
    hours, minutes = text.split(":")
    return int(hours) * 60 + int(minutes)


def in_quiet_period(
    moment: datetime, *, time_zone: str, quiet_periods: Iterable[Mapping[str, str]]
) -> Mapping[str, str] | None:
    """The quiet period `moment` falls in (local time), or None."""
    local = moment.astimezone(ZoneInfo(time_zone))
    now = local.hour * 60 + local.minute
    for period in quiet_periods:
        start, end = _minutes(period["from"]), _minutes(period["to"])
        inside = start <= now < end if start <= end else (now >= start or now < end)
        if inside:
            return period
    return None


def next_run(
    *,
    after: datetime,
    run_at: time,
    time_zone: str,
    quiet_periods: Iterable[Mapping[str, str]] = (),
) -> datetime:
    """The first daily `run_at` (local) strictly after `after` that is not in a quiet period
    (one falling in one moves to the period's end), in UTC."""
    zone = ZoneInfo(time_zone)
    periods = list(quiet_periods)
    local = after.astimezone(zone)
    for days in range(0, 8):
        day = (local + timedelta(days=days)).date()
        candidate = datetime.combine(day, run_at, tzinfo=zone)
        for _ in range(len(periods) + 1):
            period = in_quiet_period(candidate, time_zone=time_zone, quiet_periods=periods)
            if period is None:
                break
            end = _minutes(period["to"])
            moved = datetime.combine(candidate.date(), time(end // 60, end % 60), tzinfo=zone)
            candidate = moved if moved > candidate else moved + timedelta(days=1)
        if candidate > after:
            return candidate.astimezone(UTC)
    return (after + timedelta(days=1)).astimezone(UTC)
