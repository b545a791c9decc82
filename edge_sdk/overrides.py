"""Policy overrides by segment: the table a device runs, resolved from its version and its
attributes (docs/PROTOCOL.md, extension "Overrides by segment"; docs/segments.md).

A version's document may carry `overrides`: a list of `{"segment", "rule", "cells"}`, each
`rule` a segment rule (edge_sdk.segments) inlined, because a device cannot look a segment up,
and each of its `cells` a cell's key with the fields it changes (nested as the document nests
them: `{"threshold": 0.7, "weights": {...}}`). Precedence is the list's order, per cell: a cell
takes the fields of the **first** override whose rule the device matches and that names the
cell, over the base cell's; the other overrides do not touch that cell. So every cell a device
can run is the base cell with one override's fields, a cell the server validated whole (the
weights of two segments are never mixed into a sum the server never checked).

`resolve_cells` is the one resolution, pure, standard library only: the SDK's policy store runs
it on every document it applies, the control plane (routing_policies.segments.rules re-exports
it) to show which cell values a device runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from edge_sdk.segments import rule_matches

__all__ = ["cell_winners", "matching_overrides", "merge_cell", "resolve_cells"]

_KEY = ("task_type", "latency_budget", "privacy_tier")


def matching_overrides(
    document: Mapping[str, Any], attributes: Mapping[str, object]
) -> tuple[int, ...]:
    """The indexes of the document's overrides whose rule a device with these attributes
    matches, in precedence order (a document without overrides: none)."""
    overrides = document.get("overrides") or ()
    return tuple(
        index
        for index, override in enumerate(overrides)
        if rule_matches(override["rule"], attributes)
    )


def merge_cell(base: Mapping[str, Any], fields: Mapping[str, Any]) -> dict[str, Any]:
    """A document cell with an override's fields over its own (a group such as `weights`
    merged field by field; the document nests one level deep)."""
    merged = dict(base)
    for name, value in fields.items():
        if name in _KEY:
            continue
        if isinstance(value, Mapping) and isinstance(merged.get(name), Mapping):
            merged[name] = {**merged[name], **value}
        else:
            merged[name] = value
    return merged


def _key(cell: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(cell.get(name) for name in _KEY)


def cell_winners(document: Mapping[str, Any], matched: Sequence[int]) -> dict[tuple[Any, ...], int]:
    """For each cell the matched overrides name, the index of the one it takes (the first in
    precedence order)."""
    winners: dict[tuple[Any, ...], int] = {}
    overrides = document.get("overrides") or ()
    for index in matched:
        for fields in overrides[index]["cells"]:
            winners.setdefault(_key(fields), index)
    return winners


def resolve_cells(
    document: Mapping[str, Any],
    attributes: Mapping[str, object],
    *,
    matched: Sequence[int] | None = None,
) -> list[dict[str, Any]]:
    """The document's cells as a device with these attributes runs them, in the document's
    order: each the base cell, or the base cell with the fields of the first matching override
    that names it. `matched` (from `matching_overrides`) spares evaluating the rules again."""
    if matched is None:
        matched = matching_overrides(document, attributes)
    cells: list[dict[str, Any]] = [dict(cell) for cell in document["cells"]]
    if not matched:
        return cells
    overrides = document["overrides"]
    fields = {
        key: next(f for f in overrides[index]["cells"] if _key(f) == key)
        for key, index in cell_winners(document, matched).items()
    }
    return [
        merge_cell(cell, fields[key]) if (key := _key(cell)) in fields else cell for cell in cells
    ]
