"""Pages of change governance: the fleet's change requests (and its review settings), one
request (diff, verdicts, thread, actions), what waits for me, and releasing a freeze.

Thin like every page: reads through `selectors`, input through `forms`, each action one
`services` call; a refusal comes back on the page with its HTTP status.
"""

from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from controlplane.exceptions import ApplicationError
from controlplane.pages import posted_values, refusal, role_required
from controlplane.roles import Role

from ..extensions import lab_draft_headline
from ..policies.models import Fleet
from ..policies.pages import fleet_or_404
from ..policies.selectors import draft_get, published_versions
from ..policies.view_models import diff_rows
from . import selectors, services
from .forms import NoteForm, OpenForm, SettingsForm, VerdictForm
from .models import ChangeRequest

Kind = ChangeRequest.Kind
KIND_LABELS = {
    Kind.PUBLISH: "Publish the draft",
    Kind.ROLLOUT_START: "Start a rollout of a version",
    Kind.SWITCH: "Switch the fleet to a version",
}
# The kinds that name a version; the page shows its Version field only for them
# (static/js/kind_fields.js) and, without JavaScript, takes it only for them.
VERSION_KINDS = (Kind.ROLLOUT_START, Kind.SWITCH)


def _list_page(
    request: HttpRequest, fleet: Fleet, *, status: int = 200, **extra: Any
) -> HttpResponse:
    context = {
        "fleet": fleet,
        "open_requests": selectors.change_request_list(fleet=fleet, state="open"),
        "past_requests": [
            r for r in selectors.change_request_list(fleet=fleet) if r["state"] != "open"
        ][:30],
        "settings": selectors.review_settings_out(fleet=fleet),
        "kinds": [(kind.value, KIND_LABELS[kind]) for kind in ChangeRequest.Kind],
        "version_kinds": " ".join(VERSION_KINDS),
        "versions": published_versions(fleet=fleet),
        "posted": {},
        **extra,
    }
    return render(request, "routing_policies/reviews.html", context, status=status)


@role_required(Role.VIEWER)
@require_GET
def review_list(request: HttpRequest, slug: str) -> HttpResponse:
    """The fleet's open and past change requests; open one; the review settings."""
    return _list_page(request, fleet_or_404(slug))


@role_required(Role.EDITOR)
@require_POST
def change_request_open(request: HttpRequest, slug: str) -> HttpResponse:
    """Ask for review of the draft (or of a rollout / switch)."""
    fleet = fleet_or_404(slug)
    try:
        posted = request.POST.copy()
        if posted.get("kind") not in VERSION_KINDS:
            posted.pop("version", None)
        data = OpenForm(posted).values()
        opened = services.change_request_open(
            actor=request.user,
            fleet=fleet,
            kind=data["kind"],
            note=data["note"],
            version=data["version"],
        )
    except ApplicationError as exc:
        return refusal(
            lambda **page: _list_page(request, fleet, **page),
            exc,
            posted=posted_values(request),
        )
    messages.success(request, f"Opened change request {opened.pk}: another publisher reviews it.")
    return HttpResponseRedirect(reverse("change-request", args=[fleet.slug, opened.pk]))


@role_required(Role.PUBLISHER)
@require_POST
def review_settings(request: HttpRequest, slug: str) -> HttpResponse:
    """Say what of the fleet needs another publisher's approval."""
    fleet = fleet_or_404(slug)
    data = SettingsForm(request.POST).values()
    services.review_settings_update(actor=request.user, fleet=fleet, **data)
    messages.success(request, "Saved the review settings.")
    return HttpResponseRedirect(reverse("fleet-reviews", args=[fleet.slug]))


def _detail_page(
    request: HttpRequest, fleet: Fleet, request_id: int, *, status: int = 200, **extra: Any
) -> HttpResponse:
    detail = selectors.change_request_detail(fleet=fleet, request_id=request_id)
    if detail is None:
        raise Http404(f"Fleet {fleet.slug!r} has no change request {request_id}.")
    name = request.user.get_username()
    context = {
        "fleet": fleet,
        "cr": detail,
        "rows": diff_rows(detail["diff"]) if detail["diff"] else [],
        "is_author": detail["author"] == name,
        # The policy lab's latest backtest of the draft under review (when the lab is there).
        "backtest": _draft_backtest(fleet, detail),
        **extra,
    }
    return render(request, "routing_policies/change_request.html", context, status=status)


def _draft_backtest(fleet: Fleet, detail: dict[str, Any]) -> dict[str, Any] | None:
    if detail["kind"] != ChangeRequest.Kind.PUBLISH or detail["state"] != ChangeRequest.State.OPEN:
        return None
    draft = draft_get(fleet=fleet)
    return lab_draft_headline(fleet=fleet, draft=draft) if draft is not None else None


@role_required(Role.VIEWER)
@require_GET
def change_request_page(request: HttpRequest, slug: str, request_id: int) -> HttpResponse:
    """One change request: what changes, who said what, and what can be done now."""
    return _detail_page(request, fleet_or_404(slug), request_id)


def _act(request: HttpRequest, slug: str, request_id: int, action: str) -> HttpResponse:
    fleet = fleet_or_404(slug)
    try:
        if action == "comment":
            note = NoteForm(request.POST).values()["note"]
            services.change_request_comment(
                actor=request.user, fleet=fleet, request_id=request_id, body=note
            )
            done = "Comment added."
        elif action in ("approve", "reject"):
            data = VerdictForm(request.POST).values()
            service = (
                services.change_request_approve
                if action == "approve"
                else services.change_request_reject
            )
            service(
                actor=request.user,
                fleet=fleet,
                request_id=request_id,
                revision=data["revision"],
                note=data["note"],
            )
            done = f"You {action}d revision {data['revision']}."
        elif action == "withdraw":
            services.change_request_withdraw(actor=request.user, fleet=fleet, request_id=request_id)
            done = "Withdrawn."
        else:
            data = VerdictForm(request.POST).values()
            version = services.change_request_publish(
                actor=request.user,
                fleet=fleet,
                request_id=request_id,
                revision=data["revision"],
                note=data["note"],
            )
            done = f"Published v{version.number}."
    except ApplicationError as exc:
        return refusal(
            lambda **page: _detail_page(request, fleet, request_id, **page),
            exc,
            posted=posted_values(request),
        )
    messages.success(request, done)
    return HttpResponseRedirect(reverse("change-request", args=[fleet.slug, request_id]))


@role_required(Role.EDITOR)
@require_POST
def change_request_comment(request: HttpRequest, slug: str, request_id: int) -> HttpResponse:
    """Add to the thread."""
    return _act(request, slug, request_id, "comment")


@role_required(Role.PUBLISHER)
@require_POST
def change_request_approve(request: HttpRequest, slug: str, request_id: int) -> HttpResponse:
    """Approve the revision shown."""
    return _act(request, slug, request_id, "approve")


@role_required(Role.PUBLISHER)
@require_POST
def change_request_reject(request: HttpRequest, slug: str, request_id: int) -> HttpResponse:
    """Reject the revision shown, saying why."""
    return _act(request, slug, request_id, "reject")


@role_required(Role.EDITOR)
@require_POST
def change_request_withdraw(request: HttpRequest, slug: str, request_id: int) -> HttpResponse:
    """Close it without carrying it out."""
    return _act(request, slug, request_id, "withdraw")


@role_required(Role.PUBLISHER)
@require_POST
def change_request_publish(request: HttpRequest, slug: str, request_id: int) -> HttpResponse:
    """Publish the approved revision."""
    return _act(request, slug, request_id, "publish")


@role_required(Role.VIEWER)
@require_GET
def reviews_for_me(request: HttpRequest) -> HttpResponse:
    """Open requests of every fleet waiting for my review, and my own."""
    return render(
        request,
        "routing_policies/reviews_for_me.html",
        selectors.change_requests_for(user=request.user),
    )


@role_required(Role.PUBLISHER)
@require_POST
def freeze_release(request: HttpRequest, slug: str) -> HttpResponse:
    """Acknowledge why the fleet was frozen; rollouts may start again."""
    fleet = fleet_or_404(slug)
    back = request.POST.get("next") or reverse("fleet-rollout", args=[fleet.slug])
    if not back.startswith("/") or back.startswith("//"):
        back = reverse("fleet-rollout", args=[fleet.slug])
    try:
        note = NoteForm(request.POST).values()["note"]
        services.fleet_freeze_release(actor=request.user, fleet=fleet, note=note)
    except ApplicationError as exc:
        messages.error(request, f"{exc.message} The fleet stays frozen.")
        response = HttpResponseRedirect(back)
        return response
    messages.success(request, "Freeze released: rollouts may start again.")
    return HttpResponseRedirect(back)
