"""Every frame the push tier writes, and every message it passes between processes: one builder
each. Device frames are PROTOCOL.md's; push messages carry ids and version numbers, never
documents or model objects."""

import json
import time
from typing import Any

from ..assignment import FleetAssignment

_COMPACT = (",", ":")


# --- frames to devices (PROTOCOL.md) ----------------------------------------------------------


def rollout_of(assignment: FleetAssignment) -> dict[str, int] | None:
    """The `rollout` a `policy` frame names: the open rollout's id and stage, else null; and
    its `holdback` when it keeps one (docs/PROTOCOL.md, "Holdback": an added field)."""
    if assignment.rollout_id is None:
        return None
    out = {"id": assignment.rollout_id, "stage": assignment.percent}
    if assignment.holdback:
        out["holdback"] = assignment.holdback
    return out


def policy_frame(body: str, rollout: dict[str, Any] | None) -> str:
    """`{"type":"policy", …document…, "rollout": …}`, the document spliced in as cached text
    (its JSON without the outer braces: see `DocumentCache`)."""
    return f'{{"type":"policy",{body},"rollout":{json.dumps(rollout, separators=_COMPACT)}}}'


def policy_delta_frame(body: str, rollout: dict[str, Any] | None) -> str:
    """`{"type":"policy_delta", …delta…, "rollout": …}` (docs/PROTOCOL.md, "Policy deltas"),
    the delta spliced in as cached text like `policy_frame`'s document."""
    return f'{{"type":"policy_delta",{body},"rollout":{json.dumps(rollout, separators=_COMPACT)}}}'


def up_to_date_frame(version: int | None) -> str:
    """The answer to a `hello` that already names the device's version (or when none exists)."""
    return json.dumps({"type": "up_to_date", "version": version})


def cloud_pressure_frame(
    *, theta_offset: Any, until: float, now: float | None = None
) -> str | None:
    """The fleet-wide θ nudge with its seconds left, or None when less than a second is left."""
    ttl = int(until - (time.time() if now is None else now))
    if ttl < 1:
        return None
    return json.dumps({"type": "cloud_pressure", "theta_offset": theta_offset, "ttl_s": ttl})


def error_frame(code: str, detail: str, field: str | None = None) -> str:
    """An `error` frame (with the `field` at fault when known); the socket stays open."""
    frame: dict[str, Any] = {"type": "error", "code": code, "detail": detail}
    if field is not None:
        frame["field"] = field
    return json.dumps(frame)


# --- messages between processes (the push channel) --------------------------------------------


def _message(kind: str, *, fleet_id: int, **fields: Any) -> dict[str, Any]:
    """A push message: its kind, the fleet it is about, and its own fields (ids, numbers)."""
    return {"kind": kind, "fleet_id": fleet_id, **fields}


def assignment_message(
    *, fleet_id: int, assignment: FleetAssignment, reconcile: bool = False
) -> dict[str, Any]:
    """The fleet's assignment changed (or is re-sent by a process's reconcile)."""
    message = _message(
        "assignment",
        fleet_id=fleet_id,
        assignment=assignment.as_dict(),
        rollout=rollout_of(assignment),
        sent_at=time.time(),
    )
    if reconcile:
        message["reconcile"] = True
    return message


def cloud_pressure_message(*, fleet_id: int, theta_offset: float, until: float) -> dict[str, Any]:
    """A fleet-wide θ nudge until `until` (a timestamp)."""
    return _message("cloud_pressure", fleet_id=fleet_id, theta_offset=theta_offset, until=until)


def revoke_message(*, fleet_id: int, device_pk: int, token_hash: str) -> dict[str, Any]:
    """Close the device's socket opened with this token (revoked, or replaced by re-enrolment)."""
    return _message("revoke", fleet_id=fleet_id, device_pk=device_pk, token_hash=token_hash)


def superseded_message(*, fleet_id: int, device_pk: int, connected_at: float) -> dict[str, Any]:
    """The device connected again at `connected_at`: its older sockets, anywhere, are closed."""
    return _message("superseded", fleet_id=fleet_id, device_pk=device_pk, connected_at=connected_at)
