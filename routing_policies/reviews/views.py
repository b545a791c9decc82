"""Pages of change governance: the fleet's change requests (and its review settings), one
request (diff, verdicts, thread, actions), what waits for me, and releasing a freeze.

Thin like every page: reads through `selectors`, input through the API's own input serializers
(`schemas`, through `form_input`), each action one `services` call; a refusal comes back on the
page with its HTTP status.
"""

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from controlplane.exceptions import ApplicationError
from controlplane.pages import form_input, posted_change, role_required
from controlplane.roles import Role

from ..extensions import lab_draft_headline
from ..policies.fleet_api import by_kind
from ..policies.models import Fleet
from ..policies.pages import fleet_action, fleet_page
from ..policies.selectors import draft_get, published_versions
from ..policies.view_models import diff_rows
from . import schemas, selectors, services
from .models import ChangeRequest

Kind = ChangeRequest.Kind
KIND_LABELS = {
    Kind.PUBLISH: "Publish the draft",
    Kind.ROLLOUT_START: "Start a rollout of a version",
    Kind.SWITCH: "Switch the fleet to a version",
}
# The kinds whose input names a version: the page shows its Version field only for them
# (static/js/kind_fields.js); without JavaScript, the kind's own serializer takes only its fields.
VERSION_KINDS = schemas.kind_fields(schemas.OPEN_INPUTS)["version"]


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
        "version_kinds": VERSION_KINDS,
        "versions": published_versions(fleet=fleet),
        "posted": {},
        **extra,
    }
    return render(request, "routing_policies/reviews.html", context, status=status)


review_list = fleet_page(
    _list_page, "The fleet's open and past change requests; open one; the review settings."
)


@fleet_action(Role.EDITOR)
def change_request_open(request: HttpRequest, fleet: Fleet) -> HttpResponse:
    """Ask for review of the draft (or of a rollout / switch)."""

    def change() -> tuple[str, str]:
        data = form_input(by_kind(schemas.OPEN_INPUTS, request.POST), request.POST)
        opened = services.change_request_open(actor=request.user, fleet=fleet, **data)
        return (
            f"Opened change request {opened.pk}: another publisher reviews it.",
            reverse("change-request", args=[fleet.slug, opened.pk]),
        )

    return posted_change(request, lambda **page: _list_page(request, fleet, **page), change)


@fleet_action(Role.PUBLISHER)
def review_settings(request: HttpRequest, fleet: Fleet) -> HttpResponse:
    """Say what of the fleet needs another publisher's approval."""
    data = form_input(schemas.ReviewSettingsSerializer, request.POST)
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


change_request_page = fleet_page(
    _detail_page, "One change request: what changes, who said what, and what can be done now."
)


# What each action on a change request takes (the API's input serializer; None: nothing), does
# (one service call with it) and says when done.
Action = tuple[Role, schemas.InputSerializer | None, Callable[..., Any], str]
ACTIONS: dict[str, Action] = {
    "comment": (
        Role.EDITOR,
        schemas.CommentInputSerializer,
        services.change_request_comment,
        "Comment added.",
    ),
    "approve": (
        Role.PUBLISHER,
        schemas.VerdictInputSerializer,
        services.change_request_approve,
        "You approved revision {revision}.",
    ),
    "reject": (
        Role.PUBLISHER,
        schemas.RejectInputSerializer,
        services.change_request_reject,
        "You rejected revision {revision}.",
    ),
    "withdraw": (Role.EDITOR, None, services.change_request_withdraw, "Withdrawn."),
    "publish": (
        Role.PUBLISHER,
        schemas.PublishInputSerializer,
        services.change_request_publish,
        "Published v{result.number}.",
    ),
}


def _action_view(action: str, doc: str) -> Callable[..., HttpResponse]:
    """The page view of `action` on a change request: its input, its one service call, and the
    request's page again (with what was done, or why nothing was)."""
    role, input_serializer, service, done = ACTIONS[action]

    def view(request: HttpRequest, fleet: Fleet, request_id: int) -> HttpResponse:

        def change() -> tuple[str, str]:
            data = form_input(input_serializer, request.POST) if input_serializer else {}
            result = service(actor=request.user, fleet=fleet, request_id=request_id, **data)
            return (
                done.format(result=result, **data),
                reverse("change-request", args=[fleet.slug, request_id]),
            )

        return posted_change(
            request, lambda **page: _detail_page(request, fleet, request_id, **page), change
        )

    view.__name__ = view.__qualname__ = f"change_request_{action}"
    view.__doc__ = doc
    return fleet_action(role)(view)


change_request_comment = _action_view("comment", "Add to the thread.")
change_request_approve = _action_view("approve", "Approve the revision shown.")
change_request_reject = _action_view("reject", "Reject the revision shown, saying why.")
change_request_withdraw = _action_view("withdraw", "Close it without carrying it out.")
change_request_publish = _action_view("publish", "Publish the approved revision.")


@role_required(Role.VIEWER)
@require_GET
def reviews_for_me(request: HttpRequest) -> HttpResponse:
    """Open requests of every fleet waiting for my review, and my own."""
    return render(
        request,
        "routing_policies/reviews_for_me.html",
        selectors.change_requests_for(user=request.user),
    )


@fleet_action(Role.PUBLISHER)
def freeze_release(request: HttpRequest, fleet: Fleet) -> HttpResponse:
    """Acknowledge why the fleet was frozen; rollouts may start again."""
    back = request.POST.get("next") or reverse("fleet-rollout", args=[fleet.slug])
    if not back.startswith("/") or back.startswith("//"):
        back = reverse("fleet-rollout", args=[fleet.slug])
    try:
        data = form_input(schemas.NoteInputSerializer, request.POST)
        services.fleet_freeze_release(actor=request.user, fleet=fleet, **data)
    except ApplicationError as exc:
        messages.error(request, f"{exc.message} The fleet stays frozen.")
        return HttpResponseRedirect(back)
    messages.success(request, "Freeze released: rollouts may start again.")
    return HttpResponseRedirect(back)
