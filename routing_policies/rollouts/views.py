"""Pages of gray release: the rollout page (stage, actions, live convergence, guards).

Thin like every page: reads through `selectors`, input through the API's own input serializers
(`controlplane.pages.form_input`; a guarded start's guard fields through `forms`), each action one
`services` call (a start through `extensions`, which guards it when asked), a refusal shown on
the page with its HTTP status (`controlplane.pages.refusal`), success answered with a redirect
and a message (POST/redirect/GET). Viewers read; only publishers act.
"""

import functools
import math
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone

from controlplane.exceptions import ApplicationError
from controlplane.pages import form_input, posted_values, refusal
from controlplane.roles import Role

from ..extensions import lab_rollout_prediction, rollout_guard_status, rollout_start_guarded
from ..policies.models import Fleet
from ..policies.pages import fleet_action, fleet_page
from ..policies.selectors import published_versions
from ..segments.selectors import segments_overview
from ..segments.views import rule_text
from . import schemas, selectors, services
from .forms import guard_options
from .models import MAX_CLOUD_PRESSURE_TTL_S, Rollout

STATE_LABELS = {
    Rollout.State.ACTIVE: "active",
    Rollout.State.PAUSED: "paused",
    Rollout.State.COMPLETED: "completed",
    Rollout.State.ROLLED_BACK: "rolled back",
}
EVENT_LABELS = {
    "started": "Started",
    "advanced": "Advanced",
    "paused": "Paused",
    "resumed": "Resumed",
    "completed": "Completed",
    "rolled_back": "Rolled back",
}


# --- reading helpers --------------------------------------------------------------------------


def _share(part: int, whole: int) -> float:
    """`part` as a percentage of `whole` (0 when there is nothing), for the bars."""
    return round(min(100.0, 100.0 * part / whole), 1) if whole else 0.0


def _stage_steps(rollout: dict[str, Any] | None) -> list[dict[str, Any]]:
    """5% → 25% → 100%, each step done, current or to do for this rollout."""
    steps = []
    for percent in Rollout.STAGES:
        if rollout is None:
            state = "todo"
        elif rollout["state"] == Rollout.State.COMPLETED or percent < rollout["stage"]:
            state = "done"
        elif percent == rollout["stage"]:
            state = "current"
        else:
            state = "todo"
        whole = "whole segment" if rollout is not None and rollout.get("segment") else "whole fleet"
        sub = {5: "canary", 25: "a quarter"}.get(percent, whole)
        if percent == 100 and rollout is not None and rollout.get("holdback"):
            sub = f"{100 - rollout['holdback']}% · {rollout['holdback']}% held back"
        steps.append({"percent": percent, "state": state, "sub": sub})
    return steps


def ago(moment: datetime, now: datetime | None = None) -> str:
    """`just now`, `42 s ago`, `3 min ago`, `2 h 5 min ago`, `4 d ago`, as rollout.js says."""
    seconds = max(0, int(((now or timezone.now()) - moment).total_seconds()))
    if seconds < 10:
        return "just now"
    if seconds < 60:
        return f"{seconds} s ago"
    if seconds < 3600:
        return f"{seconds // 60} min ago"
    if seconds < 86400:
        return f"{seconds // 3600} h {seconds % 3600 // 60} min ago"
    return f"{seconds // 86400} d ago"


# (below how many ms, ms per unit, text): the units duration_text (and rollout.js) uses.
_DURATION_UNITS = (
    (10_000, 1, "{:,.0f} ms"),
    (120_000, 1000, "{:.1f} s"),
    (7_200_000, 60_000, "{:.1f} min"),
    (math.inf, 3_600_000, "{:.1f} h"),
)


def duration_text(milliseconds: float | None) -> str:
    """`850 ms`, `3,697 ms`, `12.4 s`, `28.3 min`, `3.1 h` (rollout.js says the same)."""
    if milliseconds is None:
        return "—"
    _below, per, text = next(unit for unit in _DURATION_UNITS if milliseconds < unit[0])
    return text.format(milliseconds / per)


def since_of(rollout: dict[str, Any]) -> dict[str, Any]:
    """`at 25% since <time>` for an open rollout, else when and how it ended."""
    if rollout["open"]:
        phrase, moment = f"at {rollout['stage']}% since", rollout["stage_changed_at"]
    elif rollout["state"] == Rollout.State.COMPLETED:
        phrase, moment = "completed at", rollout["finished_at"] or rollout["stage_changed_at"]
    else:
        phrase = f"rolled back from {rollout['stage']}% at"
        moment = rollout["finished_at"] or rollout["stage_changed_at"]
    return {"phrase": phrase, "at": moment, "ago": ago(moment)}


def next_text(rollout: dict[str, Any] | None) -> str:
    """What comes next, in words (rollout.js says the same)."""
    if rollout is None:
        return "start a rollout of a published version, or switch the whole fleet at once"
    if rollout["state"] == Rollout.State.COMPLETED:
        return f"nothing: v{rollout['candidate']} is stable; start a new rollout when one is ready"
    if rollout["state"] == Rollout.State.ROLLED_BACK:
        return f"nothing: every device is back on v{rollout['stable']}"
    after = {5: "advance to 25%, then 100%, then complete", 25: "advance to 100%, then complete"}
    upcoming = after.get(rollout["stage"], f"complete: v{rollout['candidate']} becomes stable")
    if rollout["state"] == Rollout.State.PAUSED:
        return f"resume, then {upcoming}"
    return upcoming


def _convergence_rows(convergence: dict[str, Any]) -> list[dict[str, Any]]:
    total = convergence["devices"]
    return [
        {
            **row,
            "assigned_share": _share(row["assigned"], total),
            "acked_share": _share(row["acked"], total),
        }
        for row in convergence["versions"]
    ]


def _rollout_page(
    request: HttpRequest,
    fleet: Fleet,
    *,
    status: int = 200,
    error: str = "",
    problems: list[dict[str, Any]] | None = None,
    form: dict[str, str] | None = None,
) -> HttpResponse:
    """The rollout page: stable version, the rollout's stage and actions, live convergence."""
    state = selectors.rollout_status(fleet)
    rollout = state["rollout"]
    convergence = state["convergence"]
    stable = state["stable_version"]
    versions = published_versions(fleet=fleet)
    is_open = bool(rollout and rollout["open"])
    context: dict[str, Any] = {
        "fleet": fleet,
        "stable": stable,
        "rollout": rollout,
        "rollout_open": is_open,
        "state_label": STATE_LABELS.get(rollout["state"], rollout["state"]) if rollout else "",
        "steps": _stage_steps(rollout),
        "since": since_of(rollout) if rollout else None,
        "next": next_text(rollout),
        "cloud_pressure": state["cloud_pressure"],
        "convergence": convergence,
        "convergence_rows": _convergence_rows(convergence),
        "p50_text": duration_text(convergence["propagation"]["p50_ms"]),
        "p95_text": duration_text(convergence["propagation"]["p95_ms"]),
        "p99_text": duration_text(convergence["propagation"]["p99_ms"]),
        "last_text": duration_text(convergence["propagation"]["last_ms"]),
        "versions": versions,
        "latest_number": versions[0]["number"] if versions else None,
        "other_versions": [v for v in versions if v["number"] != stable],
        # The segments a start may be scoped to, each with how many enrolled devices it matches.
        "segments": [
            {"name": segment["name"], "matching": segment["preview"]["matching"]}
            for segment in segments_overview(fleet=fleet)["segments"]
        ]
        if not is_open
        else [],
        "scope_text": rule_text(rollout["segment_rule"])
        if rollout and rollout["segment_rule"]
        else "",
        "history": [
            {"event": event, "label": EVENT_LABELS.get(event.action, event.action)}
            for event in selectors.rollout_history(fleet=fleet)
        ],
        "history_limit": selectors.ROLLOUT_HISTORY_LIMIT,
        "guards": _guards_for_page(rollout_guard_status(rollout_id=rollout["id"]))
        if rollout
        else None,
        "prediction": lab_rollout_prediction(fleet=fleet, rollout=rollout) if rollout else None,
        "max_ttl": MAX_CLOUD_PRESSURE_TTL_S,
        "error": error,
        "problems": problems or [],
        "form": form or {},
    }
    return render(request, "routing_policies/rollout.html", context, status=status)


def _guards_for_page(guards: dict[str, Any] | None) -> dict[str, Any] | None:
    """The guard status with what the page adds: an element id per guard chart, and the
    sample ratios in words (`2.5% of 4,000 events, 5.0% expected`)."""
    if guards is None:
        return None
    ratios = []
    for name, check in sorted(guards.get("sample_ratios", {}).items()):
        if check.get("total"):
            ratios.append(
                f"{check['share'] * 100:.1f}% of {check['total']:,} {name}, "
                f"{check['expected_share'] * 100:.1f}% expected"
            )
    kinds = {guard.get("kind") for guard in guards["guards"]}
    return {
        **guards,
        "statistical": "sequential" in kinds,
        "fixed": "fixed" in kinds,
        "sample_ratio_text": "; ".join(ratios),
        "guards": [
            {**guard, "chart_id": f"guard-series-{index}"}
            for index, guard in enumerate(guards["guards"])
        ],
    }


def _refused(request: HttpRequest, fleet: Fleet, exc: ApplicationError) -> HttpResponse:
    """The rollout page again, saying why the action was refused; nothing changed."""

    def page_again(**shown: Any) -> HttpResponse:
        return _rollout_page(request, fleet, form=posted_values(request), **shown)

    return refusal(page_again, exc)


def _to_rollout(fleet: Fleet) -> HttpResponseRedirect:
    return HttpResponseRedirect(reverse("fleet-rollout", args=[fleet.slug]))


# --- the rollout page -------------------------------------------------------------------------


rollout_page = fleet_page(
    _rollout_page,
    "Stable version, the open rollout and what comes next, fleet convergence, history.",
)


# A page action's flash: its level (messages.SUCCESS, messages.INFO) and its text.
Said = tuple[int, str]
PageAction = Callable[[HttpRequest, Fleet], Said]


def _page_action(action: PageAction) -> Callable[[HttpRequest, str], HttpResponse]:
    """A publisher's action of the rollout page: `action(request, fleet)` makes the change and
    says what happened (flashed, then back to the page); a refusal is shown on the page with
    its HTTP status, nothing changed."""

    @fleet_action(Role.PUBLISHER)
    @functools.wraps(action)
    def view(request: HttpRequest, fleet: Fleet) -> HttpResponse:
        try:
            level, text = action(request, fleet)
        except ApplicationError as exc:
            return _refused(request, fleet, exc)
        messages.add_message(request, level, text)
        return _to_rollout(fleet)

    return view


@_page_action
def rollout_start(request: HttpRequest, fleet: Fleet) -> Said:
    """Start rolling a published version out at 5%."""
    start = form_input(schemas.RolloutStartBaseSerializer, request.POST)
    rollout = rollout_start_guarded(
        actor=request.user, fleet=fleet, guard_options=guard_options(request.POST), **start
    )
    whom = f"segment {rollout.segment_name}" if rollout.scoped else "the fleet"
    return messages.SUCCESS, (
        f"Started rolling out v{rollout.candidate.number} over v{rollout.stable.number} at "
        f"{rollout.stage}% of {whom}."
    )


@_page_action
def rollout_advance(request: HttpRequest, fleet: Fleet) -> Said:
    """Advance to the stage the button named; a second click on the same button does nothing."""
    before = selectors.open_rollout(fleet.pk)
    advance = form_input(schemas.RolloutAdvanceInputSerializer, request.POST)
    rollout = services.rollout_advance(actor=request.user, fleet=fleet, **advance)
    if before is not None and before.stage == rollout.stage:
        return messages.INFO, f"v{rollout.candidate.number} is already at {rollout.stage}%."
    share = (
        f" ({rollout.candidate_share}% of the fleet: {rollout.holdback}% held back on "
        f"v{rollout.stable.number} until completion)"
        if rollout.candidate_share != rollout.stage
        else " of the fleet"
    )
    return messages.SUCCESS, f"Advanced v{rollout.candidate.number} to {rollout.stage}%{share}."


def _transition(service: Callable[..., Rollout], doc: str, said: Callable[[Rollout], str]) -> Any:
    """A page action that is one rollout transition without input (pause, resume, complete)."""

    def action(request: HttpRequest, fleet: Fleet) -> Said:
        return messages.SUCCESS, said(service(actor=request.user, fleet=fleet))

    action.__name__ = action.__qualname__ = service.__name__
    action.__doc__ = doc
    return _page_action(action)


rollout_pause = _transition(
    services.rollout_pause,
    "Hold the rollout at its stage.",
    lambda rollout: (
        f"Paused v{rollout.candidate.number} at {rollout.stage}%; devices keep what they run."
    ),
)
rollout_resume = _transition(
    services.rollout_resume,
    "Let a paused rollout advance again.",
    lambda rollout: f"Resumed v{rollout.candidate.number} at {rollout.stage}%.",
)


@_page_action
def rollout_complete(request: HttpRequest, fleet: Fleet) -> Said:
    """At 100%, make the candidate the fleet's stable version (a scoped rollout's form
    confirms that this reaches the whole fleet: `fleet_wide`)."""
    confirm = form_input(schemas.RolloutCompleteInputSerializer, request.POST)
    rollout = services.rollout_complete(actor=request.user, fleet=fleet, **confirm)
    return messages.SUCCESS, (
        f"Completed: v{rollout.candidate.number} is now the stable version "
        f"(was v{rollout.stable.number})" + (" of the whole fleet." if rollout.scoped else ".")
    )


@_page_action
def rollout_rollback(request: HttpRequest, fleet: Fleet) -> Said:
    """One click: every device returns to the stable version."""
    # The reason box is free text: a person's stray spaces are trimmed, not refused.
    reason = (request.POST.get("reason") or "").strip()
    rollout = services.rollout_rollback(actor=request.user, fleet=fleet, reason=reason)
    return messages.SUCCESS, (
        f"Rolled v{rollout.candidate.number} back: every device returns to "
        f"v{rollout.stable.number}."
    )


@_page_action
def fleet_switch(request: HttpRequest, fleet: Fleet) -> Said:
    """Move the whole fleet to a published version at once (no stages)."""
    before = selectors.fleet_assignment(fleet.pk).stable
    version = form_input(schemas.RolloutVersionInputSerializer, request.POST)["version"]
    services.fleet_switch_version(actor=request.user, fleet=fleet, version=version)
    if before == version:
        return messages.INFO, f"The fleet already runs v{version}; nothing changed."
    return messages.SUCCESS, f"Switched the whole fleet from v{before} to v{version}."


@_page_action
def cloud_pressure(request: HttpRequest, fleet: Fleet) -> Said:
    """Nudge θ for the whole fleet for a while, without a new version."""
    pressure = form_input(schemas.CloudPressureInputSerializer, request.POST)
    services.cloud_pressure_set(actor=request.user, fleet=fleet, **pressure)
    return messages.SUCCESS, (
        f"Sent cloud_pressure θ {pressure['theta_offset']:+.2f} for {pressure['ttl_s']:,} s "
        "to the whole fleet."
    )
