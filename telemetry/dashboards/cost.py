"""What the fleet's cloud work costs, from rollups, priced by the fleet's `CloudPrice`.

A cloud call is a task on route `cloud` or `draft_refine` that was not answered from the
device's cache (a cache hit never leaves the device); its tokens are that route's `tokens_sum`,
less the cache hits' share of it (rollups sum tokens per route, not per cache outcome, so the
hits are assumed to carry the route's mean tokens). All-cloud prices every task of the window
as a cloud call with its tokens; the saving is what routing to the device keeps from that.
A device task that fell back to the cloud (`fallback_device_to_cloud`; its route stays `device`)
made a cloud call too: priced as one, with the device route's mean tokens per task. A cloud
call that failed over to the device (`fallback_cloud_to_device`) is priced as its route's call
already, whether or not the provider bills a call that timed out.
A shadow refine (PROTOCOL.md extensions: a device answer the cloud also refined in the
background, `shadow_refines` of the device route) is one cloud call more; its tokens are
assumed to be the device route's mean tokens per task (the draft refined is that task's).

The saving against the stable version needs a rollout in the view: the candidate cohort's
tasks, priced at what the stable cohort's tasks cost per task, against what they did cost.
Both cohorts draw their devices from one hash of the device id, so their task mixes are alike
in expectation; the estimate's error is the cohorts' difference in mix (docs/lab.md, "Cost").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from routing_policies.pricing import CloudPrice, cost_report

from ..rollups import Figures

CLOUD_ROUTES: Final = ("cloud", "draft_refine")


@dataclass(frozen=True, slots=True, kw_only=True)
class CohortCost:
    """The two cohorts of the rollout the view compares, for the saving against stable."""

    stable: Figures
    candidate: Figures
    stable_version: int | None
    candidate_version: int | None


def cloud_work(figures: Figures) -> tuple[float, float]:
    """(cloud calls, tokens sent with them) in `figures`, shadow refines and fallbacks to the
    cloud included."""
    calls = 0.0
    tokens = 0.0
    for route in CLOUD_ROUTES:
        events = figures.total("events", route)
        if not events:
            continue
        called = events - figures.total("cache_hits", route)
        calls += called
        tokens += figures.total("tokens_sum", route) * called / events
    # Shadow refines and fallbacks to the cloud: device tasks that reached the cloud too.
    extra = figures.total("shadow_refines", "device") + figures.total(
        "fallback_device_to_cloud", "device"
    )
    device_events = figures.total("events", "device")
    if extra and device_events:
        calls += extra
        tokens += figures.total("tokens_sum", "device") * extra / device_events
    return calls, tokens


def _spent(figures: Figures, price: CloudPrice) -> float:
    calls, tokens = cloud_work(figures)
    return price.cost(tokens=tokens, calls=calls)


def _against_stable(
    cohorts: CohortCost | None, price: CloudPrice, spent: float
) -> tuple[float | None, dict[str, Any] | None]:
    """What the view would have cost had the candidate's tasks cost what stable's do, and the
    per-task comparison behind it; (None, None) without two cohorts that both have tasks."""
    if cohorts is None or not cohorts.stable.events or not cohorts.candidate.events:
        return None, None
    stable_per_task = _spent(cohorts.stable, price) / cohorts.stable.events
    candidate_spent = _spent(cohorts.candidate, price)
    candidate_per_task = candidate_spent / cohorts.candidate.events
    stable = spent - candidate_spent + stable_per_task * cohorts.candidate.events
    return stable, {
        "stable_version": cohorts.stable_version,
        "candidate_version": cohorts.candidate_version,
        "stable_events": cohorts.stable.events,
        "candidate_events": cohorts.candidate.events,
        "stable_per_task": stable_per_task,
        "candidate_per_task": candidate_per_task,
        "candidate_change": (
            candidate_per_task / stable_per_task - 1 if stable_per_task > 0 else None
        ),
    }


def cost_figures(
    *, figures: Figures, price: CloudPrice, hours: float, cohorts: CohortCost | None = None
) -> dict[str, Any]:
    """The cost of the cloud work in `figures`, which span `hours`: in the window, per hour
    and per day, beside all-cloud and the stable version, and the savings against both."""
    calls, tokens = cloud_work(figures)
    spent = price.cost(tokens=tokens, calls=calls)
    all_cloud = price.cost(tokens=figures.total("tokens_sum"), calls=figures.events)
    stable, per_task = _against_stable(cohorts, price, spent)
    report = cost_report(price=price, spent=spent, all_cloud=all_cloud, hours=hours, stable=stable)
    saving = report["saving_vs_all_cloud"]
    return {
        **report,
        "price": {"per_1k_tokens": price.per_1k_tokens, "per_call": price.per_call},
        "cloud_calls": calls,
        "cloud_tokens": tokens,
        # The saving against all-cloud under the names the dashboard API has had since it
        # first priced cloud work.
        "saving": saving["amount"],
        "saving_share": saving["share"],
        "cohorts": per_task,
    }
