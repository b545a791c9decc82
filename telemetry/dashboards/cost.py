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

The saving against the stable version needs the rollout in progress: the candidate cohort's
tasks, priced at what the stable cohort's tasks cost per task, against what they did cost.
Both cohorts draw their devices from one hash of the device id, so their task mixes are alike
in expectation; the estimate's error is the cohorts' difference in mix (docs/lab.md, "Cost").
It is shown only past MIN_COMPARED_TASKS tasks in each cohort, with a 95% interval; otherwise
`cohorts_withheld` says why not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from routing_policies.pricing import CloudPrice, cost_report

from ..rollups import Figures

CLOUD_ROUTES: Final = ("cloud", "draft_refine")
# Tasks each cohort needs in the view before their costs per task are compared: below it, a
# handful of cloud calls more or less swings the candidate's change by tens of percent.
MIN_COMPARED_TASKS: Final = 200
# The interval's z (95%, two-sided).
_Z95: Final = 1.959964


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


def _change_interval(
    stable_calls: float, stable_events: int, candidate_calls: float, candidate_events: int
) -> tuple[float, float] | None:
    """A 95% interval of the candidate's change in cost per task, from its share of tasks that
    call the cloud against stable's (log of a ratio of two binomial shares, delta method; half
    a call added to a cohort without one). Each cohort's tokens per call are taken at their
    mean: the interval is of the calls, which drive the cost, not of the tokens' spread."""
    if not stable_calls:
        return None
    calls_c = max(candidate_calls, 0.5)
    share_s = min(stable_calls / stable_events, 1.0)
    share_c = min(calls_c / candidate_events, 1.0)
    variance = (1 - share_s) / stable_calls + (1 - share_c) / calls_c
    return math.exp(-_Z95 * math.sqrt(variance)), math.exp(_Z95 * math.sqrt(variance))


def _against_stable(
    cohorts: CohortCost | None, price: CloudPrice, spent: float
) -> tuple[float | None, dict[str, Any] | None, str | None]:
    """What the view would have cost had the candidate's tasks cost what stable's do, the
    per-task comparison behind it, and why there is none (a sentence; None when shown)."""
    if cohorts is None:
        return None, None, "no rollout in progress"
    candidate = f"v{cohorts.candidate_version}"
    stable_label = f"stable v{cohorts.stable_version}"
    fewest = min(cohorts.stable.events, cohorts.candidate.events)
    if fewest < MIN_COMPARED_TASKS:
        short = candidate if cohorts.candidate.events <= cohorts.stable.events else stable_label
        return (
            None,
            None,
            f"{short} has {fewest:,} task{'' if fewest == 1 else 's'} in this view, "
            f"{MIN_COMPARED_TASKS:,} per cohort needed",
        )
    stable_calls, _ = cloud_work(cohorts.stable)
    candidate_calls, _ = cloud_work(cohorts.candidate)
    stable_per_task = _spent(cohorts.stable, price) / cohorts.stable.events
    candidate_spent = _spent(cohorts.candidate, price)
    candidate_per_task = candidate_spent / cohorts.candidate.events
    stable = spent - candidate_spent + stable_per_task * cohorts.candidate.events
    ratio = candidate_per_task / stable_per_task if stable_per_task > 0 else None
    interval = _change_interval(
        stable_calls, cohorts.stable.events, candidate_calls, cohorts.candidate.events
    )
    low = high = None
    if ratio is not None and interval is not None:
        low, high = ratio * interval[0] - 1, ratio * interval[1] - 1
    return (
        stable,
        {
            "stable_version": cohorts.stable_version,
            "candidate_version": cohorts.candidate_version,
            "stable_events": cohorts.stable.events,
            "candidate_events": cohorts.candidate.events,
            "stable_per_task": stable_per_task,
            "candidate_per_task": candidate_per_task,
            "candidate_change": None if ratio is None else ratio - 1,
            "candidate_change_low": low,
            "candidate_change_high": high,
        },
        None,
    )


def cost_figures(
    *,
    figures: Figures,
    price: CloudPrice,
    first: datetime | None,
    last: datetime | None,
    cohorts: CohortCost | None = None,
) -> dict[str, Any]:
    """The cost of the cloud work in `figures`, whose events run from `first` to `last`: in
    the view, per hour and per day over that span, beside all-cloud and the stable version of
    the rollout in progress (`cohorts`), and the savings against both."""
    calls, tokens = cloud_work(figures)
    spent = price.cost(tokens=tokens, calls=calls)
    all_cloud = price.cost(tokens=figures.total("tokens_sum"), calls=figures.events)
    stable, per_task, withheld = _against_stable(cohorts, price, spent)
    report = cost_report(
        price=price, spent=spent, all_cloud=all_cloud, first=first, last=last, stable=stable
    )
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
        "cohorts_withheld": withheld,
        "min_compared_tasks": MIN_COMPARED_TASKS,
    }
