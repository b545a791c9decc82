"""The checks the publish, rollout and switch services make: is the fleet frozen, does this
change need an approval and has it one. Imported by those services (no import back)."""

import logging

from django.db.models import QuerySet
from django.utils import timezone

from controlplane.exceptions import Conflict
from controlplane.prepared import Prepared

from ..policies.audit import Actor, actor_name, audit_of
from ..policies.models import Fleet, PolicyVersion
from ..rollouts.models import Rollout
from .models import ChangeRequest, FleetFreeze, ReviewSettings
from .notify import review_notify
from .rules import review_status

logger = logging.getLogger(__name__)

KIND_WORDS: dict[str, str] = {
    ChangeRequest.Kind.PUBLISH: "publishing the draft",
    ChangeRequest.Kind.ROLLOUT_START: "starting a rollout",
    ChangeRequest.Kind.SWITCH: "switching the whole fleet",
}


def _holding(fleet_id: int) -> QuerySet[FleetFreeze]:
    """The fleet's freezes that hold (not yet acknowledged): at most one."""
    return FleetFreeze.objects.filter(fleet_id=fleet_id, released_at__isnull=True)


def fleet_freeze_open(*, fleet_id: int) -> FleetFreeze | None:
    """The fleet's freeze while it holds (not yet acknowledged)."""
    freeze: FleetFreeze | None = _holding(fleet_id).select_related("rollout__candidate").first()
    return freeze


# Every stage change asks this inside its transaction: two columns, no joins, compiled once
# (controlplane.prepared).
_HOLDING = Prepared(lambda fleet_id: _holding(fleet_id).values("pk", "reason")[:1], "fleet_id")


def freeze_refuse(*, fleet: Fleet, doing: str) -> None:
    """Refuse `doing` (a rollout start, advance, switch) while the fleet is frozen."""
    freeze = _HOLDING.first(fleet_id=fleet.pk)
    if freeze is not None:
        raise frozen_conflict(freeze_id=freeze["pk"], reason=freeze["reason"], doing=doing)


def frozen_conflict(*, freeze_id: int, reason: str, doing: str) -> Conflict:
    """The refusal of `doing` while the fleet is frozen (for a caller that read the freeze)."""
    return Conflict(
        f"The fleet's rollouts are frozen since an automatic rollback ({reason}); "
        f"a publisher must acknowledge it with a note before {doing}.",
        code="fleet_frozen",
        details=[{"field": "fleet", "message": "frozen", "freeze_id": freeze_id}],
    )


def freeze_after_rollback(*, fleet: Fleet, rollout: Rollout, reason: str) -> FleetFreeze:
    """Freeze the fleet's rollouts after an automatic rollback (an open freeze stays the one)."""
    current = fleet_freeze_open(fleet_id=fleet.pk)
    if current is not None:
        return current
    freeze = FleetFreeze.objects.create(
        fleet=fleet,
        rollout=rollout,
        reason=(reason or f"rollout {rollout.pk} was rolled back automatically")[:500],
    )
    audit_of(
        "fleet",
        None,
        "frozen",
        actor=None,
        fleet=fleet,
        summary=f"Rollouts frozen after rollout {rollout.pk} was rolled back: {freeze.reason}",
        after={"frozen": True, "rollout": rollout.pk, "reason": freeze.reason},
    )
    freeze_notify(
        fleet, freeze, "frozen", f"Rollouts frozen after an automatic rollback: {freeze.reason}"
    )
    logger.warning("fleet.frozen fleet=%s rollout=%d", fleet.slug, rollout.pk)
    return freeze


def freeze_notify(fleet: Fleet, freeze: FleetFreeze, event: str, message: str) -> None:
    """Notify of a freeze (`frozen`) or of its release (`unfrozen`), at the moment it happened."""
    review_notify(
        fleet_id=fleet.pk,
        body={
            "kind": f"fleet.{event}",
            "fleet": fleet.slug,
            "message": message,
            "freeze": {"id": freeze.pk, "rollout": freeze.rollout_id, "reason": freeze.reason},
            "at": (freeze.released_at or freeze.frozen_at).isoformat(),
        },
    )


def review_settings_of(fleet: Fleet) -> ReviewSettings:
    """The fleet's review settings (defaults, unsaved, when it has none)."""
    return ReviewSettings.objects.filter(fleet=fleet).first() or ReviewSettings(fleet=fleet)


def change_request_body(
    change_request: ChangeRequest, kind: str, message: str
) -> dict[str, object]:
    """The notification of something that happened to a change request."""
    return {
        "kind": f"change_request.{kind}",
        "fleet": change_request.fleet.slug,
        "message": message,
        "change_request": {
            "id": change_request.pk,
            "kind": change_request.kind,
            "state": change_request.state,
            "author": change_request.author_name,
            "version": change_request.version_number,
            "base": change_request.base_number,
            "note": change_request.note[:500],
        },
        "at": timezone.now().isoformat(),
    }


# How an open change request finishes: carried out (done) or withdrawn (closed).
FINISHED_STATES = {"done": ChangeRequest.State.DONE, "withdrawn": ChangeRequest.State.CLOSED}


def change_request_finish(
    request: ChangeRequest, action: str, *, actor: Actor, summary: str, **after: object
) -> None:
    """Finish an open change request by `actor` as `action` says (done, withdrawn: its state
    from FINISHED_STATES), audited as `change_request.<action>` (with `after` besides the new
    state)."""
    state = FINISHED_STATES[action]
    request.state = state
    request.finished_at = timezone.now()
    request.finished_by_name = actor_name(actor)
    request.save(update_fields=["state", "finished_at", "finished_by_name", "version_number"])
    audit_of(
        "change_request",
        request.pk,
        action,
        actor=actor,
        fleet=request.fleet,
        summary=summary,
        before={"state": ChangeRequest.State.OPEN},
        after={"state": state, **after},
    )


def approval_consume(
    *,
    actor: Actor,
    fleet: Fleet,
    kind: str,
    version: PolicyVersion,
    needed: bool | None = None,
    request_open: bool | None = None,
) -> ChangeRequest | None:
    """When the fleet needs an approval for `kind`, the approved open request of `version` is
    marked done (in the caller's transaction); without one the change is refused.

    `needed`: whether the fleet's review settings ask for one, when the caller read them
    already (None: read here); `request_open`: whether `version` has an open request of `kind`,
    when the caller read it already (None: read here; False spares the request's read)."""
    if needed is None:
        settings = review_settings_of(fleet)
        needed = (
            settings.publish_needs_approval
            if kind == ChangeRequest.Kind.PUBLISH
            else settings.rollout_needs_approval
        )
    request = (
        ChangeRequest.objects.select_for_update(of=("self",))
        .select_related("version", "fleet")
        .filter(fleet=fleet, kind=kind, state=ChangeRequest.State.OPEN, version=version)
        .first()
        if request_open is not False
        else None
    )
    if request is None:
        if needed:
            raise Conflict(
                f"This fleet needs another publisher's approval before {KIND_WORDS[kind]}: "
                "open a change request and have it approved.",
                code="approval_required",
            )
        return None
    status = review_status(request, request.verdicts.all())
    if status.status != "approved":
        if not needed:
            return None  # the request stays open; the change did not need it
        why = {
            "rejected": f"it was rejected by {', '.join(status.rejected_by)}",
            "pending": "nobody has approved its current revision yet"
            + (
                f" (the draft was edited after {', '.join(status.withdrawn)} approved)"
                if status.withdrawn
                else ""
            ),
        }[status.status]
        raise Conflict(
            f"Change request {request.pk} is not approved: {why}.",
            code="approval_stale" if status.withdrawn else "approval_required",
            details=[
                {
                    "field": "revision",
                    "message": f"revision {status.revision} is not approved",
                    "change_request": request.pk,
                }
            ],
        )
    request.version_number = version.number
    change_request_finish(
        request,
        "done",
        actor=actor,
        summary=f"Carried out change request {request.pk} ({KIND_WORDS[kind]}), approved by "
        + ", ".join(status.approved_by),
        approved_by=status.approved_by,
    )
    event = "published" if kind == ChangeRequest.Kind.PUBLISH else "done"
    review_notify(
        fleet_id=fleet.pk,
        body=change_request_body(
            request, event, f"Change request {request.pk} was carried out ({KIND_WORDS[kind]})."
        ),
    )
    return request
