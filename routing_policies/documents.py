"""The policy document of PROTOCOL.md, its ETag, and diffs between tables. Pure functions."""

import hashlib
import json
from datetime import datetime
from itertools import product
from typing import Any

from .cell_schema import CELL_FIELDS, DIMENSIONS, CellKey, cell_key_label, nest

Table = dict[CellKey, dict[str, Any]]


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
    etag: str = "",
) -> dict[str, Any]:
    """The document a device receives (and the export format)."""
    cells = [cell_document(key, table[key]) for key in ordered_keys(dimensions) if key in table]
    content = {"fleet": fleet_slug, "dimensions": dimensions, "cells": cells}
    if number is not None and not etag:
        etag = document_etag(number, content)
    return {
        "fleet": fleet_slug,
        "version": number,
        "etag": etag,
        "published_at": published_at.isoformat().replace("+00:00", "Z") if published_at else None,
        "dimensions": dimensions,
        "cells": cells,
    }


def content_for_etag(
    fleet_slug: str, dimensions: dict[str, list[str]], table: Table
) -> dict[str, Any]:
    """The part of the document the ETag covers."""
    cells = [cell_document(key, table[key]) for key in ordered_keys(dimensions) if key in table]
    return {"fleet": fleet_slug, "dimensions": dimensions, "cells": cells}


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


def flatten_table(table: Table) -> dict[str, Any]:
    """`{"voice/interactive/sensitive.threshold": 0.6, ...}`: a table as one flat dict for diffs."""
    return {
        f"{cell_key_label(key)}.{field}": value
        for key, values in table.items()
        for field, value in values.items()
    }
