"""Which policy version each device runs: computed from the rollout, never stored per device.

PROTOCOL.md: `bucket = int(sha256(f"{salt}:{device_id}").hexdigest()[:8], 16) % 10000`; a device
gets the candidate when `bucket < stage_percent * 100`. Stages only ever add devices, so a
stage change reaches exactly the buckets between the old and the new percentage.
"""

import hashlib
from dataclasses import dataclass

BUCKETS = 10_000


def bucket(salt: str, device_id: str) -> int:
    """The device's fixed place (0..9999) in a rollout with this salt."""
    digest = hashlib.sha256(f"{salt}:{device_id}".encode()).hexdigest()
    return int(digest[:8], 16) % BUCKETS


@dataclass(frozen=True, slots=True)
class FleetAssignment:
    """The fleet's routing state: its stable version and, during a rollout, the candidate.

    `percent` is the share of buckets on the candidate (0 when there is none).
    """

    stable: int | None
    candidate: int | None = None
    salt: str = ""
    percent: int = 0
    rollout_id: int | None = None

    def version_for(self, device_id: str) -> int | None:
        """The version this device must run."""
        if self.candidate is None or self.percent <= 0:
            return self.stable
        if self.percent >= 100:
            return self.candidate
        return self.candidate if bucket(self.salt, device_id) < self.percent * 100 else self.stable

    def in_candidate_cohort(self, device_id: str) -> bool:
        """True when the device is (at this stage) one of the candidate's devices."""
        return self.candidate is not None and self.version_for(device_id) == self.candidate

    def as_dict(self) -> dict[str, int | str | None]:
        """JSON-friendly form, carried by push messages between processes."""
        return {
            "stable": self.stable,
            "candidate": self.candidate,
            "salt": self.salt,
            "percent": self.percent,
            "rollout_id": self.rollout_id,
        }

    @classmethod
    def from_dict(cls, data: dict[str, int | str | None]) -> "FleetAssignment":
        """Inverse of `as_dict`."""
        return cls(
            stable=_opt_int(data.get("stable")),
            candidate=_opt_int(data.get("candidate")),
            salt=str(data.get("salt") or ""),
            percent=int(data.get("percent") or 0),
            rollout_id=_opt_int(data.get("rollout_id")),
        )


def _opt_int(value: int | str | None) -> int | None:
    return None if value is None else int(value)
