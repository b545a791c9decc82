"""The backtests page's figures, formatted: one row per figure, one column per side."""

from __future__ import annotations

from typing import Any

from django.http import QueryDict

from routing_policies.pricing import COST_PER_DAY_LABEL

from .models import Backtest, BacktestStatus

_ROUTE_NAMES = {"device": "device", "cloud": "cloud", "draft_refine": "draft-refine"}


def form_lists(post: QueryDict) -> QueryDict:
    """The start form with its comma-separated fields (cells, versions) posted once per item,
    as the API's lists take them; a blank one left out."""
    posted = post.copy()
    for name in ("cells", "versions"):
        items = [item.strip() for item in post.get(name, "").replace("\n", ",").split(",")]
        posted.setlist(name, [item for item in items if item])
        if not posted.getlist(name):
            del posted[name]
    return posted


def percent(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value * 100:.{digits}f}%"


def ms(value: float | None) -> str:
    return "–" if value is None else f"{value:,.0f} ms"


def money(value: float | None, currency: str = "") -> str:
    """Two decimals from 1 up, else three significant digits (0.00153)."""
    if value is None:
        return "–"
    text = f"{value:,.2f}" if abs(value) >= 1 or value == 0 else f"{value:.3g}"
    return f"{text} {currency}".strip()


def _rows(sides: list[dict[str, Any]], currency: str) -> list[dict[str, Any]]:
    """One row per figure, a cell per side."""

    def row(label: str, values: list[str], hint: str = "") -> dict[str, Any]:
        return {"label": label, "values": values, "hint": hint}

    rows = [
        row("events", [f"{s['events']:,}" for s in sides]),
        row("α (device share)", [percent(s["alpha"]) for s in sides]),
        row("cloud share", [percent(s["cloud_share"]) for s in sides]),
        row("draft-refine share", [percent(s["draft_refine_share"]) for s in sides]),
    ]
    for route, name in _ROUTE_NAMES.items():
        rows.append(
            row(
                f"{name} P50 / P95",
                [
                    f"{ms(s['latency_ms'][route]['p50'])} / {ms(s['latency_ms'][route]['p95'])}"
                    for s in sides
                ],
            )
        )
    rows += [
        row(
            "fallbacks",
            [f"{s['fallbacks']:,.0f}" for s in sides],
            "observed: counted; replays: expected at the observed rate of each cell and route",
        ),
        row("cloud calls", [f"{s['cloud_calls']:,}" for s in sides]),
    ]
    if any(s.get("shadow_refines") for s in sides):
        rows.append(
            row(
                "shadow refines",
                [f"{s.get('shadow_refines', 0):,.0f}" for s in sides],
                "expected: the cell's shadow_refine_rate of its device answers, priced as "
                "cloud calls; what happened counts none (the replay does not read them)",
            )
        )
    rows += [
        row("cloud cost", [money(s["cost"], currency) for s in sides]),
        row("privacy violations", [f"{s['privacy_violations']:,}" for s in sides]),
    ]
    return rows


def per_day_text(report: dict[str, Any]) -> str:
    """`6.70 USD/day (from 3 h 12 m of data)`: a cost report's rate per day with the span
    that holds data beside it, as every Python-rendered page prints it (the dashboard's
    script prints the same from the same fields). A report kept from before the span was
    recorded has no true rate per day: it says so."""
    currency = report["currency"]
    span = report.get("span")
    if span is None:
        return "– (kept from before costs per day were taken over the span of data)"
    if span["text"] is None:
        return "– (fewer than two events: no span of data)"
    if report["per_day"] is None:
        return f"– (from {span['text']} of data: under a minute, no rate)"
    return f"{money(report['per_day'], currency)}/day (from {span['text']} of data)"


def cost_sentence(report: dict[str, Any], *, stable_version: int | None) -> str:
    """`1.20 USD/day (from 3 h 12 m of data; 0.05 USD/h); saves 2.10 USD/day (64%) against
    all-cloud and 0.30 USD/day (20%) against v3 (stable)`: one cost report in words."""
    currency = report["currency"]
    text = per_day_text(report)
    if report.get("span") is None or report["per_hour"] is None:
        return text
    text = text.removesuffix(")") + f"; {money(report['per_hour'], currency)}/h)"
    hours = report["hours"]

    def per_day(saving: dict[str, Any]) -> str:
        amount = saving["amount"] / hours * 24 if hours > 0 else None
        verb = "saves" if amount is None or amount >= 0 else "costs"
        share = "" if saving["share"] is None else f" ({percent(abs(saving['share']), 0)})"
        return f"{verb} {money(None if amount is None else abs(amount), currency)}/day{share}"

    text += f"; {per_day(report['saving_vs_all_cloud'])} against all-cloud"
    if report["saving_vs_stable"] is not None:
        stable = f"v{stable_version} (stable)" if stable_version is not None else "stable"
        text += f", {per_day(report['saving_vs_stable'])} against {stable}"
    return text


def _saving(saving: dict[str, Any] | None, currency: str) -> str:
    if saving is None:
        return "–"
    return f"{money(saving['amount'], currency)} ({percent(saving['share'], 0)})"


def _cost_rows(cost: dict[str, Any], currency: str) -> list[dict[str, Any]]:
    """Cost per day, and the savings against all-cloud and the stable version, per side."""
    sides = [cost[side] for side in ("observed", "stable", "subject")]
    return [
        {
            "label": COST_PER_DAY_LABEL,
            "values": [per_day_text(side) for side in sides],
            "hint": "the cost over the span that holds data (the window's first event to its "
            "last), scaled to 24 h",
        },
        {
            "label": "saving vs all-cloud",
            "values": [_saving(side["saving_vs_all_cloud"], currency) for side in sides],
            "hint": "every task of the window priced as a cloud call with its tokens, "
            "less the side's cost; in the window",
        },
        {
            "label": "saving vs stable",
            "values": [_saving(side["saving_vs_stable"], currency) for side in sides],
            "hint": "the stable version replayed on the same events, less the side's cost; "
            "in the window",
        },
    ]


def segment_view(backtest: Backtest) -> dict[str, Any] | None:
    """The segment a backtest is of, as the page says it (None: the whole fleet): its name,
    its devices (once run) and the cells the subject's override for it changes."""
    scope = (backtest.filters or {}).get("segment")
    if not scope:
        return None
    ran = (backtest.result or {}).get("segment") or {}
    return {
        "name": scope["name"],
        "devices": ran.get("devices"),
        "overridden": scope.get("overridden", []),
        "devices_other_table": scope.get("devices_other_table", 0),
        "versions_overriding": ran.get("versions_overriding", []),
    }


def backtest_view(backtest: Backtest, *, slug: str) -> dict[str, Any]:
    """Everything the page shows of one backtest."""
    view: dict[str, Any] = {
        "backtest": backtest,
        "api_url": f"/api/v1/fleets/{slug}/lab/backtests/{backtest.pk}",
        "running": backtest.status in (BacktestStatus.QUEUED, BacktestStatus.RUNNING),
        "progress_percent": round(backtest.progress * 100),
        "hours": round((backtest.end - backtest.start).total_seconds() / 3600),
        "segment": segment_view(backtest),
    }
    result = backtest.result
    if backtest.status != BacktestStatus.DONE or not result:
        return view
    currency = result["price"]["currency"]
    overall = result["overall"]
    columns = [
        "what happened",
        f"v{backtest.stable_version} (stable) replayed",
        f"{backtest.label} replayed",
    ]
    view["columns"] = columns
    view["overall"] = _rows([overall["observed"], overall["stable"], overall["subject"]], currency)
    if "cost" in result:  # results kept from before the cost report leave these rows out
        view["overall"] += _cost_rows(result["cost"], currency)
    view["cells"] = [
        {
            "label": cell["label"],
            "parts": cell["cell"],  # shown with a break opportunity after each "/"
            "changed": cell["changed"],
            "privacy_flag": cell["privacy_flag"],
            "events": cell["observed"]["events"],
            "alpha": [
                percent(cell[side]["alpha"], 0) for side in ("observed", "stable", "subject")
            ],
            "cloud": [
                percent(cell[side]["cloud_share"], 0) for side in ("observed", "stable", "subject")
            ],
            "refine": [
                percent(cell[side]["draft_refine_share"], 0)
                for side in ("observed", "stable", "subject")
            ],
            "cloud_p95": [
                ms(cell[side]["latency_ms"]["cloud"]["p95"])
                for side in ("observed", "stable", "subject")
            ],
            "cost": [money(cell[side]["cost"]) for side in ("stable", "subject")],
            "violations": cell["subject"]["privacy_violations"],
        }
        for cell in result["cells"]
    ]
    check = result["self_check"]
    view["check"] = {
        "agreement": percent(check["agreement"], 2),
        "eligible": check["eligible"],
        "agreement_replayable": percent(check["agreement_replayable"], 2),
        "replayable": percent(
            result["replayable"] / result["events"] if result["events"] else None
        ),
        "mismatches": check["mismatches"],
        "latency": [
            {
                "route": _ROUTE_NAMES[route],
                "p50": f"{ms(entry['p50']['predicted'])} vs {ms(entry['p50']['observed'])}",
                "p50_error": percent(entry["p50"]["error"]),
                "p95": f"{ms(entry['p95']['predicted'])} vs {ms(entry['p95']['observed'])}",
                "p95_error": percent(entry["p95"]["error"]),
            }
            for route, entry in check["latency"].items()
            if entry["runs"]
        ],
        "error_max": percent(check["latency_error_max"]),
    }
    view["privacy"] = result["privacy"]
    view["currency"] = currency
    view["headline"] = result.get("headline")
    view["seconds"] = result.get("seconds")
    view["events"] = result["events"]
    return view
