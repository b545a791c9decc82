"""What the fleet's cloud work costs, from rollups, priced by the fleet's `CloudPrice`.

A cloud call is a task on route `cloud` or `draft_refine` that was not answered from the
device's cache (a cache hit never leaves the device); its tokens are that route's `tokens_sum`,
less the cache hits' share of it (rollups sum tokens per route, not per cache outcome, so the
hits are assumed to carry the route's mean tokens). All-cloud prices every task of the window
as a cloud call with its tokens; the saving is what routing to the device keeps from that.
Fallbacks are not priced: a device task that fell back to the cloud is not in the rollups'
cloud routes (its route stays `device`).
A shadow refine (PROTOCOL.md extensions: a device answer the cloud also refined in the
background, `shadow_refines` of the device route) is one cloud call more; its tokens are
assumed to be the device route's mean tokens per task (the draft refined is that task's).
"""

from __future__ import annotations

from typing import Any, Final

from routing_policies.pricing import CloudPrice

from ..rollups import Figures

CLOUD_ROUTES: Final = ("cloud", "draft_refine")
HOURS_PER_DAY: Final = 24.0


def cloud_work(figures: Figures) -> tuple[float, float]:
    """(cloud calls, tokens sent with them) in `figures`, shadow refines included."""
    calls = 0.0
    tokens = 0.0
    for route in CLOUD_ROUTES:
        events = figures.total("events", route)
        if not events:
            continue
        called = events - figures.total("cache_hits", route)
        calls += called
        tokens += figures.total("tokens_sum", route) * called / events
    shadow = figures.total("shadow_refines", "device")
    device_events = figures.total("events", "device")
    if shadow and device_events:
        calls += shadow
        tokens += figures.total("tokens_sum", "device") * shadow / device_events
    return calls, tokens


def cost_figures(*, figures: Figures, price: CloudPrice, hours: float) -> dict[str, Any]:
    """The cost of the cloud work in `figures`, which span `hours`: in the window, per hour
    and per day, beside all-cloud and the saving against it."""
    calls, tokens = cloud_work(figures)
    spent = price.cost(tokens=tokens, calls=calls)
    all_cloud = price.cost(tokens=figures.total("tokens_sum"), calls=figures.events)
    per_hour = spent / hours if hours > 0 else None
    all_cloud_per_hour = all_cloud / hours if hours > 0 else None
    return {
        "currency": price.currency,
        "price": {"per_1k_tokens": price.per_1k_tokens, "per_call": price.per_call},
        "hours": hours,
        "cloud_calls": calls,
        "cloud_tokens": tokens,
        "window": spent,
        "per_hour": per_hour,
        "per_day": None if per_hour is None else per_hour * HOURS_PER_DAY,
        "all_cloud": {
            "window": all_cloud,
            "per_hour": all_cloud_per_hour,
            "per_day": None if all_cloud_per_hour is None else all_cloud_per_hour * HOURS_PER_DAY,
        },
        "saving": all_cloud - spent,
        "saving_share": (all_cloud - spent) / all_cloud if all_cloud > 0 else None,
    }
