"""Scenarios: what happens to the simulated fleet's world over time.

Each is a pure function of the seconds since the fleet started. The disturbances repeat on
a cycle (calm, ramp, disturbed, recovery), so a long-running demo shows them again and again
and a short run (`--duration 60`) sees one.

- `steady`: nothing happens; links, loads and the cloud keep their usual figures.
- `network-degradation`: after 30 s calm, over 15 s every link's RTT triples, bandwidth drops
  to a quarter and offline spells come six times as often; 60 s later it recovers (15 s).
  θ's network raise keeps more work on devices; α rises, fallbacks show up.
- `cloud-overload`: after 30 s calm the cloud loses three quarters of its capacity for 60 s:
  cloud latency climbs, timeouts fall back to devices (`cloud_to_device`), and a
  `cloud_pressure` nudge from the control plane visibly brings latency back down.
- `buggy-candidate`: devices that run the candidate version use a small model that is less
  confident (`workload.BUGGY_MODEL`): a rollout of it pushes that cohort's cloud share from
  about 30% to about 70%, the seed's alarm case. Which version is the candidate: see
  `BuggyRule`.
- `degraded-model`: devices that run the candidate version use a device model whose drafts
  the cloud keeps less often (`quality.DEGRADED_QUALITY`: the keep rate 30 points lower at
  every score), while its confidence, and so the routing, stays the same: latency and cloud
  share look fine, only the quality signals (refine_changed, quality) show the regression.
  The candidate is chosen as for buggy-candidate (`BuggyRule`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from .models import NetworkConditions

__all__ = ["SCENARIOS", "BuggyRule", "Scenario", "scenario_named"]

CALM_S: Final = 30.0
RAMP_S: Final = 15.0
DISTURBED_S: Final = 60.0
CYCLE_S: Final = CALM_S + RAMP_S + DISTURBED_S + RAMP_S


def disturbance(elapsed_s: float) -> float:
    """0 when calm, 1 when fully disturbed, linear on the ramps; repeats every CYCLE_S."""
    t = elapsed_s % CYCLE_S
    if t < CALM_S:
        return 0.0
    t -= CALM_S
    if t < RAMP_S:
        return t / RAMP_S
    t -= RAMP_S
    if t < DISTURBED_S:
        return 1.0
    t -= DISTURBED_S
    return max(0.0, 1.0 - t / RAMP_S)


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    """A named world: network conditions and cloud capacity over time, and whether a
    candidate version runs the less confident model."""

    name: str
    description: str
    degraded: NetworkConditions = field(default_factory=NetworkConditions)
    overloaded_capacity: float = 1.0  # the cloud's capacity factor when fully disturbed
    buggy_candidate: bool = False
    degraded_candidate: bool = False  # the candidate's device model drafts worse answers

    @property
    def has_candidate(self) -> bool:
        """Whether devices on the candidate version run another device model."""
        return self.buggy_candidate or self.degraded_candidate

    def network(self, elapsed_s: float) -> NetworkConditions:
        """Network conditions `elapsed_s` into the run."""
        level = disturbance(elapsed_s)
        if level == 0.0:
            return NetworkConditions()
        return NetworkConditions(
            rtt_factor=1.0 + (self.degraded.rtt_factor - 1.0) * level,
            bandwidth_factor=1.0 + (self.degraded.bandwidth_factor - 1.0) * level,
            offline_factor=1.0 + (self.degraded.offline_factor - 1.0) * level,
        )

    def cloud_capacity(self, elapsed_s: float) -> float:
        """The cloud's capacity factor `elapsed_s` into the run."""
        return 1.0 + (self.overloaded_capacity - 1.0) * disturbance(elapsed_s)


SCENARIOS: Final = {
    scenario.name: scenario
    for scenario in (
        Scenario(name="steady", description="usual links, loads and cloud capacity"),
        Scenario(
            name="network-degradation",
            description="RTT x3, bandwidth /4, offline spells x6 for a minute in every two",
            degraded=NetworkConditions(rtt_factor=3.0, bandwidth_factor=0.25, offline_factor=6.0),
        ),
        Scenario(
            name="cloud-overload",
            description="the cloud loses 3/4 of its capacity for a minute in every two",
            overloaded_capacity=0.25,
        ),
        Scenario(
            name="buggy-candidate",
            description="devices on the candidate version run a less confident small model",
            buggy_candidate=True,
        ),
        Scenario(
            name="degraded-model",
            description="devices on the candidate version run a device model whose drafts "
            "the cloud keeps 30 points less often",
            degraded_candidate=True,
        ),
    )
}


def scenario_named(name: str) -> Scenario:
    """The scenario called `name`; ValueError naming the choices otherwise."""
    try:
        return SCENARIOS[name]
    except KeyError:
        raise ValueError(f"unknown scenario {name!r}; choose one of {sorted(SCENARIOS)}") from None


@dataclass(frozen=True, slots=True, kw_only=True)
class BuggyRule:
    """Which policy versions are the candidate (the buggy model of buggy-candidate, the
    degraded model of degraded-model).

    `version` names it exactly (`--buggy-version N`). Otherwise every version newer than
    `stable` is the candidate (`--stable-version N`; `manage.py simulate_fleet` passes the
    fleet's stable version). With neither, `stable` is the lowest version the fleet's devices
    run once the first of them has a policy (the simulator fills it in then).
    """

    version: int | None = None
    stable: int | None = None

    def is_buggy(self, policy_version: int | None) -> bool:
        """True when a device running `policy_version` uses the buggy model."""
        if policy_version is None:
            return False
        if self.version is not None:
            return policy_version == self.version
        return self.stable is not None and policy_version > self.stable
