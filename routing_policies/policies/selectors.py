"""Reads of fleets, versions, documents, diffs and the audit log."""

import json
from typing import TYPE_CHECKING, Any, TypedDict, cast

from django.db.models import Exists, F, Max, OuterRef, QuerySet, Subquery
from django_stubs_ext import WithAnnotations

from controlplane.exceptions import NotFound

from ..cell_schema import DIMENSIONS, CellKey
from ..documents import (
    Overrides,
    Table,
    build_document,
    content_for_etag,
    diff_overrides,
    diff_tables,
    ordered_keys,
)
from .models import AuditEntry, Fleet, PolicyCell, PolicyVersion
from .signals import fleet_running_annotations, segment_rules

VersionRef = int | str  # a number, "draft" or "latest"


class FleetState(TypedDict):
    """What `fleet_list` adds to each fleet, so a list needs no query per fleet."""

    latest_number: int | None
    has_draft: bool
    draft_revision: int | None
    stable_number: int | None
    candidate_number: int | None
    candidate_stage: int | None


if TYPE_CHECKING:  # WithAnnotations takes a TypedDict only for the type checker
    FleetWithState = WithAnnotations[Fleet, FleetState]
else:
    FleetWithState = Fleet


def fleet_list() -> QuerySet[FleetWithState]:
    """Fleets with their latest published number, their draft's revision (None: no draft), and
    what their devices run: the stable number, and the open rollout's candidate and stage (as
    the rollouts part annotates them, signals.fleet_running_annotations)."""
    drafts = PolicyVersion.objects.filter(fleet=OuterRef("pk"), published_at__isnull=True)
    fleets = Fleet.objects.annotate(
        latest_number=Max("versions__number"),
        has_draft=Exists(drafts),
        draft_revision=Subquery(drafts.values("revision")[:1]),
        **fleet_running_annotations(),
    )
    # The running annotations come from the part that plugs them in: the type checker can't see.
    return cast("QuerySet[FleetWithState]", fleets.order_by("slug"))


def fleet_get(*, slug: str) -> Fleet:
    """The fleet, or a 404 application error."""
    try:
        return Fleet.objects.get(slug=slug)
    except Fleet.DoesNotExist:
        raise NotFound(f"Fleet {slug!r} does not exist.") from None


def fleet_state_get(*, slug: str) -> FleetWithState:
    """The fleet annotated as in `fleet_list`, or a 404 application error."""
    fleet = fleet_list().filter(slug=slug).first()
    if fleet is None:
        raise NotFound(f"Fleet {slug!r} does not exist.")
    return fleet


def draft_get(*, fleet: Fleet) -> PolicyVersion | None:
    """The fleet's draft, if it has one."""
    return PolicyVersion.objects.filter(fleet=fleet, published_at__isnull=True).first()


def latest_published(*, fleet: Fleet) -> PolicyVersion | None:
    """The highest-numbered published version."""
    return (
        PolicyVersion.objects.filter(fleet=fleet, number__isnull=False).order_by("-number").first()
    )


def version_get(*, fleet: Fleet, ref: VersionRef) -> PolicyVersion:
    """A version by number, or `draft`, or `latest` (published); 404 when absent."""
    version: PolicyVersion | None
    if ref == "draft":
        version = draft_get(fleet=fleet)
    elif ref == "latest":
        version = latest_published(fleet=fleet)
    else:
        try:
            number = int(ref)
        except (TypeError, ValueError):
            raise NotFound(
                f"{ref!r} is not a version: use a number, 'draft' or 'latest'."
            ) from None
        version = PolicyVersion.objects.filter(fleet=fleet, number=number).first()
    if version is None:
        raise NotFound(f"Fleet {fleet.slug!r} has no version {ref!r}.")
    return version


def versions_list(*, fleet: Fleet) -> QuerySet[PolicyVersion]:
    """Draft first, then published versions newest first, with their people."""
    return (
        PolicyVersion.objects.filter(fleet=fleet)
        .select_related("created_by", "published_by", "based_on")
        # The draft has no number: nulls first puts it ahead of the newest published version.
        .order_by(F("number").desc(nulls_first=True))
    )


def version_table(*, version: PolicyVersion) -> Table:
    """The version's cells keyed by (task_type, latency_budget, privacy_tier), one query."""
    return {cell.key: cell.values() for cell in PolicyCell.objects.filter(version=version)}


def version_overrides(
    *, version: PolicyVersion, rules: dict[str, dict[str, Any]] | None = None
) -> Overrides:
    """The version's overrides by segment in precedence order, each with its segment's rule: a
    published version's as it was published, a draft's the fleet's segment's now (`rules`, if
    read already; None for a segment the fleet no longer has)."""
    if not version.is_draft or not version.overrides:
        return list(version.overrides)
    if rules is None:
        rules = segment_rules(fleet=version.fleet)
    return [{**override, "rule": rules.get(override["segment"])} for override in version.overrides]


def draft_same_as(
    *, fleet: Fleet, draft: PolicyVersion, table: Table | None = None
) -> PolicyVersion | None:
    """The published version the draft is identical to (same dimensions, same cells): the one
    it started from, else the latest; None when it differs from both. Publishing it would add
    a copy, so `policy_version_publish` refuses it (`no_changes`) and the page disables Publish.
    """
    if table is None:
        table = version_table(version=draft)
    mine = content_for_etag(fleet.slug, draft.dimensions, table, version_overrides(version=draft))
    latest = latest_published(fleet=fleet)
    seen: set[int] = set()
    for version in (draft.based_on, latest):
        if version is None or version.pk in seen or version.published_at is None:
            continue
        seen.add(version.pk)
        theirs = content_for_etag(
            fleet.slug, version.dimensions, version_table(version=version), version.overrides
        )
        if theirs == mine:
            return version
    return None


def version_document(*, version: PolicyVersion) -> dict[str, Any]:
    """The policy document of PROTOCOL.md for this version (drafts have no number or ETag)."""
    return build_document(
        fleet_slug=version.fleet.slug,
        number=version.number,
        published_at=version.published_at,
        dimensions=version.dimensions,
        table=version_table(version=version),
        overrides=version_overrides(version=version),
        etag=version.etag,
    )


def _newest_published_numbers(fleet_id: Any) -> QuerySet[PolicyVersion, int | None]:
    return (
        PolicyVersion.objects.filter(fleet_id=fleet_id, number__isnull=False)
        .order_by("-number")
        .values_list("number", flat=True)
    )


def latest_published_number(*, fleet_id: int) -> int | None:
    """The number of the fleet's newest published version (None while it has none)."""
    number: int | None = _newest_published_numbers(fleet_id).first()
    return number


def latest_published_number_subquery() -> Subquery:
    """`latest_published_number` as a subquery of a row with a `fleet_id` (read with that row in
    one round trip)."""
    return Subquery(_newest_published_numbers(OuterRef("fleet_id"))[:1])


def published_version_get(*, fleet_id: int, number: int) -> PolicyVersion | None:
    """The fleet's published version with this number, with its fleet."""
    return (
        PolicyVersion.objects.select_related("fleet")
        .filter(fleet_id=fleet_id, number=number)
        .first()
    )


def published_document_json(*, fleet_id: int, number: int) -> str | None:
    """The policy document of a published version as compact JSON text (for the push tier,
    which sends it as it is), or None when the fleet has no such version."""
    version = published_version_get(fleet_id=fleet_id, number=number)
    if version is None:
        return None
    return json.dumps(version_document(version=version), separators=(",", ":"))


def version_grid(*, version: PolicyVersion) -> list[dict[str, Any]]:
    """Rows of the latency–privacy matrix: (task type, latency budget) down, privacy tier across."""
    table = {cell.key: cell for cell in PolicyCell.objects.filter(version=version)}
    dims = version.dimensions
    rows = []
    for task_type in dims["task_type"]:
        for budget in dims["latency_budget"]:
            rows.append(
                {
                    "task_type": task_type,
                    "latency_budget": budget,
                    "cells": [
                        table.get((task_type, budget, tier)) for tier in dims["privacy_tier"]
                    ],
                }
            )
    return rows


def version_diff(*, fleet: Fleet, a: VersionRef, b: VersionRef) -> dict[str, Any]:
    """Field-by-field differences from version `a` to version `b`."""
    version_a, version_b = version_get(fleet=fleet, ref=a), version_get(fleet=fleet, ref=b)
    diff = diff_tables(
        version_a.dimensions,
        version_table(version=version_a),
        version_b.dimensions,
        version_table(version=version_b),
    )
    diff["overrides"] = diff_overrides(
        version_overrides(version=version_a), version_overrides(version=version_b)
    )
    diff.update({"fleet": fleet.slug, "a": version_a.label, "b": version_b.label})
    return diff


def audit_list(*, fleet: Fleet | None = None, limit: int = 200) -> QuerySet[AuditEntry]:
    """Newest audit entries first, optionally for one fleet."""
    entries = AuditEntry.objects.select_related("fleet")
    if fleet is not None:
        entries = entries.filter(fleet=fleet)
    return entries[:limit]


def cell_keys(*, dimensions: dict[str, list[str]]) -> list[CellKey]:
    """All keys a table with these dimensions must have."""
    return ordered_keys({name: dimensions[name] for name in DIMENSIONS})


def published_versions(*, fleet: Fleet) -> list[dict[str, Any]]:
    """Every published version, newest first: what a rollout or a switch can name."""
    return [
        {"number": number, "note": note, "published_at": published_at}
        for number, note, published_at in PolicyVersion.objects.filter(
            fleet=fleet, number__isnull=False
        )
        .order_by("-number")
        .values_list("number", "note", "published_at")
    ]


def published_numbers(*, fleet: Fleet) -> list[int]:
    """The numbers of the fleet's published versions, newest first."""
    numbers = (
        PolicyVersion.objects.filter(fleet=fleet, number__isnull=False)
        .order_by("-number")
        .values_list("number", flat=True)
    )
    return [number for number in numbers if number is not None]


def default_diff_refs(*, fleet: Fleet) -> tuple[str, str]:
    """What the diff page compares when not told: b, the draft (else the latest); a, the
    published version before b."""
    draft = draft_get(fleet=fleet)
    latest = latest_published(fleet=fleet)
    if draft is not None:
        return (str(latest.number) if latest else "draft", "draft")
    if latest is None:
        return ("", "")
    previous = (
        PolicyVersion.objects.filter(fleet=fleet, number__lt=latest.number)
        .order_by("-number")
        .first()
    )
    return (str(previous.number if previous else latest.number), str(latest.number))
