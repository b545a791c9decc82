"""Validation of cells and whole tables, naming the cell and the field of every problem.

Numbers are refused, never clamped: NaN, infinities, booleans posing as numbers, strings and
values out of range each get an error. Validation is pure (no database) so the same rules run
at save, at publish and at import.

`clean_value` is the one check of a cell field (its range or choices are CELL_FIELDS'): the
API's cell serializers (policies.schemas, generated from CELL_FIELDS) read each value sent
with it, and `validate_cell` each value of a cell as stored. What needs several fields or cells
(`cell_rules`, `validate_coverage`, `table_problems`) the services ask.
"""

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import product
from typing import Any

from .cell_schema import (
    CELL_FIELDS,
    DIMENSIONS,
    FIELD_PATHS,
    FIELDS_BY_PATH,
    SENSITIVE_TIER,
    WEIGHT_PATHS,
    WEIGHT_SUM_TOLERANCE,
    CellKey,
    FieldSpec,
    cell_key_label,
    flatten,
)

# A value of a dimension (`code`, `on-device`): the one pattern of the API, the pages (also as
# an HTML `pattern`, where a `-` in a class is escaped) and the checks of a whole table.
DIMENSION_VALUE_PATTERN = r"[a-z][a-z0-9_\-]{0,31}"
DIMENSION_VALUE_RE = re.compile(rf"\A{DIMENSION_VALUE_PATTERN}\Z")
MAX_DIMENSION_VALUE_LENGTH = 32
# The largest version number an API accepts (a PostgreSQL integer).
MAX_VERSION = 2**31 - 1
MAX_DIMENSION_VALUES = 32
MAX_CELLS = 4096


@dataclass(frozen=True, slots=True)
class Problem:
    """One validation problem: which cell (if any), which field, and what is wrong."""

    field: str
    message: str
    cell: str | None = None
    segment: str | None = None  # the override's segment, for a problem of an override

    def as_dict(self) -> dict[str, Any]:
        """JSON shape used by the API and the pages."""
        out: dict[str, Any] = {"field": self.field, "message": self.message}
        if self.segment is not None:
            out["segment"] = self.segment
        if self.cell is not None:
            out["cell"] = self.cell
        return out


def _format_range(spec: FieldSpec) -> str:
    low = "(" if spec.minimum_exclusive else "["
    return f"{low}{spec.minimum:g}, {spec.maximum:g}]"


def clean_value(spec: FieldSpec, value: Any) -> tuple[Any, str | None]:
    """Return (cleaned value, None) or (None, error message) for one field value."""
    if spec.kind == "choice":
        if not isinstance(value, str) or value not in spec.choices:
            return None, f"must be one of {', '.join(spec.choices)}; got {value!r}"
        return value, None
    if spec.kind == "bool":
        if not isinstance(value, bool):
            return None, f"must be true or false; got {value!r}"
        return value, None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None, f"must be a number; got {value!r}"
    if isinstance(value, float) and not math.isfinite(value):
        return None, f"must be a finite number; got {value!r}"
    if spec.kind == "int":
        if isinstance(value, float):
            if not value.is_integer():
                return None, f"must be a whole number; got {value!r}"
            value = int(value)
    else:
        value = float(value)
    assert spec.minimum is not None
    assert spec.maximum is not None
    below = value <= spec.minimum if spec.minimum_exclusive else value < spec.minimum
    if below or value > spec.maximum:
        unit = f" {spec.unit}" if spec.unit else ""
        return None, f"must be in {_format_range(spec)}{unit}; got {value!r}"
    return value, None


def validate_cell(key: CellKey, values: dict[str, Any]) -> tuple[dict[str, Any], list[Problem]]:
    """Check every field of one cell and the rules between fields.

    `values` maps document paths (`weights.length`) to values; unknown paths are refused.
    Returns the cleaned values and the problems found (empty when the cell is valid).
    """
    label = cell_key_label(key)
    problems: list[Problem] = []
    cleaned: dict[str, Any] = {}
    for path in values:
        if path not in FIELDS_BY_PATH:
            problems.append(Problem(path, "is not a field of a policy cell", label))
    for spec in CELL_FIELDS:
        if spec.path not in values:
            if spec.optional:
                cleaned[spec.path] = spec.default
            else:
                problems.append(Problem(spec.path, "is required", label))
            continue
        value, error = clean_value(spec, values[spec.path])
        if error:
            problems.append(Problem(spec.path, error, label))
        else:
            cleaned[spec.path] = value
    problems.extend(cell_rules(key, cleaned))
    return cleaned, problems


def cell_rules(key: CellKey, values: dict[str, Any]) -> list[Problem]:
    """The rules between the fields of one cell (each field already checked on its own): the
    weights sum to 1, and the privacy tier allows what the mode and the shadow refines send.
    Fields that are missing (refused on their own) leave their rules unasked."""
    label = cell_key_label(key)
    problems: list[Problem] = []
    if all(path in values for path in WEIGHT_PATHS):
        total = sum(values[path] for path in WEIGHT_PATHS)
        if abs(total - 1.0) > WEIGHT_SUM_TOLERANCE:
            problems.append(
                Problem("weights", f"must sum to 1; length + intent + lm = {total:.6g}", label)
            )
    # (Publishing also asks the decision function: routing_policies.policies.sdk_cells.)
    if (
        values.get("mode") == "cloud_only"
        and key[2] == SENSITIVE_TIER
        and values.get("upload.allowed") is False
    ):
        problems.append(
            Problem(
                "mode",
                "cloud_only contradicts a sensitive tier whose uploads are not allowed: "
                "the task could never run; allow uploads (with de-identification) or keep it "
                "on the device",
                label,
            )
        )
    shadow_rate = values.get("shadow_refine_rate")
    if shadow_rate and values.get("upload.allowed") is False:
        problems.append(
            Problem(
                "shadow_refine_rate",
                f"must be 0 where uploads are not allowed; got {shadow_rate!r}: a shadow refine "
                "sends the task's draft to the cloud; allow uploads (with de-identification) or "
                "set it to 0",
                label,
            )
        )
    return problems


def validate_dimensions(dimensions: Any) -> list[Problem]:
    """Each dimension present, with 1..32 distinct slug values."""
    problems: list[Problem] = []
    if not isinstance(dimensions, dict):
        return [
            Problem("dimensions", "must be an object with task_type, latency_budget, privacy_tier")
        ]
    for name in dimensions:
        if name not in DIMENSIONS:
            problems.append(Problem(f"dimensions.{name}", "is not a dimension"))
    for name in DIMENSIONS:
        values = dimensions.get(name)
        if not isinstance(values, list) or not values:
            problems.append(Problem(f"dimensions.{name}", "must be a non-empty list of values"))
            continue
        if len(values) > MAX_DIMENSION_VALUES:
            problems.append(
                Problem(
                    f"dimensions.{name}",
                    f"has {len(values)} values; at most {MAX_DIMENSION_VALUES}",
                )
            )
        seen: set[str] = set()
        for value in values:
            if not isinstance(value, str) or not DIMENSION_VALUE_RE.match(value):
                problems.append(
                    Problem(
                        f"dimensions.{name}",
                        f"value {value!r} must be lowercase letters, digits, '-' or '_' "
                        "(starting with a letter, at most 32)",
                    )
                )
            elif value in seen:
                problems.append(Problem(f"dimensions.{name}", f"value {value!r} appears twice"))
            else:
                seen.add(value)
    return problems


def validate_coverage(dimensions: dict[str, list[str]], keys: list[CellKey]) -> list[Problem]:
    """The table covers every combination of the dimensions' values exactly once."""
    problems: list[Problem] = []
    expected: set[CellKey] = {
        (a, b, c) for a, b, c in product(*(dimensions[name] for name in DIMENSIONS))
    }
    seen: set[CellKey] = set()
    for key in keys:
        label = cell_key_label(key)
        if key in seen:
            problems.append(Problem("cell", "appears more than once in the table", label))
        elif key not in expected:
            for name, value in zip(DIMENSIONS, key, strict=True):
                if value not in dimensions[name]:
                    problems.append(Problem(name, f"{value!r} is not a value of {name}", label))
                    break
        seen.add(key)
    for key in sorted(expected - seen):
        problems.append(
            Problem(
                "cell", "is missing: every combination needs exactly one cell", cell_key_label(key)
            )
        )
    return problems


def table_problems(
    dimensions: dict[str, list[str]], cells: Sequence[tuple[CellKey, dict[str, Any] | None]]
) -> list[Problem]:
    """What a whole table breaks beyond its fields, each field already checked on its own:
    its dimensions, the rules between each cell's fields, and every combination covered once.

    `cells` lists the table's cells in their order, a repeated key included; a cell whose fields
    were refused comes with None (its key still counts for the coverage).
    """
    problems = validate_dimensions(dimensions)
    if problems:
        return problems
    for key, values in cells:
        if values is not None:
            problems.extend(cell_rules(key, values))
    problems.extend(validate_coverage(dimensions, [key for key, _ in cells]))
    return problems


# --- overrides by segment (docs/segments.md) ---------------------------------------------------

MAX_OVERRIDES = 32  # segments a version overrides cells for


def override_problems(
    segment: str, table: dict[CellKey, dict[str, Any]], cells: Any
) -> tuple[dict[str, dict[str, Any]], list[Problem]]:
    """One segment's override checked as a cell is: each cell a cell of the table, each field
    a field of a cell within its bounds (`clean_value`, CELL_FIELDS), and the base cell with
    these fields over its own valid whole (`validate_cell`: the weights' sum, the privacy
    rules), since that cell is what a device of the segment runs. `cells` maps a cell's label
    (`voice/interactive/normal`) to its fields by document path. Returns the cleaned cells
    (labels in the table's order) and the problems, each naming the segment, cell and field."""
    problems: list[Problem] = []
    cleaned: dict[str, dict[str, Any]] = {}
    if not isinstance(cells, dict) or not cells:
        return {}, [Problem("cells", "must override at least one cell", segment=segment)]
    labels = {cell_key_label(key): key for key in table}
    for label, values in cells.items():
        key = labels.get(label)
        if key is None:
            problems.append(Problem("cell", "is not a cell of this table", label, segment))
            continue
        if not isinstance(values, dict) or not values:
            problems.append(Problem("values", "must change at least one field", label, segment))
            continue
        own: dict[str, Any] = {}
        for path, value in values.items():
            spec = FIELDS_BY_PATH.get(path)
            if spec is None:
                problems.append(Problem(path, "is not a field of a policy cell", label, segment))
                continue
            value, error = clean_value(spec, value)
            if error:
                problems.append(Problem(path, error, label, segment))
            else:
                own[path] = value
        if len(own) < len(values):
            continue
        _, whole = validate_cell(key, {**table[key], **own})
        problems.extend(replace(problem, segment=segment) for problem in whole)
        cleaned[label] = {path: own[path] for path in FIELD_PATHS if path in own}
    order = [label for label in labels if label in cleaned]
    return {label: cleaned[label] for label in order}, problems


def overrides_problems(
    table: dict[CellKey, dict[str, Any]],
    overrides: Sequence[dict[str, Any]],
    known: Sequence[str] | None,
) -> list[Problem]:
    """A version's overrides as a whole: at most MAX_OVERRIDES, a segment once, each a segment
    of the fleet (`known`; None: not asked) and each checked by `override_problems`."""
    problems: list[Problem] = []
    if len(overrides) > MAX_OVERRIDES:
        problems.append(Problem("overrides", f"has {len(overrides)}; at most {MAX_OVERRIDES}"))
    seen: set[str] = set()
    for override in overrides:
        name = override["segment"]
        if name in seen:
            problems.append(Problem("segment", "is overridden twice", segment=name))
        seen.add(name)
        if known is not None and name not in known:
            problems.append(Problem("segment", "is not a segment of this fleet", segment=name))
        problems.extend(override_problems(name, table, override["cells"])[1])
    return problems


def overrides_from_document(section: Any) -> tuple[list[dict[str, Any]], list[Problem]]:
    """A document's `overrides` section (export format) as a version stores them: each
    segment's name and its cells' fields by label; the rule it inlines is not read (a fleet's
    segment of that name gives the rule). Only the shape is checked here."""
    if section is None:
        return [], []
    if not isinstance(section, list):
        return [], [Problem("overrides", "must be a list")]
    overrides: list[dict[str, Any]] = []
    problems: list[Problem] = []
    for index, item in enumerate(section):
        place = f"overrides[{index}]"
        name = item.get("segment") if isinstance(item, dict) else None
        if not isinstance(name, str) or not name or len(name) > 64 or "\x00" in name:
            problems.append(Problem(f"{place}.segment", "must name a segment"))
            continue
        cells = item.get("cells")
        if not isinstance(cells, list) or len(cells) > MAX_CELLS:
            problems.append(Problem("cells", f"must be a list of at most {MAX_CELLS}", None, name))
            continue
        stored: dict[str, dict[str, Any]] = {}
        for cell in cells:
            key = tuple(cell.get(d) for d in DIMENSIONS) if isinstance(cell, dict) else ()
            if len(key) != 3 or not all(isinstance(part, str) for part in key):
                problems.append(Problem("cells", "each must be an object with its key", None, name))
                continue
            label = cell_key_label(key)  # type: ignore[arg-type]
            if label in stored:
                problems.append(Problem("cell", "is overridden twice", label, name))
            fields = {k: v for k, v in cell.items() if k not in DIMENSIONS}
            stored[label] = flatten(fields)
        overrides.append({"segment": name, "rule": None, "cells": stored})
    return overrides, problems
