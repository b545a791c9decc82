"""What the fleet's devices run, and so what the lab opens on (docs/lab.md).

The lab opens on the draft when one is open (what an editor is changing), else on what the
devices run: the stable version (during a rollout, the stable cohort's; the candidate runs on
the rest), and only for a fleet no device has taken a version from yet on the latest published
version. Every page names the version it opens on and what runs where.
"""

from __future__ import annotations

from dataclasses import dataclass

from routing_policies.models import Fleet, FleetRouting, PolicyVersion
from routing_policies.selectors import draft_get, latest_published, open_rollout

__all__ = ["Running", "lab_version_default", "running_versions"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Running:
    """The versions devices run now: stable, and during a rollout the candidate and its share."""

    stable: PolicyVersion | None
    candidate: PolicyVersion | None = None
    candidate_percent: int = 0

    def role_of(self, version: PolicyVersion) -> str:
        """Who runs `version`, in words ("" when no device does)."""
        if version.is_draft:
            return ""
        if self.candidate is not None and version.pk == self.candidate.pk:
            return f"the candidate cohort runs it ({self.candidate_percent}% of devices)"
        if self.stable is not None and version.pk == self.stable.pk:
            if self.candidate is not None:
                return (
                    f"the stable cohort runs it ({100 - self.candidate_percent}% of devices; "
                    f"v{self.candidate.number} is rolling out to the rest)"
                )
            return "what devices run (stable)"
        return ""

    def short_role_of(self, version: PolicyVersion) -> str:
        """Who runs `version`, as a version picker says it ("" when no device does)."""
        if self.candidate is not None and version.pk == self.candidate.pk:
            return f"candidate cohort ({self.candidate_percent}%)"
        if self.stable is not None and version.pk == self.stable.pk:
            if self.candidate is not None:
                return f"stable cohort ({100 - self.candidate_percent}%)"
            return "stable: devices run it"
        return ""

    def sentence(self) -> str:
        """What devices run, for a page that opened on something else."""
        if self.stable is None:
            return "no device runs a version yet"
        text = f"devices run v{self.stable.number} (stable)"
        if self.candidate is not None:
            text = (
                f"devices run v{self.stable.number} (stable cohort, "
                f"{100 - self.candidate_percent}%) and v{self.candidate.number} (candidate "
                f"cohort, {self.candidate_percent}%)"
            )
        return text


def running_versions(*, fleet: Fleet) -> Running:
    """The stable version and, during a rollout, the candidate with its share of devices."""
    routing = FleetRouting.objects.select_related("stable_version").filter(fleet=fleet).first()
    stable = routing.stable_version if routing is not None else None
    rollout = open_rollout(fleet.pk)
    if rollout is None:
        return Running(stable=stable)
    return Running(
        stable=rollout.stable,
        candidate=rollout.candidate,
        candidate_percent=rollout.candidate_share,
    )


def lab_version_default(*, fleet: Fleet) -> PolicyVersion | None:
    """What the lab opens on: the draft, else what devices run (stable), else the latest."""
    draft = draft_get(fleet=fleet)
    if draft is not None:
        return draft
    stable = running_versions(fleet=fleet).stable
    return stable or latest_published(fleet=fleet)
