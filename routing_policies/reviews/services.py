"""The writes of change governance: review settings, change requests (open, comment, approve,
reject, withdraw, publish) and releasing a freeze. One audited call each, under a row lock;
what notifiers write (webhook deliveries) joins the same transaction."""

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import IntegrityError, transaction
from django.utils import timezone

from controlplane.exceptions import ApplicationError, Conflict, NotFound, ValidationFailed
from controlplane.roles import Role, has_role

from ..policies.audit import Actor, actor_name, actor_user, audit_of
from ..policies.models import Fleet, PolicyVersion
from ..policies.services import policy_version_publish
from ..rollouts.services import fleet_routing_lock
from .gate import (
    KIND_WORDS,
    change_request_body,
    change_request_finish,
    fleet_freeze_open,
    freeze_notify,
)
from .models import (
    ChangeRequest,
    ChangeRequestComment,
    ChangeRequestVerdict,
    FleetFreeze,
    ReviewSettings,
)
from .notify import review_notify
from .rules import current_revision, review_status

logger = logging.getLogger(__name__)

Verdict = ChangeRequestVerdict.Verdict


@contextmanager
def _once(refusal: str, *, field: str, message: str) -> Iterator[None]:
    """Create a row a unique constraint allows once: a second is refused as a `duplicate`
    (409) naming `field`, and the caller's transaction goes on."""
    try:
        with transaction.atomic():
            yield
    except IntegrityError:
        raise Conflict(
            refusal, code="duplicate", details=[{"field": field, "message": message}]
        ) from None


def _publisher_only(actor: Actor, doing: str) -> None:
    if not has_role(actor, Role.PUBLISHER):
        raise ApplicationError(
            f"Only a publisher can {doing}.", code="permission_denied", status=403
        )


@transaction.atomic
def review_settings_update(
    *, actor: Actor, fleet: Fleet, publish_needs_approval: bool, rollout_needs_approval: bool
) -> ReviewSettings:
    """Say what of the fleet needs another publisher's approval; an unchanged repeat is a no-op."""
    settings, _ = ReviewSettings.objects.select_for_update().get_or_create(fleet=fleet)
    before = {
        "publish_needs_approval": settings.publish_needs_approval,
        "rollout_needs_approval": settings.rollout_needs_approval,
    }
    after = {
        "publish_needs_approval": bool(publish_needs_approval),
        "rollout_needs_approval": bool(rollout_needs_approval),
    }
    if before == after:
        return settings
    settings.publish_needs_approval = after["publish_needs_approval"]
    settings.rollout_needs_approval = after["rollout_needs_approval"]
    settings.save()
    needs = [
        w
        for w, on in (
            ("publishing", after["publish_needs_approval"]),
            ("rollouts and switches", after["rollout_needs_approval"]),
        )
        if on
    ]
    audit_of(
        "review_settings",
        None,
        "updated",
        actor=actor,
        fleet=fleet,
        summary="Approval by another publisher needed for " + (" and ".join(needs) or "nothing"),
        before=before,
        after=after,
    )
    return settings


def _version_for(fleet: Fleet, kind: str, version: int | None) -> PolicyVersion:
    if kind == ChangeRequest.Kind.PUBLISH:
        draft = PolicyVersion.objects.filter(fleet=fleet, published_at__isnull=True).first()
        if draft is None:
            raise Conflict(f"Fleet {fleet.slug!r} has no draft to review.", code="no_draft")
        return draft
    if version is None:
        raise ValidationFailed(
            "Name the published version to roll out or switch to.",
            details=[{"field": "version", "message": "is required for this kind"}],
        )
    target = PolicyVersion.objects.filter(fleet=fleet, number=version).first()
    if target is None:
        raise NotFound(f"Fleet {fleet.slug!r} has no published version {version}.")
    return target


@transaction.atomic
def change_request_open(
    *, actor: Actor, fleet: Fleet, kind: str, note: str, version: int | None = None
) -> ChangeRequest:
    """Put the draft (or a rollout of / switch to a published version) up for review."""
    text = note.strip()
    fleet = Fleet.objects.select_for_update().get(pk=fleet.pk)
    target = _version_for(fleet, kind, version)
    # A request whose draft was discarded can go nowhere: it no longer holds the kind's place.
    ChangeRequest.objects.filter(
        fleet=fleet, kind=kind, state=ChangeRequest.State.OPEN, version__isnull=True
    ).update(state=ChangeRequest.State.CLOSED, finished_at=timezone.now())
    with _once(
        f"Fleet {fleet.slug!r} already has an open change request for {KIND_WORDS[kind]}.",
        field="kind",
        message="one open request per kind",
    ):
        request = ChangeRequest.objects.create(
            fleet=fleet,
            kind=kind,
            version=target,
            base_number=target.based_on.number if target.based_on else None,
            version_number=target.number,
            note=text,
            author=actor_user(actor),
            author_name=actor_name(actor),
        )
    audit_of(
        "change_request",
        request.pk,
        "opened",
        actor=actor,
        fleet=fleet,
        summary=f"Asked for review of {KIND_WORDS[kind]} ({target.label}"
        f", revision {target.revision}): {text}",
        after={"kind": kind, "version": target.label, "revision": target.revision},
    )
    review_notify(
        fleet_id=fleet.pk,
        body=change_request_body(
            request,
            "opened",
            f"{request.author_name} asks for review of {KIND_WORDS[kind]}: {text}",
        ),
    )
    logger.info("change_request.opened fleet=%s request=%d", fleet.slug, request.pk)
    return request


def _lock_request(fleet: Fleet, request_id: int) -> ChangeRequest:
    request = (
        ChangeRequest.objects.select_for_update(of=("self",))
        .select_related("fleet", "version")
        .filter(fleet=fleet, pk=request_id)
        .first()
    )
    if request is None:
        raise NotFound(f"Fleet {fleet.slug!r} has no change request {request_id}.")
    return request


def _require_open(request: ChangeRequest) -> None:
    if request.state != ChangeRequest.State.OPEN:
        raise Conflict(
            f"Change request {request.pk} is {request.state}: nothing more can happen to it.",
            code="change_request_closed",
        )


@transaction.atomic
def change_request_comment(
    *, actor: Actor, fleet: Fleet, request_id: int, body: str
) -> ChangeRequestComment:
    """Add a message to the request's thread (open or not: a thread outlives its decision)."""
    text = body.strip()
    request = _lock_request(fleet, request_id)
    comment = ChangeRequestComment.objects.create(
        change_request=request,
        author=actor_user(actor),
        author_name=actor_name(actor),
        body=text,
        revision=current_revision(request) or 0,
    )
    summary = f"Commented: {text}"
    audit_of("change_request", request.pk, "commented", actor=actor, fleet=fleet, summary=summary)
    return comment


def _verdict(
    verdict: str, actor: Actor, fleet: Fleet, request_id: int, revision: int, note: str
) -> ChangeRequest:
    approving = verdict == Verdict.APPROVED
    _publisher_only(actor, "approve or reject a change request")
    text = note.strip()
    if not approving and not text:  # a rejection says what must change
        raise ValidationFailed(
            "Write the note: say why.", details=[{"field": "note", "message": "must not be empty"}]
        )
    request = _lock_request(fleet, request_id)
    _require_open(request)
    user = actor_user(actor)
    if user is not None and request.author_id == user.pk:
        raise Conflict(
            "You opened this change request: another publisher must review it.",
            code="own_change_request",
            details=[{"field": "reviewer", "message": "the author cannot review their own"}],
        )
    if request.version is not None:  # the draft's revision, locked against a concurrent edit
        request.version = PolicyVersion.objects.select_for_update().get(pk=request.version.pk)
    now = current_revision(request)
    if now is None:
        raise Conflict("The draft of this request was discarded.", code="no_draft")
    if revision != now:
        raise Conflict(
            f"You reviewed revision {revision}, the draft is now at revision {now}: look at "
            "the changes again, then decide.",
            code="stale_revision",
            details=[
                {
                    "field": "revision",
                    "message": f"current revision is {now}",
                    "current_revision": now,
                }
            ],
        )
    with _once(
        f"You already reviewed revision {revision} of this change request.",
        field="revision",
        message="already reviewed by you",
    ):
        ChangeRequestVerdict.objects.create(
            change_request=request,
            reviewer=user,
            reviewer_name=actor_name(actor),
            verdict=verdict,
            revision=revision,
            note=text,
        )
    word = "approved" if approving else "rejected"
    audit_of(
        "change_request",
        request.pk,
        word,
        actor=actor,
        fleet=fleet,
        summary=f"{word.capitalize()} revision {revision}" + (f": {text}" if text else ""),
        after={"verdict": verdict, "revision": revision},
    )
    review_notify(
        fleet_id=fleet.pk,
        body=change_request_body(
            request,
            word,
            f"{actor_name(actor)} {word} change request {request.pk} (revision {revision})"
            + (f": {text}" if text else ""),
        ),
    )
    return request


@transaction.atomic
def change_request_approve(
    *, actor: Actor, fleet: Fleet, request_id: int, revision: int, note: str = ""
) -> ChangeRequest:
    """Approve the revision you reviewed (not your own request; an edit after it withdraws it)."""
    return _verdict(Verdict.APPROVED, actor, fleet, request_id, revision, note)


@transaction.atomic
def change_request_reject(
    *, actor: Actor, fleet: Fleet, request_id: int, revision: int, note: str
) -> ChangeRequest:
    """Reject the revision you reviewed, saying why (the author edits and asks again)."""
    return _verdict(Verdict.REJECTED, actor, fleet, request_id, revision, note)


@transaction.atomic
def change_request_withdraw(*, actor: Actor, fleet: Fleet, request_id: int) -> ChangeRequest:
    """Close an open request without carrying it out (its author or a publisher)."""
    request = _lock_request(fleet, request_id)
    if request.state == ChangeRequest.State.CLOSED:
        return request
    _require_open(request)
    user = actor_user(actor)
    if (user is None or request.author_id != user.pk) and not has_role(actor, Role.PUBLISHER):
        raise ApplicationError(
            "Only its author or a publisher can withdraw a change request.",
            code="permission_denied",
            status=403,
        )
    summary = f"Withdrew change request {request.pk}"
    change_request_finish(request, "withdrawn", actor=actor, summary=summary)
    return request


@transaction.atomic
def change_request_publish(
    *, actor: Actor, fleet: Fleet, request_id: int, revision: int, note: str = ""
) -> PolicyVersion:
    """Publish the request's draft: the normal publish, which takes the approval of `revision`."""
    request = _lock_request(fleet, request_id)
    _require_open(request)
    if request.kind != ChangeRequest.Kind.PUBLISH:
        raise Conflict(
            f"Change request {request.pk} is not a publish: start the rollout or switch as usual.",
            code="not_a_publish",
        )
    status = review_status(request, request.verdicts.all())
    if status.status != "approved":
        raise Conflict(
            f"Change request {request.pk} is {status.status} at revision {status.revision}: "
            "it needs another publisher's approval of this revision first.",
            code="approval_stale" if status.withdrawn else "approval_required",
        )
    return policy_version_publish(
        actor=actor, fleet=fleet, revision=revision, note=note or request.note
    )


@transaction.atomic
def fleet_freeze_release(*, actor: Actor, fleet: Fleet, note: str) -> FleetFreeze:
    """Acknowledge why the fleet was frozen (a note) and let rollouts go on; a repeat is a no-op."""
    _publisher_only(actor, "release a freeze")
    text = note.strip()
    fleet_routing_lock(fleet)  # serialised with every start and switch of the fleet
    freeze = fleet_freeze_open(fleet_id=fleet.pk)
    if freeze is None:
        last = FleetFreeze.objects.filter(fleet=fleet).first()
        if last is not None:
            return last
        raise Conflict(f"Fleet {fleet.slug!r} is not frozen.", code="not_frozen")
    freeze.released_at = timezone.now()
    freeze.released_by = actor_user(actor)
    freeze.released_by_name = actor_name(actor)
    freeze.release_note = text
    freeze.save(update_fields=["released_at", "released_by", "released_by_name", "release_note"])
    audit_of(
        "fleet",
        None,
        "unfrozen",
        actor=actor,
        fleet=fleet,
        summary=f"Acknowledged the freeze ({freeze.reason}): {text}",
        before={"frozen": True, "reason": freeze.reason},
        after={"frozen": False, "note": text},
    )
    freeze_notify(
        fleet, freeze, "unfrozen", f"{freeze.released_by_name} released the freeze: {text}"
    )
    logger.info("fleet.unfrozen fleet=%s freeze=%d", fleet.slug, freeze.pk)
    return freeze
