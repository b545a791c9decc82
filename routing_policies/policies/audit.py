"""The audit log's one writer, and who an action is done by: every part records through here."""

from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from ..documents import diff_flat
from .models import AuditEntry, Fleet

Actor = AbstractBaseUser | AnonymousUser | None


def actor_user(actor: Actor) -> Any:
    """The user to store for an action, or None for the system and anonymous requests."""
    return actor if actor is not None and actor.is_authenticated else None


def actor_name(actor: Actor) -> str:
    """The name an action is recorded under: the username, or `system`."""
    user = actor_user(actor)
    return user.get_username() if user is not None else "system"


def audit_record(
    *,
    actor: Actor,
    action: str,
    fleet: Fleet | None,
    target: str = "",
    summary: str = "",
    before: Any = None,
    after: Any = None,
    diff: list[dict[str, Any]] | None = None,
) -> AuditEntry:
    """Append one audit entry; the diff is computed from flat before/after dicts when not given.
    An entry about a fleet as a whole leaves out `target`: it is then `fleet <slug>`."""
    if not target:
        target = f"fleet {fleet.slug}" if fleet is not None else ""
    if diff is None:
        diff = diff_flat(before or {}, after or {}) if isinstance(before or after, dict) else []
    return AuditEntry.objects.create(
        actor=actor_user(actor),
        actor_name=actor_name(actor),
        action=action,
        fleet=fleet,
        target=target,
        summary=summary[:500],
        before=before,
        after=after,
        diff=diff,
    )


def audit_of(
    subject: str,
    ident: object,
    action: str,
    *,
    actor: Actor,
    fleet: Fleet,
    summary: str,
    noun: str = "",
    **states: Any,
) -> AuditEntry:
    """Append the audit entry of one change to one of the fleet's objects, in the log's one
    vocabulary: `<subject>.<action>` on `<subject> <ident>`, the subject's underscores read as
    spaces (`change_request.opened` on `change request 7`) or `noun` when the target names it
    otherwise; `states`: before, after. An `ident` of None: the fleet itself (`fleet.created`,
    target `fleet <slug>`)."""
    target = f"{noun or subject.replace('_', ' ')} {ident}" if ident is not None else ""
    return audit_record(
        actor=actor,
        action=f"{subject}.{action}",
        fleet=fleet,
        target=target,
        summary=summary,
        **states,
    )
