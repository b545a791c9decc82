"""The backtest's panels on routing_policies' pages (registered in lab.apps through
routing_policies/extensions.py): the draft's headline beside Publish, and on the rollout page
the prediction for the candidate next to what its cohort did."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.urls import reverse
from django.utils import timezone

from routing_policies.models import Fleet, PolicyVersion
from telemetry.dashboards.selectors import fleet_metrics

from .models import Backtest, BacktestStatus
from .selectors import backtest_latest_done


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.0f}%"


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:,.0f} ms"


def _change(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value * 100:+.0f}%".replace("-", "−")


def headline_text(result: dict[str, Any]) -> str:
    """`α 62% → 71%, cloud P95 840 → 910 ms, cost −18%` (stable → subject, both replayed)."""
    headline = result["headline"]
    alpha, p95 = headline["alpha"], headline["cloud_p95_ms"]
    cloud = (
        f"{p95[0]:,.0f} → {p95[1]:,.0f} ms"
        if p95[0] is not None and p95[1] is not None
        else f"{_ms(p95[0])} → {_ms(p95[1])}"
    )
    return (
        f"α {_percent(alpha[0])} → {_percent(alpha[1])}, cloud P95 {cloud}, "
        f"cost {_change(headline['cost_change'])}"
    )


def _page_url(fleet: Fleet, backtest: Backtest) -> str:
    return f"{reverse('fleet-backtests', args=[fleet.slug])}?id={backtest.pk}"


def draft_headline(fleet: Fleet, draft: PolicyVersion) -> dict[str, Any] | None:
    """The latest finished backtest of the draft at its current revision, as a headline; else
    what to do (none yet, or one of an older revision)."""
    backtest = backtest_latest_done(fleet_id=fleet.pk, subject="draft", revision=draft.revision)
    if backtest is not None and backtest.policy_version_id not in (None, draft.pk):
        backtest = None
    page = reverse("fleet-backtests", args=[fleet.slug])
    if backtest is None or backtest.result is None:
        older = (
            Backtest.objects.filter(
                fleet=fleet, policy_version=draft, subject="draft", status=BacktestStatus.DONE
            )
            .exclude(filters__has_key="segment")
            .order_by("-finished_at")
            .first()
        )
        return {
            "ready": False,
            "older_revision": older.revision if older else None,
            "start_url": page,
            "revision": draft.revision,
        }
    result = backtest.result
    hours = round((backtest.end - backtest.start).total_seconds() / 3600)
    return {
        "ready": True,
        "text": headline_text(result),
        "window": f"the last {hours} h" if hours != 24 else "the last 24 h",
        "events": f"{result['events']:,}",
        "agreement": _percent(result["self_check"]["agreement"]),
        "privacy_ok": result["privacy"]["ok"],
        "flagged": result["privacy"]["flagged_cells"],
        "url": _page_url(fleet, backtest),
        "start_url": page,
        "revision": draft.revision,
    }


def rollout_prediction(fleet: Fleet, rollout: dict[str, Any]) -> dict[str, Any] | None:
    """The newest backtest of the candidate (as a draft before it was published, or as the
    version) beside the candidate cohort's observed figures since the rollout started."""
    candidate = rollout["candidate"]
    backtest = (
        Backtest.objects.filter(
            fleet=fleet, policy_version__number=candidate, status=BacktestStatus.DONE
        )
        .exclude(filters__has_key="segment")  # a segment's figures are not the cohort's
        .order_by("-finished_at", "-id")
        .first()
    )
    if backtest is None or backtest.result is None:
        return {
            "ready": False,
            "candidate": candidate,
            "start_url": reverse("fleet-backtests", args=[fleet.slug]),
        }
    predicted = backtest.result["overall"]["subject"]
    started = rollout.get("started_at") or timezone.now()
    window = max(timezone.now() - started, timedelta(minutes=1))
    filters = {"version": candidate, "cohort": "candidate"}
    overall = fleet_metrics(fleet_id=fleet.pk, window=window, filters=filters)["groups"]
    by_route = fleet_metrics(fleet_id=fleet.pk, window=window, filters=filters, group_by=["route"])[
        "groups"
    ]
    seen = overall[0] if overall else None
    seen_p95 = {group["route"]: group["latency_ms"]["p95"] for group in by_route}
    rows = [
        ("α (device share)", _percent(predicted["alpha"]), _percent(seen and seen["alpha"])),
        ("cloud share", _percent(predicted["cloud_share"]), _percent(seen and seen["cloud_share"])),
        (
            "draft-refine share",
            _percent(predicted["draft_refine_share"]),
            _percent(seen and seen["draft_refine_share"]),
        ),
    ]
    for route in ("device", "cloud"):
        rows.append(
            (
                f"{route} P95",
                _ms(predicted["latency_ms"][route]["p95"]),
                _ms(seen_p95.get(route)),
            )
        )
    return {
        "ready": True,
        "candidate": candidate,
        "label": backtest.label,
        "window": f"{round((backtest.end - backtest.start).total_seconds() / 3600)} h",
        "events": f"{backtest.result['events']:,}",
        "observed_events": f"{seen['events']:,}" if seen else "no",
        "rows": [{"figure": f, "predicted": p, "observed": o} for f, p, o in rows],
        "error": backtest.result["self_check"]["latency_error_max"],
        "url": _page_url(fleet, backtest),
    }
