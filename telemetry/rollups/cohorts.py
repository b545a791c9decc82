"""What a cohort is, once, for every reader of rollups (dashboard lines and filter, metrics API).

Ingest attributes each event to `candidate` (its version was the candidate of a rollout open at
the event's time) or `stable` (any other event). A cohort as shown is one arm of the rollout a
view compares: the candidate cohort is that rollout's candidate's candidate-attributed events,
the stable cohort its stable version's stable-attributed events. An event of neither arm (an
older version, a rolled-back candidate still reported by a straggler, a past rollout's
candidate) is in no cohort. With no rollout to compare, every stable-attributed event is stable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

STABLE = "stable"
CANDIDATE = "candidate"


@dataclass(frozen=True, slots=True)
class CohortArms:
    """The version each cohort counts (None: every version attributed to that cohort)."""

    stable: int | None = None
    candidate: int | None = None

    @classmethod
    def of_rollout(cls, rollout: Any) -> CohortArms:
        """The two arms of `rollout` (None: no rollout compared)."""
        if rollout is None:
            return cls()
        return cls(stable=rollout.stable.number, candidate=rollout.candidate.number)

    def version(self, cohort: str) -> int | None:
        """The version `cohort` counts, None for every version."""
        return self.candidate if cohort == CANDIDATE else self.stable

    def cohort_of(self, cohort: str, version: int) -> str | None:
        """The cohort a rollup row of this attribution and version is in, None for neither."""
        wanted = self.version(cohort)
        return cohort if wanted is None or wanted == version else None

    def where(self, cohort: str) -> dict[str, Any]:
        """The rollup filter of `cohort`: its attribution and, with a rollout, its version."""
        wanted = self.version(cohort)
        return {"cohort": cohort} | ({} if wanted is None else {"policy_version": wanted})
