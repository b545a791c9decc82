"""The policy document of PROTOCOL.md, its ETag, and diffs between tables. Pure functions.

A version's overrides by segment (docs/segments.md) are a section of its document, present only
when it has some, so a version without them keeps its document and ETag byte for byte.
"""

import hashlib
import json
from datetime import datetime
from itertools import product
from typing import Any

from .cell_schema import CELL_FIELDS, DIMENSIONS, CellKey, cell_key_label, nest

Table = dict[CellKey, dict[str, Any]]
# A version's overrides as stored (PolicyVersion.overrides), in precedence order:
# [{"segment": name, "rule": rule or None, "cells": {"voice/interactive/normal": {path: value}}}]
Overrides = list[dict[str, Any]]


def ordered_keys(dimensions: dict[str, list[str]]) -> list[CellKey]:
    """Every cell key in the table's display order (dimension values in their listed order)."""
    return list(product(*(dimensions[name] for name in DIMENSIONS)))  # type: ignore[arg-type]


def cell_document(key: CellKey, values: dict[str, Any]) -> dict[str, Any]:
    """One cell as it appears in the policy document.

    An optional field at its default is left out (devices read the default): the documents
    of versions published before the field existed stay as they were, ETag included.
    """
    doc: dict[str, Any] = dict(zip(DIMENSIONS, key, strict=True))
    flat: dict[str, Any] = {}
    for spec in CELL_FIELDS:
        if spec.optional:
            value = values.get(spec.path, spec.default)
            if value != spec.default:
                flat[spec.path] = value
        else:
            flat[spec.path] = values[spec.path]
    doc.update(nest(flat))
    return doc


def overrides_document(dimensions: dict[str, list[str]], overrides: Overrides) -> list[Any]:
    """The `overrides` section of the document: each segment with its rule inlined (a device
    cannot look one up) and its cells in the table's order, each the cell's key and the fields
    it changes, nested as a cell nests them."""
    section = []
    for override in overrides:
        cells = override["cells"]
        section.append(
            {
                "segment": override["segment"],
                "rule": override["rule"],
                "cells": [
                    {**dict(zip(DIMENSIONS, key, strict=True)), **nest(cells[label])}
                    for key in ordered_keys(dimensions)
                    if (label := cell_key_label(key)) in cells
                ],
            }
        )
    return section


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def document_etag(number: int, content: dict[str, Any]) -> str:
    """Stable ETag of a version's content: the same table always gives the same tag."""
    digest = hashlib.sha256(_canonical(content)).hexdigest()[:16]
    return f'"v{number}-{digest}"'


def build_document(
    *,
    fleet_slug: str,
    number: int | None,
    published_at: datetime | None,
    dimensions: dict[str, list[str]],
    table: Table,
    overrides: Overrides | None = None,
    etag: str = "",
) -> dict[str, Any]:
    """The document a device receives (and the export format)."""
    content = content_for_etag(fleet_slug, dimensions, table, overrides)
    if number is not None and not etag:
        etag = document_etag(number, content)
    document = {
        "fleet": fleet_slug,
        "version": number,
        "etag": etag,
        "published_at": published_at.isoformat().replace("+00:00", "Z") if published_at else None,
        "dimensions": dimensions,
        "cells": content["cells"],
    }
    if "overrides" in content:
        document["overrides"] = content["overrides"]
    return document


def content_for_etag(
    fleet_slug: str,
    dimensions: dict[str, list[str]],
    table: Table,
    overrides: Overrides | None = None,
) -> dict[str, Any]:
    """The part of the document the ETag covers (the overrides only when there are some)."""
    cells = [cell_document(key, table[key]) for key in ordered_keys(dimensions) if key in table]
    content: dict[str, Any] = {"fleet": fleet_slug, "dimensions": dimensions, "cells": cells}
    if overrides:
        content["overrides"] = overrides_document(dimensions, overrides)
    return content


def diff_flat(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """Fields whose values differ between two flat dicts, in a stable order."""
    changes = []
    for field in sorted(set(before) | set(after)):
        old, new = before.get(field), after.get(field)
        if old != new:
            changes.append({"field": field, "before": old, "after": new})
    return changes


def diff_tables(
    a_dimensions: dict[str, list[str]],
    a_table: Table,
    b_dimensions: dict[str, list[str]],
    b_table: Table,
) -> dict[str, Any]:
    """What changed from table A to table B: dimension values and cells, field by field."""
    dimension_changes = {}
    for name in DIMENSIONS:
        a_values, b_values = a_dimensions.get(name, []), b_dimensions.get(name, [])
        added = [v for v in b_values if v not in a_values]
        removed = [v for v in a_values if v not in b_values]
        if added or removed:
            dimension_changes[name] = {"added": added, "removed": removed}
    keys = ordered_keys(b_dimensions) + [k for k in ordered_keys(a_dimensions) if k not in b_table]
    cells = []
    for key in keys:
        in_a, in_b = key in a_table, key in b_table
        if in_a and in_b:
            fields = diff_flat(a_table[key], b_table[key])
            if fields:
                cells.append({"cell": cell_key_label(key), "status": "changed", "fields": fields})
        elif in_b:
            cells.append(
                {
                    "cell": cell_key_label(key),
                    "status": "added",
                    "fields": diff_flat({}, b_table[key]),
                }
            )
        elif in_a:
            cells.append(
                {
                    "cell": cell_key_label(key),
                    "status": "removed",
                    "fields": diff_flat(a_table[key], {}),
                }
            )
    return {"dimensions": dimension_changes, "cells": cells, "changed_cells": len(cells)}


def diff_overrides(a: Overrides, b: Overrides) -> list[dict[str, Any]]:
    """What changed in the overrides from A to B, segment by segment in B's order (then those
    only A has): `added`, `removed`, or `changed` with each cell field's change (`cell/field`),
    its rule's change and its place in the precedence (`position`, from 1)."""
    a_by = {o["segment"]: (i, o) for i, o in enumerate(a)}
    b_by = {o["segment"]: (i, o) for i, o in enumerate(b)}
    changes = []
    for name in [*b_by, *(n for n in a_by if n not in b_by)]:
        before, after = a_by.get(name), b_by.get(name)
        flat_a = _flat_override(before[1], before[0]) if before else {}
        flat_b = _flat_override(after[1], after[0]) if after else {}
        fields = diff_flat(flat_a, flat_b)
        if fields:
            status = "changed" if before and after else "added" if after else "removed"
            changes.append({"segment": name, "status": status, "fields": fields})
    return changes


def _flat_override(override: dict[str, Any], index: int) -> dict[str, Any]:
    flat: dict[str, Any] = {"position": index + 1, "rule": override.get("rule")}
    for label, values in override["cells"].items():
        flat.update({f"{label}.{path}": value for path, value in values.items()})
    return flat


def flatten_table(table: Table) -> dict[str, Any]:
    """`{"voice/interactive/sensitive.threshold": 0.6, ...}`: a table as one flat dict for diffs."""
    return {
        f"{cell_key_label(key)}.{field}": value
        for key, values in table.items()
        for field, value in values.items()
    }
