"""Every write a user can cause to fleets and policy versions: one function per use case.

Each runs in one explicit transaction, locks what it changes (`select_for_update`), validates
before writing, and records an audit entry. Drafts carry a revision; an edit that names a stale
revision is refused with 409 rather than silently overwriting someone else's change.
"""

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from controlplane.exceptions import Conflict, NotFound, ValidationFailed

from ..cell_schema import (
    DEFAULT_CELL_VALUES,
    DIMENSIONS,
    FIELDS_BY_PATH,
    SEED_DIMENSIONS,
    CellKey,
    cell_key_label,
    document_cell,
)
from ..documents import (
    Table,
    content_for_etag,
    diff_flat,
    document_etag,
    flatten_table,
    ordered_keys,
)
from ..validation import (
    MAX_DIMENSION_VALUES,
    MAX_OVERRIDES,
    Problem,
    override_problems,
    overrides_from_document,
    overrides_problems,
    table_problems,
    validate_cell,
    validate_coverage,
    validate_dimensions,
)
from .audit import Actor, actor_user, audit_of, audit_record
from .models import MAX_NOTE_LENGTH, Fleet, PolicyCell, PolicyVersion
from .sdk_cells import privacy_problems
from .selectors import draft_same_as, version_overrides, version_table
from .signals import fleet_created, segment_rules, version_published, version_publishing

logger = logging.getLogger(__name__)


def _raise_problems(message: str, problems: list[Problem]) -> None:
    if problems:
        raise ValidationFailed(message, details=[p.as_dict() for p in problems])


def _create_cells(version: PolicyVersion, table: Table) -> None:
    """The rows of `table`'s cells in `version`, in the order the table lists them."""
    cells = []
    for key, values in table.items():
        cell = PolicyCell(
            version=version, task_type=key[0], latency_budget=key[1], privacy_tier=key[2]
        )
        cell.apply_values(values)
        cells.append(cell)
    PolicyCell.objects.bulk_create(cells)


def _write_cells(version: PolicyVersion, table: Table) -> None:
    """Every cell of the version's dimensions, in the document's order."""
    _create_cells(version, {key: table[key] for key in ordered_keys(version.dimensions)})


def _lock_fleet(fleet: Fleet) -> Fleet:
    return Fleet.objects.select_for_update().get(pk=fleet.pk)


def _lock_draft(*, fleet: Fleet, revision: int) -> PolicyVersion:
    draft = (
        PolicyVersion.objects.select_for_update()
        .filter(fleet=fleet, published_at__isnull=True)
        .first()
    )
    if draft is None:
        raise Conflict(
            f"Fleet {fleet.slug!r} has no draft (it may just have been published or discarded). "
            "Create a new draft to edit.",
            code="no_draft",
        )
    if draft.revision != revision:
        raise Conflict(
            f"The draft changed since you loaded it: you edited revision {revision}, it is now at "
            f"revision {draft.revision}. Reload to see the other changes, then apply yours again.",
            code="stale_revision",
            details=[
                {
                    "field": "revision",
                    "message": f"current revision is {draft.revision}",
                    "current_revision": draft.revision,
                }
            ],
        )
    return draft


def _audit_draft(action: str, *, actor: Actor, fleet: Fleet, summary: str, **change: Any) -> None:
    """Record a change of the fleet's draft in the audit log."""
    audit_record(
        actor=actor,
        action=action,
        fleet=fleet,
        target=f"{fleet.slug} draft",
        summary=summary,
        **change,
    )


def _bump(draft: PolicyVersion) -> None:
    draft.revision += 1
    draft.save(update_fields=["revision", "dimensions", "overrides"])


def default_table(dimensions: dict[str, list[str]]) -> Table:
    """A valid table for these dimensions: the seed's auto cell everywhere, sensitive kept local."""
    table: Table = {}
    for key in ordered_keys(dimensions):
        values = dict(DEFAULT_CELL_VALUES)
        if key[2] == "sensitive":
            values.update({"upload.allowed": False, "mode": "device_only"})
        table[key] = values
    return table


@transaction.atomic
def fleet_create(
    *,
    actor: Actor,
    slug: str,
    name: str,
    description: str = "",
    dimensions: dict[str, list[str]] | None = None,
    table: Table | None = None,
) -> Fleet:
    """Create a fleet with a draft table (the given one, or defaults over the seed dimensions)."""
    dimensions = dimensions or {k: list(v) for k, v in SEED_DIMENSIONS.items()}
    problems = validate_dimensions(dimensions)
    _raise_problems("The dimensions are invalid.", problems)
    table = table if table is not None else default_table(dimensions)
    problems = validate_coverage(dimensions, list(table))
    for key, values in table.items():
        problems.extend(validate_cell(key, values)[1])
    _raise_problems("The table is invalid.", problems)
    if Fleet.objects.filter(slug=slug).exists():
        raise Conflict(f"A fleet with slug {slug!r} already exists.", code="duplicate")
    try:
        with transaction.atomic():
            fleet = Fleet.objects.create(slug=slug, name=name, description=description)
    except IntegrityError:
        raise Conflict(f"A fleet with slug {slug!r} already exists.", code="duplicate") from None
    draft = PolicyVersion.objects.create(
        fleet=fleet, dimensions=dimensions, created_by=actor_user(actor)
    )
    _write_cells(draft, table)
    fleet_created.send(sender=Fleet, actor=actor, fleet=fleet)
    audit_of(
        "fleet",
        None,
        "created",
        actor=actor,
        fleet=fleet,
        summary=f"Created fleet {slug} with a draft of {len(table)} cells",
        after={"slug": slug, "name": name, "description": description},
    )
    logger.info("fleet.created fleet=%s", slug)
    return fleet


@transaction.atomic
def fleet_cloud_price_set(
    *, actor: Actor, fleet: Fleet, per_1k_tokens: float | None = None, per_call: float | None = None
) -> Fleet:
    """Set the fleet's cloud price (either part; None keeps it), audited. The parts come as
    schemas.FleetCloudPriceInputSerializer validated them (the API's body and the lab's price
    form alike)."""
    fleet = _lock_fleet(fleet)
    before = {
        "cloud_price_per_1k_tokens": fleet.cloud_price_per_1k_tokens,
        "cloud_price_per_call": fleet.cloud_price_per_call,
    }
    if per_1k_tokens is not None:
        fleet.cloud_price_per_1k_tokens = float(per_1k_tokens)
    if per_call is not None:
        fleet.cloud_price_per_call = float(per_call)
    after = {
        "cloud_price_per_1k_tokens": fleet.cloud_price_per_1k_tokens,
        "cloud_price_per_call": fleet.cloud_price_per_call,
    }
    if after == before:
        return fleet
    fleet.save(update_fields=["cloud_price_per_1k_tokens", "cloud_price_per_call"])
    audit_of(
        "fleet",
        None,
        "cloud_price",
        actor=actor,
        fleet=fleet,
        summary=(
            f"Cloud price {fleet.cloud_price_per_1k_tokens:g} per 1k tokens, "
            f"{fleet.cloud_price_per_call:g} per call"
        ),
        before=before,
        after=after,
    )
    logger.info("fleet.cloud_price fleet=%s", fleet.slug)
    return fleet


@transaction.atomic
def policy_draft_create(
    *, actor: Actor, fleet: Fleet, from_number: int | None = None
) -> PolicyVersion:
    """Start the fleet's draft as a copy of a published version (default: the latest)."""
    fleet = _lock_fleet(fleet)
    if PolicyVersion.objects.filter(fleet=fleet, published_at__isnull=True).exists():
        raise Conflict(
            f"Fleet {fleet.slug!r} already has a draft; edit or discard it first.",
            code="draft_exists",
        )
    published = PolicyVersion.objects.filter(fleet=fleet, number__isnull=False)
    source = (
        published.filter(number=from_number).first()
        if from_number is not None
        else published.order_by("-number").first()
    )
    if source is None:
        raise ValidationFailed(
            f"Fleet {fleet.slug!r} has no published version {from_number}."
            if from_number is not None
            else f"Fleet {fleet.slug!r} has no published version to copy.",
            details=[{"field": "from_version", "message": "no such published version"}],
        )
    draft = PolicyVersion.objects.create(
        fleet=fleet,
        dimensions=source.dimensions,
        based_on=source,
        created_by=actor_user(actor),
        # A draft reads its segments' rules when asked; the published snapshot stays behind.
        overrides=[{**override, "rule": None} for override in source.overrides],
    )
    _write_cells(draft, version_table(version=source))
    _audit_draft(
        "policy_draft.created",
        actor=actor,
        fleet=fleet,
        summary=f"Started a draft from v{source.number}",
        after={"based_on": source.number},
    )
    logger.info("policy_draft.created fleet=%s based_on=%s", fleet.slug, source.number)
    return draft


@transaction.atomic
def policy_draft_discard(*, actor: Actor, fleet: Fleet, revision: int) -> None:
    """Throw the draft away (published versions are untouched)."""
    draft = _lock_draft(fleet=fleet, revision=revision)
    before = {
        "revision": draft.revision,
        "based_on": draft.based_on.number if draft.based_on else None,
    }
    draft.delete()
    _audit_draft(
        "policy_draft.discarded",
        actor=actor,
        fleet=fleet,
        summary="Discarded the draft",
        before=before,
    )


def _parse_edits(
    draft: PolicyVersion, edits: Sequence[Mapping[str, Any]]
) -> tuple[list[tuple[CellKey, dict[str, Any]]], list[Problem]]:
    """The edited cells and their changes: each a cell of the draft's table, edited once."""
    problems: list[Problem] = []
    parsed: list[tuple[CellKey, dict[str, Any]]] = []
    seen: set[CellKey] = set()
    valid_keys = set(ordered_keys(draft.dimensions))
    for edit in edits:
        key: CellKey = (edit["task_type"], edit["latency_budget"], edit["privacy_tier"])
        label = cell_key_label(key)
        if key not in valid_keys:
            problems.append(Problem("cell", "is not a cell of this table", label))
        elif key in seen:
            problems.append(Problem("cell", "is edited twice in one request", label))
        else:
            seen.add(key)
            parsed.append((key, dict(edit["values"])))
    return parsed, problems


@transaction.atomic
def policy_draft_update_cells(
    *,
    actor: Actor,
    fleet: Fleet,
    revision: int,
    edits: Sequence[Mapping[str, Any]],
    refused: Sequence[Problem] = (),
) -> PolicyVersion:
    """Change fields of one or several cells at once; all or nothing.

    `edits` is a list of `{"task_type", "latency_budget", "privacy_tier", "values": {path: value}}`
    (the API's come checked by schemas.DraftCellsEditSerializer). Each edited cell is checked
    whole, as it would be stored (its fields and the rules between them); `refused` are the
    problems the caller's input check found in other cells' values, refused with these.
    """
    draft = _lock_draft(fleet=fleet, revision=revision)
    parsed, problems = _parse_edits(draft, edits)
    if problems:
        _raise_problems("The edit is invalid; nothing was saved.", [*refused, *problems])
    problems = list(refused)
    cells = {
        cell.key: cell for cell in PolicyCell.objects.select_for_update().filter(version=draft)
    }
    updates: list[tuple[PolicyCell, dict[str, Any], dict[str, Any]]] = []
    for key, changes in parsed:
        cell = cells[key]
        before = cell.values()
        merged = {**before, **changes}
        cleaned, cell_problems = validate_cell(key, merged)
        problems.extend(cell_problems)
        if not cell_problems:
            updates.append((cell, before, cleaned))
    _raise_problems("Some cells are invalid; nothing was saved.", problems)
    audit_before: dict[str, Any] = {}
    audit_after: dict[str, Any] = {}
    changed_cells = []
    for cell, before, after in updates:
        if before == after:
            continue
        cell.apply_values(after)
        changed_cells.append(cell)
        label = cell_key_label(cell.key)
        for change in diff_flat(before, after):
            audit_before[f"{label}.{change['field']}"] = change["before"]
            audit_after[f"{label}.{change['field']}"] = change["after"]
    if not changed_cells:
        return draft
    attrs = sorted({FIELDS_BY_PATH[p.split(".", 1)[1]].attr for p in audit_after})
    PolicyCell.objects.bulk_update(changed_cells, attrs)
    _bump(draft)
    labels = ", ".join(cell_key_label(c.key) for c in changed_cells[:5])
    more = f" and {len(changed_cells) - 5} more" if len(changed_cells) > 5 else ""
    _audit_draft(
        "policy_cells.updated",
        actor=actor,
        fleet=fleet,
        summary=f"Edited {len(changed_cells)} cell(s): {labels}{more} (revision {draft.revision})",
        before=audit_before,
        after=audit_after,
    )
    logger.info(
        "policy_cells.updated fleet=%s cells=%d revision=%d",
        fleet.slug,
        len(changed_cells),
        draft.revision,
    )
    return draft


@transaction.atomic
def policy_draft_add_dimension_value(
    *,
    actor: Actor,
    fleet: Fleet,
    revision: int,
    dimension: str,
    value: str,
    copy_from: str | None = None,
) -> PolicyVersion:
    """Add a value to a dimension (e.g. task type `code`) and the cells it implies.

    Each new cell starts as a copy of its sibling with `copy_from` (default: the dimension's
    first value), so the table stays complete and valid. `dimension` and `value` come checked
    (schemas.DimensionValueAddInputSerializer); what needs the draft is checked here.
    """
    draft = _lock_draft(fleet=fleet, revision=revision)
    values = list(draft.dimensions[dimension])
    if value in values:
        raise Conflict(f"{dimension} already has the value {value!r}.", code="duplicate")
    if len(values) >= MAX_DIMENSION_VALUES:
        raise ValidationFailed(f"{dimension} already has {MAX_DIMENSION_VALUES} values.")
    source_value = copy_from or values[0]
    if source_value not in values:
        raise ValidationFailed(
            f"{source_value!r} is not a value of {dimension}.",
            details=[{"field": "copy_from", "message": "must be an existing value"}],
        )
    position = DIMENSIONS.index(dimension)
    table = version_table(version=draft)
    new_cells: Table = {}
    for key, cell_values in table.items():
        if key[position] == source_value:
            new_key = list(key)
            new_key[position] = value
            new_cells[(new_key[0], new_key[1], new_key[2])] = dict(cell_values)
    problems = []
    for key, cell_values in new_cells.items():
        problems.extend(validate_cell(key, cell_values)[1])
    _raise_problems(f"Copying {source_value!r} to {value!r} would make invalid cells.", problems)
    before_dims = {k: list(v) for k, v in draft.dimensions.items()}
    draft.dimensions = {**draft.dimensions, dimension: [*values, value]}
    _create_cells(draft, new_cells)
    _bump(draft)
    _audit_draft(
        "policy_dimension.value_added",
        actor=actor,
        fleet=fleet,
        summary=(
            f"Added {dimension} value {value!r} "
            f"({len(new_cells)} cells copied from {source_value!r})"
        ),
        before={f"dimensions.{dimension}": before_dims[dimension]},
        after={f"dimensions.{dimension}": draft.dimensions[dimension]},
    )
    return draft


@transaction.atomic
def policy_draft_remove_dimension_value(
    *, actor: Actor, fleet: Fleet, revision: int, dimension: str, value: str
) -> PolicyVersion:
    """Remove a value from a dimension together with its cells (at least one value remains)."""
    draft = _lock_draft(fleet=fleet, revision=revision)
    if dimension not in DIMENSIONS or value not in draft.dimensions.get(dimension, []):
        raise ValidationFailed(
            f"{dimension} has no value {value!r}.",
            details=[{"field": "value", "message": "no such value"}],
        )
    values = list(draft.dimensions[dimension])
    if len(values) == 1:
        raise ValidationFailed(
            f"{dimension} needs at least one value.",
            details=[{"field": "value", "message": "the last value cannot go"}],
        )
    PolicyCell.objects.filter(version=draft, **{dimension: value}).delete()
    draft.dimensions = {**draft.dimensions, dimension: [v for v in values if v != value]}
    # The overrides of the cells that went go with them (and an override left with none).
    position = DIMENSIONS.index(dimension)
    kept = []
    for override in draft.overrides:
        cells = {
            label: fields
            for label, fields in override["cells"].items()
            if label.split("/")[position] != value
        }
        if cells:
            kept.append({**override, "cells": cells})
    draft.overrides = kept
    _bump(draft)
    _audit_draft(
        "policy_dimension.value_removed",
        actor=actor,
        fleet=fleet,
        summary=f"Removed {dimension} value {value!r} and its cells",
        before={f"dimensions.{dimension}": values},
        after={f"dimensions.{dimension}": draft.dimensions[dimension]},
    )
    return draft


@transaction.atomic
def policy_draft_import(
    *, actor: Actor, fleet: Fleet, document: Mapping[str, Any], revision: int | None = None
) -> PolicyVersion:
    """Replace the draft's table with an imported policy document (export format).

    `document` comes checked field by field (schemas.document_input); what the whole table
    breaks is checked here, every problem named by cell and field, and nothing is saved unless
    all are fixed. Without a draft, one is created (then `revision` is not needed).
    """
    dimensions = {name: list(document["dimensions"][name]) for name in DIMENSIONS}
    cells = [document_cell(cell) for cell in document["cells"]]
    problems = table_problems(dimensions, cells)
    _raise_problems("The imported document is invalid; nothing was imported.", problems)
    table: Table = {}
    for key, values in cells:
        table.setdefault(key, values)
    # Its overrides by segment, checked as the draft's own are (the fleet's segments give
    # the rules: a document's inlined rule is what its source fleet had).
    overrides, problems = overrides_from_document(document.get("overrides"))
    problems += overrides_problems(table, overrides, list(segment_rules(fleet=fleet)))
    _raise_problems(
        "The imported document's overrides are invalid; nothing was imported.", problems
    )
    for override in overrides:
        override["cells"] = override_problems(override["segment"], table, override["cells"])[0]
    fleet = _lock_fleet(fleet)
    existing = PolicyVersion.objects.filter(fleet=fleet, published_at__isnull=True).exists()
    if existing:
        if revision is None:
            raise Conflict(
                "The fleet has a draft: say which revision you are replacing.",
                code="revision_required",
            )
        draft = _lock_draft(fleet=fleet, revision=revision)
        before_table = version_table(version=draft)
        before = {**flatten_table(before_table), **_flat_overrides(draft.overrides)}
        PolicyCell.objects.filter(version=draft).delete()
        draft.dimensions = dimensions
        draft.overrides = overrides
        draft.revision += 1
        draft.save(update_fields=["dimensions", "revision", "overrides"])
    else:
        before = {}
        draft = PolicyVersion.objects.create(
            fleet=fleet, dimensions=dimensions, created_by=actor_user(actor), overrides=overrides
        )
    _write_cells(draft, table)
    diff = diff_flat(before, {**flatten_table(table), **_flat_overrides(overrides)})
    _audit_draft(
        "policy_draft.imported",
        actor=actor,
        fleet=fleet,
        summary=f"Imported a document of {len(table)} cells ({len(diff)} field changes)",
        diff=diff,
        before={"fields_changed": len(diff)},
        after={"cells": len(table)},
    )
    return draft


@transaction.atomic
def policy_version_publish(
    *, actor: Actor, fleet: Fleet, revision: int, note: str
) -> PolicyVersion:
    """Publish the draft as the next numbered, immutable version.

    The fleet row is locked, so two publishers cannot both win and numbers stay consecutive.
    """
    note = note.strip()
    if not note:
        # A version runs on devices for weeks; the note is how people later tell why it exists.
        raise ValidationFailed(
            "Write a release note: what changed and why.",
            details=[{"field": "note", "message": "must not be empty"}],
        )
    if len(note) > MAX_NOTE_LENGTH:
        raise ValidationFailed(
            f"The note is too long ({MAX_NOTE_LENGTH:,} characters at most).",
            details=[{"field": "note", "message": f"at most {MAX_NOTE_LENGTH} characters"}],
        )
    fleet = _lock_fleet(fleet)
    draft = _lock_draft(fleet=fleet, revision=revision)
    table = version_table(version=draft)
    problems = validate_dimensions(draft.dimensions)
    if not problems:
        problems.extend(validate_coverage(draft.dimensions, list(table)))
    for key, values in table.items():
        problems.extend(validate_cell(key, values)[1])
    # Asked of the decision function itself, so no mode or rule can slip past it.
    problems.extend(privacy_problems(table))
    # The overrides: each segment still the fleet's, each cell a device of it runs valid whole;
    # their rules are inlined as they are now (the version never changes with the segment).
    rules = segment_rules(fleet=fleet)
    problems.extend(overrides_problems(table, draft.overrides, list(rules)))
    for override in draft.overrides:
        merged = {
            key: {**table[key], **fields}
            for label, fields in override["cells"].items()
            if (key := _key_of_label(label)) in table
        }
        problems.extend(replace(p, segment=override["segment"]) for p in privacy_problems(merged))
    _raise_problems("The draft cannot be published until these are fixed.", problems)
    draft.overrides = version_overrides(version=draft, rules=rules)
    same = draft_same_as(fleet=fleet, draft=draft, table=table)
    if same is not None:
        # A second number for the same table only muddles which version devices run and why.
        raise Conflict(
            f"Nothing to publish: the draft is identical to v{same.number}"
            f"{' (the version it started from)' if same == draft.based_on else ''}. "
            f"Change a cell first; to run v{same.number} on devices, roll it out or switch to "
            "it on the rollout page.",
            code="no_changes",
        )
    last = PolicyVersion.objects.filter(fleet=fleet).aggregate(m=Max("number"))["m"] or 0
    draft.number = last + 1
    draft.published_at = timezone.now()
    draft.published_by = actor_user(actor)
    draft.note = note
    draft.etag = document_etag(
        draft.number, content_for_etag(fleet.slug, draft.dimensions, table, draft.overrides)
    )
    # A fleet that reviews publishes needs an approval of this very revision (reviews/gate.py).
    version_publishing.send(sender=PolicyVersion, actor=actor, fleet=fleet, version=draft)
    draft.save(
        update_fields=["number", "published_at", "published_by", "note", "etag", "overrides"]
    )
    # A fleet's first published version is what its devices run (rollouts/receivers.py).
    version_published.send(sender=PolicyVersion, actor=actor, fleet=fleet, version=draft)
    previous = PolicyVersion.objects.filter(fleet=fleet, number=last).first() if last else None
    diff: list[dict[str, Any]] = []
    if previous is not None:
        prev_table = version_table(version=previous)
        diff = diff_flat(
            {**flatten_table(prev_table), **_flat_overrides(previous.overrides)},
            {**flatten_table(table), **_flat_overrides(draft.overrides)},
        )
    audit_record(
        actor=actor,
        action="policy_version.published",
        fleet=fleet,
        target=f"{fleet.slug} v{draft.number}",
        summary=f"Published v{draft.number}: {note}",
        before={"version": last or None},
        after={"version": draft.number, "etag": draft.etag},
        diff=diff,
    )
    logger.info("policy_version.published fleet=%s version=%d", fleet.slug, draft.number)
    return draft


# --- overrides by segment (docs/segments.md) -------------------------------------------------


def _key_of_label(label: str) -> CellKey:
    task_type, latency_budget, privacy_tier = label.split("/")
    return (task_type, latency_budget, privacy_tier)


def _flat_overrides(overrides: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """`{"overrides.npu.position": 1, "overrides.npu.voice/interactive/normal.threshold": 0.7}`:
    a version's overrides as one flat dict for the audit log's diffs."""
    flat: dict[str, Any] = {}
    for index, override in enumerate(overrides):
        place = f"overrides.{override['segment']}"
        flat[f"{place}.position"] = index + 1
        for label, fields in override["cells"].items():
            flat.update({f"{place}.{label}.{path}": value for path, value in fields.items()})
    return flat


@transaction.atomic
def policy_draft_override_set(
    *,
    actor: Actor,
    fleet: Fleet,
    revision: int,
    segment: str,
    cells: Mapping[str, Mapping[str, Any]],
    position: int | None = None,
) -> PolicyVersion:
    """Set the draft's override for `segment`: the cells it changes (label -> fields by
    document path) replace the segment's previous ones. `position` (from 1) is its place in
    the precedence (the first matching segment wins a cell); without one, an override keeps its
    place and a new one goes last. Checked as a cell is (validation.override_problems), the
    segment one of the fleet's; all or nothing, a revision like a cell edit, audited."""
    draft = _lock_draft(fleet=fleet, revision=revision)
    if segment not in segment_rules(fleet=fleet):
        raise ValidationFailed(
            f"Fleet {fleet.slug!r} has no segment {segment!r}.",
            details=[
                Problem("segment", "is not a segment of this fleet", segment=segment).as_dict()
            ],
        )
    table = version_table(version=draft)
    cleaned, problems = override_problems(segment, table, dict(cells))
    _raise_problems("The override is invalid; nothing was saved.", problems)
    overrides = [dict(o) for o in draft.overrides]
    current = next((i for i, o in enumerate(overrides) if o["segment"] == segment), None)
    if current is None and len(overrides) >= MAX_OVERRIDES:
        raise ValidationFailed(
            f"The draft overrides {MAX_OVERRIDES} segments, the most a version may.",
            details=[{"field": "segment", "message": f"at most {MAX_OVERRIDES} overrides"}],
        )
    entry = {"segment": segment, "rule": None, "cells": cleaned}
    before = _flat_overrides(draft.overrides)
    if current is not None:
        overrides.pop(current)
    at = current if position is None and current is not None else len(overrides)
    if position is not None:
        at = min(max(position - 1, 0), len(overrides))
    overrides.insert(at, entry)
    if overrides == draft.overrides:
        return draft
    draft.overrides = overrides
    _bump(draft)
    after = _flat_overrides(overrides)
    changes = diff_flat(before, after)
    _audit_draft(
        "policy_override.set",
        actor=actor,
        fleet=fleet,
        summary=f"Override for segment {segment}: {len(cleaned)} cell(s), precedence {at + 1} "
        f"(revision {draft.revision})",
        before={c["field"]: c["before"] for c in changes},
        after={c["field"]: c["after"] for c in changes},
    )
    logger.info("policy_override.set fleet=%s segment=%s", fleet.slug, segment)
    return draft


@transaction.atomic
def policy_draft_override_remove(
    *, actor: Actor, fleet: Fleet, revision: int, segment: str
) -> PolicyVersion:
    """Remove the draft's override for `segment` (a revision, audited)."""
    draft = _lock_draft(fleet=fleet, revision=revision)
    overrides = [o for o in draft.overrides if o["segment"] != segment]
    if len(overrides) == len(draft.overrides):
        raise NotFound(f"The draft has no override for segment {segment!r}.")
    before = _flat_overrides(draft.overrides)
    draft.overrides = overrides
    _bump(draft)
    changes = diff_flat(before, _flat_overrides(overrides))
    _audit_draft(
        "policy_override.removed",
        actor=actor,
        fleet=fleet,
        summary=f"Removed the override for segment {segment} (revision {draft.revision})",
        before={c["field"]: c["before"] for c in changes},
    )
    logger.info("policy_override.removed fleet=%s segment=%s", fleet.slug, segment)
    return draft
