"""Schemathesis hooks of tests/integration/test_schemathesis.py (loaded by `st run` through
SCHEMATHESIS_HOOKS): what a generated request cannot know about the seeded data.

- The run authenticates as one enrolled device; revoking that device (a publisher may) would
  turn every later device request into a 401, so no case revokes it.
- A telemetry event is valid only for the device that sends it, at about the current time, for
  a published version of its fleet and that version's dimension values; positive cases get
  those values (their other fields stay generated), negative cases stay as generated.
- A figures filter `segment` names one of the fleet's segments (an unknown one is a 400 naming
  `segment`, tested in tests/unit/telemetry/dashboards); positive cases that send one name the
  seeded segment, negative cases stay as generated.
"""

import os
from datetime import UTC, datetime
from typing import Any

import schemathesis
from schemathesis import Case

DEVICE_ID = os.environ.get("SCHEMATHESIS_DEVICE_ID", "")
POLICY_VERSION = int(os.environ.get("SCHEMATHESIS_POLICY_VERSION", "1"))
CELL = os.environ.get("SCHEMATHESIS_CELL", "voice/interactive/normal").split("/")
SEGMENT = os.environ.get("SCHEMATHESIS_SEGMENT", "")
FILTERED_BY_SEGMENT = {
    "GET /api/v1/fleets/{slug}/dashboard",
    "GET /api/v1/metrics/fleets/{slug}/",
}


@schemathesis.hook
def map_path_parameters(context: Any, path_parameters: dict[str, Any]) -> dict[str, Any]:
    """Never revoke the device whose token the run uses: another id stands in for it."""
    if path_parameters and path_parameters.get("device_id") == DEVICE_ID:
        return {**path_parameters, "device_id": f"{DEVICE_ID}-other"}
    return path_parameters


@schemathesis.hook
def map_case(context: Any, case: Case) -> Case:
    """No case revokes this device (its id may be learnt from a device list); positive
    telemetry events speak for this device, now, about a version it can run."""
    if case.path_parameters and case.path_parameters.get("device_id") == DEVICE_ID:
        case.path_parameters = map_path_parameters(context, case.path_parameters)
    if case.meta is None or not case.meta.generation.mode.is_positive:
        return case
    if case.operation.label in FILTERED_BY_SEGMENT and "segment" in (case.query or {}):
        case.query = {**case.query, "segment": SEGMENT}
        return case
    if case.operation.label != "POST /api/v1/telemetry" or not isinstance(case.body, dict):
        return case
    now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    for event in case.body.get("events") or []:
        if isinstance(event, dict):
            event.update(
                {
                    "device_id": DEVICE_ID,
                    "ts": now,
                    "policy_version": POLICY_VERSION,
                    "task_type": CELL[0],
                    "latency_budget": CELL[1],
                    "privacy_tier": CELL[2],
                }
            )
    return case
