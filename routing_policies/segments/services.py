"""Writes of segments: create, update (with the revision read), delete; each audited."""

import logging
from typing import Any

from django.db import IntegrityError, transaction

from controlplane.exceptions import Conflict, NotFound

from ..policies.audit import Actor, audit_of
from ..policies.models import Fleet, PolicyVersion
from .models import MAX_SEGMENTS_PER_FLEET, Segment
from .rules import rule_checked

logger = logging.getLogger(__name__)


def _duplicate(fleet: Fleet, name: str) -> Conflict:
    return Conflict(
        f"Fleet {fleet.slug!r} already has a segment {name!r}.",
        code="duplicate_name",
        details=[{"field": "name", "message": "already used in this fleet"}],
    )


def _state(segment: Segment) -> dict[str, Any]:
    return {"name": segment.name, "description": segment.description, "rule": segment.rule}


def _recorded(
    actor: Actor, fleet: Fleet, done: str, name: str, summary: str, **states: Any
) -> None:
    """A change of segment `name` in the audit log (`segment.<done>`) and the log."""
    audit_of("segment", name, done, actor=actor, fleet=fleet, summary=summary, **states)
    logger.info("segment.%s fleet=%s segment=%s", done, fleet.slug, name)


def _locked(fleet: Fleet, name: str) -> Segment:
    segment = Segment.objects.select_for_update().filter(fleet=fleet, name=name).first()
    if segment is None:
        raise NotFound(f"Fleet {fleet.slug!r} has no segment {name!r}.")
    return segment


def _in_use(fleet: Fleet, name: str, doing: str) -> None:
    """Refuse (409 naming them) to delete or rename a segment a version's overrides name: the
    draft would lose its segment, and a published version's history would name one the fleet
    no longer has (devices are not affected: a published version inlines the rule)."""
    versions = (
        PolicyVersion.objects.filter(fleet=fleet)
        .exclude(overrides=[])
        .order_by("-published_at", "-number")
    )
    using = [
        version.label
        for version in versions
        if any(override["segment"] == name for override in version.overrides)
    ]
    if using:
        raise Conflict(
            f"Segment {name!r} cannot be {doing}: the overrides of {', '.join(using)} name it. "
            "Remove its override from the draft first; a published version keeps it.",
            code="segment_in_use",
            details=[{"field": "name", "message": f"used by {', '.join(using)}"}],
        )


@transaction.atomic
def segment_create(
    *, actor: Actor, fleet: Fleet, name: str, rule: dict[str, Any], description: str = ""
) -> Segment:
    """Add a named segment to the fleet (the name unique in it)."""
    rule_checked(rule)
    # The fleet's row locked: two creates cannot both pass the count.
    Fleet.objects.select_for_update().filter(pk=fleet.pk).first()
    if Segment.objects.filter(fleet=fleet).count() >= MAX_SEGMENTS_PER_FLEET:
        raise Conflict(
            f"Fleet {fleet.slug!r} has {MAX_SEGMENTS_PER_FLEET} segments, the most it may.",
            code="too_many_segments",
        )
    try:
        with transaction.atomic():
            segment = Segment.objects.create(
                fleet=fleet, name=name, description=description, rule=rule
            )
    except IntegrityError:
        raise _duplicate(fleet, name) from None
    _recorded(actor, fleet, "created", name, f"Segment {name} created", after=_state(segment))
    return segment


@transaction.atomic
def segment_update(
    *,
    actor: Actor,
    fleet: Fleet,
    name: str,
    revision: int,
    new_name: str | None = None,
    description: str | None = None,
    rule: dict[str, Any] | None = None,
) -> Segment:
    """Change a segment's name, description or rule, as of the revision the editor read."""
    segment = _locked(fleet, name)
    if revision != segment.revision:
        raise Conflict(
            f"Segment {name!r} changed since you read it (revision {revision}, now "
            f"{segment.revision}).",
            code="stale_revision",
            details=[{"field": "revision", "message": f"now {segment.revision}"}],
        )
    before = _state(segment)
    if rule is not None:
        segment.rule = rule_checked(rule)
    if description is not None:
        segment.description = description
    if new_name is not None and new_name != segment.name:
        _in_use(fleet, name, "renamed")
        segment.name = new_name
    if _state(segment) == before:
        return segment  # nothing changed: no new revision, no audit entry
    segment.revision += 1
    try:
        with transaction.atomic():
            segment.save()
    except IntegrityError:
        raise _duplicate(fleet, segment.name) from None
    summary = f"Segment {name} changed (revision {segment.revision})"
    _recorded(actor, fleet, "updated", segment.name, summary, before=before, after=_state(segment))
    return segment


@transaction.atomic
def segment_delete(*, actor: Actor, fleet: Fleet, name: str) -> None:
    """Remove a segment (not one a version's overrides name)."""
    segment = _locked(fleet, name)
    _in_use(fleet, name, "deleted")
    before = _state(segment)
    segment.delete()
    _recorded(actor, fleet, "deleted", name, f"Segment {name} deleted", before=before)
