"""Which policy version each device runs: computed from the rollout, never stored per device.

PROTOCOL.md: `bucket = int(sha256(f"{salt}:{device_id}").hexdigest()[:8], 16) % 10000`; a device
gets the candidate when `bucket < stage_percent * 100`. Stages only ever add devices, so a
stage change reaches exactly the buckets between the old and the new percentage. The rule is
here once, in Python (`FleetAssignment.version_at`, in `edge_sdk.assignment`, which devices
run too) and in SQL (`BUCKET_SQL`).

A rollout with a holdback (docs/PROTOCOL.md, "Holdback") keeps the top `holdback` percent of
buckets on stable at the last stage: there the candidate's share is `100 - holdback`, so the
held-back devices are those a stage would have reached last, and completing the rollout moves
them too.
"""

from collections.abc import Mapping

from edge_sdk.assignment import BUCKETS, FleetAssignment, bucket

__all__ = ["BUCKETS", "BUCKET_SQL", "DeviceBucket", "FleetAssignment", "bucket"]

# `bucket` in PostgreSQL, so counting or paging a million devices never leaves the database. The
# salt is its one parameter (`%s`); `%%` is a literal `%` in Django's `extra()` SQL.
BUCKET_SQL = (
    "(('x' || substr(encode(sha256(convert_to(%s || ':' || device_id, 'UTF8')), 'hex'), 1, 8))"
    "::bit(32)::bigint %% 10000)"
)


class DeviceBucket:
    """One connected device's bucket, hashed once per rollout salt.

    A rollout keeps its salt for all its stages, so a stage change hashes nothing for a device
    whose socket stays open (bench/fanout: a SHA-256 per socket per push otherwise).
    """

    __slots__ = ("_bucket", "_salt", "attributes", "device_id")

    def __init__(self, device_id: str) -> None:
        self.device_id = device_id
        # What the device reported (as rules read them), set at its hello: a rollout scoped to
        # a segment reads them. None until then: outside every scope.
        self.attributes: Mapping[str, object] | None = None
        self._salt: str | None = None
        self._bucket = 0

    def version_under(self, assignment: FleetAssignment) -> int | None:
        """`assignment.version_for(device_id, attributes)`, without hashing again for a known
        salt."""
        if not assignment.in_scope(self.attributes):
            return assignment.stable
        if not assignment.splits:
            return assignment.version_at(0)
        if self._salt != assignment.salt:
            self._bucket = bucket(assignment.salt, self.device_id)
            self._salt = assignment.salt
        return assignment.version_at(self._bucket)
