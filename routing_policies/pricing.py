"""A fleet's cloud price: what one cloud call and its tokens cost, read by every cost figure.

The playground, the backtest, the calibration and the dashboard price cloud work with this one
class, so a cost is never computed two ways.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

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


HOURS_PER_DAY: Final = 24.0
# The one name of the figure on every page (dashboard, backtest, calibration).
COST_PER_DAY_LABEL: Final = "Cloud cost / day"
# The shortest span a rate is taken over: a burst of events inside a few seconds, scaled to a
# day, would read as thousands of times what the fleet spends.
MIN_RATE_HOURS: Final = 1 / 60


def data_span_hours(first: datetime | None, last: datetime | None) -> float:
    """The span that holds data: from the first event to the last one, in hours (0 with
    fewer than two moments).

    Every cost per day in the product is the cost over this span scaled to 24 h (docs/lab.md,
    "Cost"): not over the nominal window (a fleet that reported for 2 h of a 7-day window
    would read at a 7-day rate), and not counting the minute in progress as a whole minute.
    """
    if first is None or last is None or last <= first:
        return 0.0
    return (last - first).total_seconds() / 3600


def span_text(hours: float) -> str:
    """`3 h 12 m`, `14 m 05 s`, `40 s`, `2 d 4 h`: a data span as the pages print it."""
    seconds = round(hours * 3600)
    days, rest = divmod(seconds, 86400)
    whole_hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {whole_hours} h"
    if whole_hours:
        return f"{whole_hours} h {minutes:02d} m"
    if minutes:
        return f"{minutes} m {secs:02d} s"
    return f"{secs} s"


def has_rate(hours: float) -> bool:
    """Whether a span of data `hours` long is long enough for a rate (MIN_RATE_HOURS)."""
    return hours >= MIN_RATE_HOURS


def _rates(window: float, hours: float) -> dict[str, float | None]:
    per_hour = window / hours if has_rate(hours) else None
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
    first: datetime | None,
    last: datetime | None,
    stable: float | None = None,
) -> dict[str, Any]:
    """A cost of the events from `first` to `last` (the span that holds data), per hour and
    per day, with the savings against all-cloud (every task a cloud call with its tokens) and
    against the stable version (`stable`: what the stable version costs for the same tasks;
    None when there is nothing to compare).

    The backtest, the calibration and the dashboard all report cost in this one shape, with
    its rate from `data_span_hours`, so a cost per day and a saving mean the same thing on
    every page (docs/lab.md, "Cost"). `per_hour` and `per_day` are None until the span is a
    minute long (MIN_RATE_HOURS).
    """
    hours = data_span_hours(first, last)
    return {
        "currency": price.currency,
        "label": COST_PER_DAY_LABEL,
        "hours": hours,
        "span": {
            "from": None if first is None else first.isoformat(),
            "to": None if last is None else last.isoformat(),
            "text": span_text(hours) if hours > 0 else None,
        },
        **_rates(spent, hours),
        "all_cloud": _rates(all_cloud, hours),
        "stable": None if stable is None else _rates(stable, hours),
        "saving_vs_all_cloud": _saving(all_cloud, spent),
        "saving_vs_stable": None if stable is None else _saving(stable, spent),
    }
