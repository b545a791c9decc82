"""Reads of change governance: a fleet's freeze, its review settings, change requests (per fleet
and waiting for a user) with their status at the current revision, thread and diff."""

from typing import Any

from django.db.models import Prefetch, QuerySet

from controlplane.roles import Role, has_role

from ..policies.models import Fleet
from ..policies.selectors import version_diff
from .gate import KIND_WORDS, fleet_freeze_open, review_settings_of
from .models import ChangeRequest, ChangeRequestComment, ChangeRequestVerdict, FleetFreeze
from .rules import review_status

LIST_LIMIT = 100


def freeze_out(freeze: FleetFreeze | None) -> dict[str, Any] | None:
    """A freeze as the API and pages show it."""
    if freeze is None:
        return None
    return {
        "id": freeze.pk,
        "frozen": freeze.released_at is None,
        "reason": freeze.reason,
        "rollout": freeze.rollout_id,
        "frozen_at": freeze.frozen_at,
        "released_at": freeze.released_at,
        "released_by": freeze.released_by_name or None,
        "release_note": freeze.release_note,
    }


def fleet_freeze(*, fleet: Fleet) -> dict[str, Any]:
    """`{"frozen", "freeze"}`: the open freeze, else the last one (released)."""
    freeze = fleet_freeze_open(fleet_id=fleet.pk)
    last = freeze or FleetFreeze.objects.filter(fleet=fleet).first()
    return {"fleet": fleet.slug, "frozen": freeze is not None, "freeze": freeze_out(last)}


def review_settings_out(*, fleet: Fleet) -> dict[str, Any]:
    """The fleet's review settings."""
    settings = review_settings_of(fleet)
    return {
        "fleet": fleet.slug,
        "publish_needs_approval": settings.publish_needs_approval,
        "rollout_needs_approval": settings.rollout_needs_approval,
    }


def _requests() -> QuerySet[ChangeRequest]:
    return ChangeRequest.objects.select_related("fleet", "version").prefetch_related(
        Prefetch("verdicts", queryset=ChangeRequestVerdict.objects.order_by("created_at", "id"))
    )


def change_request_out(request: ChangeRequest) -> dict[str, Any]:
    """A change request with its status at the current revision (list and detail)."""
    status = review_status(request, request.verdicts.all())
    version = request.version
    return {
        "id": request.pk,
        "fleet": request.fleet.slug,
        "kind": request.kind,
        "what": KIND_WORDS[request.kind],
        "state": request.state,
        "note": request.note,
        "author": request.author_name,
        "version": version.label if version is not None else None,
        "version_number": request.version_number,
        "base": request.base_number,
        "revision": status.revision,
        "status": status.status if request.state == ChangeRequest.State.OPEN else request.state,
        "approved_by": status.approved_by,
        "rejected_by": status.rejected_by,
        "withdrawn_approvals": status.withdrawn,
        "created_at": request.created_at,
        "finished_at": request.finished_at,
        "finished_by": request.finished_by_name or None,
    }


def change_request_list(*, fleet: Fleet, state: str | None = None) -> list[dict[str, Any]]:
    """The fleet's change requests, newest first (open ones only with `state="open"`)."""
    requests = _requests().filter(fleet=fleet)
    if state is not None:
        requests = requests.filter(state=state)
    return [change_request_out(r) for r in requests[:LIST_LIMIT]]


def change_requests_for(*, user: Any) -> dict[str, list[dict[str, Any]]]:
    """What waits for `user`: open requests of others to review (publishers), and their own."""
    open_requests = [
        change_request_out(r) for r in _requests().filter(state=ChangeRequest.State.OPEN)
    ]
    name = user.get_username()
    to_review = []
    if has_role(user, Role.PUBLISHER):
        to_review = [
            r
            for r in open_requests
            if r["author"] != name and name not in r["approved_by"] + r["rejected_by"]
        ]
    return {"to_review": to_review, "mine": [r for r in open_requests if r["author"] == name]}


def change_request_detail(*, fleet: Fleet, request_id: int) -> dict[str, Any] | None:
    """A change request with its verdicts and comments, and the diff of a publish request."""
    request = _requests().filter(fleet=fleet, pk=request_id).first()
    if request is None:
        return None
    out = change_request_out(request)
    out["verdicts"] = [
        {
            "reviewer": v.reviewer_name,
            "verdict": v.verdict,
            "revision": v.revision,
            "note": v.note,
            "at": v.created_at,
            "current": v.revision == out["revision"],
        }
        for v in request.verdicts.all()
    ]
    out["comments"] = [
        {"author": c.author_name, "body": c.body, "revision": c.revision, "at": c.created_at}
        for c in ChangeRequestComment.objects.filter(change_request=request)
    ]
    out["diff"] = None
    version = request.version
    if request.kind == ChangeRequest.Kind.PUBLISH and version is not None:
        if request.base_number is None:
            pass  # a first draft has nothing to compare with
        elif version.is_draft:
            out["diff"] = version_diff(fleet=fleet, a=request.base_number, b="draft")
        else:
            out["diff"] = version_diff(fleet=fleet, a=request.base_number, b=version.number or 0)
    return out
