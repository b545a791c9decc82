"""Times of scheduled changes: entered and shown in the user's time zone, stored in UTC."""

from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from controlplane.exceptions import ValidationFailed

from .models import ScheduledChange


def zone(name: str) -> ZoneInfo:
    """The IANA time zone `name` (`Europe/Berlin`), or a refusal naming `time_zone`."""
    known = isinstance(name, str) and (name == "UTC" or name in available_timezones())
    if not known:
        raise ValidationFailed(
            f"{str(name)[:64]!r} is not a time zone.",
            details=[{"field": "time_zone", "message": "an IANA name such as Europe/Berlin"}],
        )
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValidationFailed(
            "Unknown time zone.", details=[{"field": "time_zone", "message": "unknown"}]
        ) from None


def with_offset(text: str, time_zone: str) -> str:
    """`2026-12-01T14:00` typed in `time_zone` (a page's local time) as the API takes a time,
    `2026-12-01T14:00:00+01:00`. Text that is no date and time, or has its offset already, and a
    zone that is no zone are left as typed: the input serializer refuses them, naming the field."""
    try:
        naive = datetime.fromisoformat(text.strip())
        where = zone(time_zone)
    except (TypeError, ValueError, ValidationFailed):
        return text
    return text if naive.tzinfo is not None else naive.replace(tzinfo=where).isoformat()


def in_zone(moment: datetime, time_zone: str) -> str:
    """`2026-12-01 15:00 Europe/Berlin` for a stored UTC time."""
    return f"{moment.astimezone(zone(time_zone)):%Y-%m-%d %H:%M} {time_zone}"


WORDS = {
    ScheduledChange.Kind.PUBLISH: "publish the draft (revision {revision})",
    ScheduledChange.Kind.ROLLOUT_START: "start a rollout of v{version}",
    ScheduledChange.Kind.ROLLOUT_ADVANCE: "advance the rollout to {to_stage}%",
    ScheduledChange.Kind.SWITCH: "switch the fleet to v{version}",
    ScheduledChange.Kind.CLOUD_PRESSURE: "cloud pressure θ{theta_offset:+.2f} for {ttl_s} s",
}


def describe_what(schedule: ScheduledChange) -> str:
    """`advance the rollout to 25% if the guards are healthy` (what, without when)."""
    what = WORDS[ScheduledChange.Kind(schedule.kind)].format(**schedule.params)
    if schedule.params.get("require_healthy_guards"):
        what += " if the guards are healthy"
    if schedule.params.get("holdback"):
        what += f", holding {schedule.params['holdback']}% back on stable at 100%"
    return what


def describe(schedule: ScheduledChange) -> str:
    """`start a rollout of v3 at 2026-12-01 15:00 Europe/Berlin` (what and when)."""
    return f"{describe_what(schedule)} at {in_zone(schedule.run_at, schedule.time_zone)}"
