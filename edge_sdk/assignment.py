"""Which policy version a device runs, from its fleet's rollout state (docs/PROTOCOL.md).

The bucket rule and the stage/holdback arithmetic, once: the control plane
(`routing_policies.assignment`) counts and pushes with it, and a device that reads its fleet's
rollout state itself (the MQTT transport) computes its own version with it.

PROTOCOL.md: `bucket = int(sha256(f"{salt}:{device_id}").hexdigest()[:8], 16) % 10000`; a device
gets the candidate when `bucket < stage_percent * 100`. A rollout with a holdback (PROTOCOL.md,
"Holdback") keeps the top `holdback` percent of buckets on stable at the last stage.

A rollout scoped to a segment (docs/PROTOCOL.md, "Scoped rollouts") carries the segment's rule
(`scope`, pinned when the rollout started): a device outside it runs stable whatever its
bucket; inside it the rule above holds unchanged. `version_for(device_id, attributes)` is the
one function the server (with the attributes a device reported) and an MQTT device (with its
own) call.
"""

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from edge_sdk.segments import rule_matches

BUCKETS = 10_000


def bucket(salt: str, device_id: str) -> int:
    """The device's fixed place (0..9999) in a rollout with this salt."""
    digest = hashlib.sha256(f"{salt}:{device_id}".encode()).hexdigest()
    return int(digest[:8], 16) % BUCKETS


@dataclass(frozen=True, slots=True)
class FleetAssignment:
    """The fleet's routing state: its stable version and, during a rollout, the candidate.

    `percent` is the rollout's stage (0 when there is none); `holdback` the percent of buckets
    kept on stable at stage 100; `scope` the rule of the segment the rollout is scoped to (None:
    the whole fleet) and `scope_name` its name, shown only.
    """

    stable: int | None
    candidate: int | None = None
    salt: str = ""
    percent: int = 0
    rollout_id: int | None = None
    holdback: int = 0
    scope: Mapping[str, Any] | None = field(default=None, hash=False)
    scope_name: str = ""

    @property
    def candidate_share(self) -> int:
        """The percent of buckets on the candidate: the stage, less the holdback at 100%."""
        if self.candidate is None or self.percent <= 0:
            return 0
        return self.percent if self.percent < 100 else 100 - self.holdback

    def role(self, version: int) -> str:
        """What `version` is to the fleet: "candidate", "stable" or "other"."""
        if version == self.candidate:
            return "candidate"
        return "stable" if version == self.stable else "other"

    def assigned(self, *, devices: int, on_candidate: int) -> dict[int, int]:
        """How many of the fleet's `devices` each version is assigned to: `on_candidate` (the
        candidate's cohort) to the candidate, the rest to stable."""
        counts: dict[int, int] = {}
        if self.stable is not None:
            counts[self.stable] = devices - on_candidate
        if self.candidate is not None:
            counts[self.candidate] = on_candidate
        return counts

    @property
    def splits(self) -> bool:
        """Part of the fleet runs the candidate, the rest the stable version: buckets (and the
        scope, when there is one) decide."""
        share = self.candidate_share
        return 0 < share < 100 or (share > 0 and self.scope is not None)

    def in_scope(self, attributes: Mapping[str, object] | None) -> bool:
        """Whether a device with these attributes is inside the rollout's scope: always, for a
        rollout of the whole fleet; never, for a scoped one, when its attributes are not known
        (None), as for a device that did not report the attribute the rule reads."""
        if self.scope is None:
            return True
        return attributes is not None and rule_matches(self.scope, attributes)

    @property
    def candidate_buckets(self) -> int:
        """How many of the BUCKETS run the candidate: those below this number."""
        return self.candidate_share * BUCKETS // 100

    def version_at(self, device_bucket: int, *, in_scope: bool = True) -> int | None:
        """The version a device in this bucket (inside the scope, or not) must run."""
        share = self.candidate_share
        if share <= 0 or not in_scope:
            return self.stable
        if share >= 100:
            return self.candidate
        return self.candidate if device_bucket < self.candidate_buckets else self.stable

    def version_for(
        self, device_id: str, attributes: Mapping[str, object] | None = None
    ) -> int | None:
        """The version this device (with these attributes, as rules read them) must run: the
        bucket rule within the rollout's scope, stable outside it."""
        if not self.in_scope(attributes):
            return self.stable
        return self.version_at(bucket(self.salt, device_id) if self.splits else 0)

    def in_candidate_cohort(
        self, device_id: str, attributes: Mapping[str, object] | None = None
    ) -> bool:
        """True when the device is (at this stage) one of the candidate's devices."""
        return (
            self.candidate is not None and self.version_for(device_id, attributes) == self.candidate
        )

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form, carried by push messages between processes: each field by its
        name (the scope's rule as it is, a JSON object)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "FleetAssignment":
        """Inverse of `as_dict`."""
        scope = data.get("scope")
        return cls(
            scope=scope if isinstance(scope, Mapping) else None,
            scope_name=str(data.get("scope_name") or ""),
            stable=_opt_int(data.get("stable")),
            candidate=_opt_int(data.get("candidate")),
            salt=str(data.get("salt") or ""),
            percent=int(data.get("percent") or 0),
            rollout_id=_opt_int(data.get("rollout_id")),
            holdback=int(data.get("holdback") or 0),
        )


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)
