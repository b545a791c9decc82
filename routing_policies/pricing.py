"""A fleet's cloud price: what one cloud call and its tokens cost, read by every cost figure.

The playground, the backtest, the calibration and the dashboard price cloud work with this one
class, so a cost is never computed two ways.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .policies.models import Fleet

# Bounds of a price a publisher may set (currency units): far above any real price, low enough
# that a cost over a year of traffic stays a plain float.
MAX_PRICE_PER_1K_TOKENS = 1000.0
MAX_PRICE_PER_CALL = 1000.0


@dataclass(frozen=True, slots=True, kw_only=True)
class CloudPrice:
    """The fleet's price of cloud work: per 1,000 tokens sent and per cloud call."""

    per_1k_tokens: float  # currency units per 1,000 tokens sent to the cloud
    per_call: float  # per cloud call (route cloud or draft_refine)
    currency: str = "USD"

    @classmethod
    def of_fleet(cls, fleet: Fleet) -> CloudPrice:
        """The price the fleet's publisher set (defaults: 0.002 per 1k tokens, 0 per call)."""
        return cls(
            per_1k_tokens=fleet.cloud_price_per_1k_tokens, per_call=fleet.cloud_price_per_call
        )

    def cost(self, *, tokens: float, calls: float) -> float:
        """The cost of `calls` cloud calls carrying `tokens` tokens in all."""
        return tokens / 1000.0 * self.per_1k_tokens + calls * self.per_call


def price_problem(value: object, *, maximum: float) -> str | None:
    """Why `value` is not a price (a finite JSON number in [0, maximum]); None when it is."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"must be a JSON number (got {type(value).__name__})"
    if not math.isfinite(value):
        return "must be a finite number"
    if not 0 <= value <= maximum:
        return f"must be between 0 and {maximum:g} (got {value!r})"
    return None


HOURS_PER_DAY = 24.0


def _rates(window: float, hours: float) -> dict[str, float | None]:
    per_hour = window / hours if hours > 0 else None
    return {
        "window": window,
        "per_hour": per_hour,
        "per_day": None if per_hour is None else per_hour * HOURS_PER_DAY,
    }


def _saving(baseline: float, spent: float) -> dict[str, float | None]:
    return {
        "amount": baseline - spent,
        "share": (baseline - spent) / baseline if baseline > 0 else None,
    }


def cost_report(
    *,
    price: CloudPrice,
    spent: float,
    all_cloud: float,
    hours: float,
    stable: float | None = None,
) -> dict[str, Any]:
    """A cost over a span of `hours`, per hour and per day, with the savings against all-cloud
    (every task a cloud call with its tokens) and against the stable version (`stable`: what
    the stable version costs for the same tasks; None when there is nothing to compare).

    The backtest, the calibration and the dashboard all report cost in this one shape, so a
    saving means the same thing on every page (docs/lab.md, "Cost").
    """
    return {
        "currency": price.currency,
        "hours": hours,
        **_rates(spent, hours),
        "all_cloud": _rates(all_cloud, hours),
        "stable": None if stable is None else _rates(stable, hours),
        "saving_vs_all_cloud": _saving(all_cloud, spent),
        "saving_vs_stable": None if stable is None else _saving(stable, spent),
    }
