"""Page input of the policy editor that no API input serializer declares: the cell edit panel
(a grid selection and the panel's fields) and an imported document as uploaded or pasted. Every
other form of the editor is validated by the API's own input serializer (`schemas`, through
`controlplane.pages.form_input`).

The edit panel's fields come from `cell_schema.CELL_FIELDS`, so a new cell field appears in the
browser without touching this module. Its parser turns the posted strings into numbers and
booleans; a blank field means "unchanged". Ranges, NaN and the rules between fields are left
to `validation` (through the service), so the pages and the API refuse exactly the same things.
"""

import json
import math
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.http import QueryDict

from controlplane import json_guard
from controlplane.exceptions import ValidationFailed
from controlplane.pages import form_input

from ..cell_schema import CELL_FIELDS, DIMENSIONS, CellKey, FieldSpec
from .schemas import RevisionQuerySerializer

FIELD_PREFIX = "value-"

# How the edit panel groups the cell fields (by the first part of the document path).
FIELD_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Routing", ("mode", "threshold", "fallback")),
    ("Score weights", ("weights.length", "weights.intent", "weights.lm", "length_norm_tokens")),
    ("Latency", ("latency_budget_ms", "cloud_timeout_ms")),
    (
        "Upload",
        ("upload.allowed", "upload.deidentify", "upload.max_bytes", "shadow_refine_rate"),
    ),
    ("Weak network", ("network.rtt_high_ms", "network.bandwidth_low_kbps", "network.theta_raise")),
    ("Device load", ("load.busy", "load.theta_lower")),
    ("Cache", ("cache_ttl_s",)),
)


def input_name(spec: FieldSpec) -> str:
    """The HTML name of a cell field in the edit panel (`value-weights.length`)."""
    return f"{FIELD_PREFIX}{spec.path}"


def range_hint(spec: FieldSpec) -> str:
    """`0 – 1` or `1 – 600,000 ms`: the accepted range as shown next to a field."""
    if spec.minimum is None or spec.maximum is None:
        return ""
    unit = f" {spec.unit}" if spec.unit else ""
    low, high = _format_bound(spec, spec.minimum), _format_bound(spec, spec.maximum)
    return f"{'> ' if spec.minimum_exclusive else ''}{low} – {high}{unit}"


def _format_bound(spec: FieldSpec, bound: float) -> str:
    return f"{int(bound):,}" if spec.kind == "int" else f"{bound:g}"


@dataclass
class CellEdit:
    """What the edit panel asked for: the selected cells and the fields to set on all of them."""

    revision: int | None
    cells: list[CellKey]
    values: dict[str, Any]
    # Problems found before the service is asked, in the service's shape: {cell, field, message}.
    problems: list[dict[str, Any]] = field(default_factory=list)
    raw: dict[str, str] = field(default_factory=dict)


def _parse_cell_key(label: str) -> CellKey | None:
    parts = label.split("/")
    if len(parts) != len(DIMENSIONS) or not all(parts):
        return None
    return (parts[0], parts[1], parts[2])


def draft_revision(data: QueryDict) -> int | None:
    """The draft revision posted, or None when it is missing or not a positive number."""
    try:
        revision: int = form_input(RevisionQuerySerializer, data)["revision"]
    except ValidationFailed:
        return None
    return revision


def _parse_number(spec: FieldSpec, text: str) -> tuple[Any, str | None]:
    """A number as typed. Non-finite and fractional values go on to validation, which names them.

    Only text that is not a number at all is refused here: 'abc' can't be handed to the service.
    """
    if spec.kind == "int":
        try:
            return int(text), None
        except ValueError:
            pass
    try:
        number = float(text)
    except ValueError:
        example = "a whole number such as 300" if spec.kind == "int" else "a number such as 0.6"
        return None, f"must be {example}; got {text!r}"
    if spec.kind == "int" and math.isfinite(number) and number.is_integer():
        return int(number), None
    return number, None


def parse_value(spec: FieldSpec, text: str) -> tuple[Any, str | None]:
    """One posted field: (value, None), or (None, error) when the text cannot be read at all."""
    if spec.kind == "bool":
        if text in ("true", "false"):
            return text == "true", None
        return None, f"must be yes or no; got {text!r}"
    if spec.kind == "choice":
        return text, None  # the service names the allowed choices
    return _parse_number(spec, text)


def parse_cell_edit(post: QueryDict) -> CellEdit:
    """Read the edit panel: selected cells (`cell`), revision and the filled-in fields."""
    revision = draft_revision(post)
    cells: list[CellKey] = []
    problems: list[dict[str, Any]] = []
    for label in post.getlist("cell"):
        key = _parse_cell_key(label)
        if key is None:
            problems.append({"field": "cell", "message": f"{label!r} is not a cell"})
        elif key not in cells:
            cells.append(key)
    raw: dict[str, str] = {}
    values: dict[str, Any] = {}
    field_errors: list[tuple[str, str]] = []
    for spec in CELL_FIELDS:
        text = (post.get(input_name(spec)) or "").strip()
        raw[spec.path] = text
        if not text:
            continue  # blank: unchanged
        value, error = parse_value(spec, text)
        if error:
            field_errors.append((spec.path, error))
        else:
            values[spec.path] = value
    if revision is None:
        problems.append(
            {"field": "revision", "message": "the form lost the draft revision; reload the page"}
        )
    if not cells and not problems:
        problems.append(
            {"field": "cell", "message": "select at least one cell in the grid to change"}
        )
    for path, error in field_errors:
        # Named per selected cell, as the service names its own problems.
        if not cells:
            problems.append({"field": path, "message": error})
        for key in cells:
            problems.append({"cell": "/".join(key), "field": path, "message": error})
    # Cells but no field with a value is not a mistake: nothing changes, and the view says so
    # (a field left showing the cell's value is sent blank, as the editor sends only edits).
    return CellEdit(revision=revision, cells=cells, values=values, problems=problems, raw=raw)


class ImportError_(Exception):
    """The uploaded or pasted document could not be read as JSON (answered 400)."""


class ImportTooLarge(ImportError_):
    """The uploaded document is over the request size limit (answered 413)."""


def read_import_document(upload: UploadedFile | None, pasted: str) -> Any:
    """The JSON document from an uploaded file, else from the pasted text."""
    limit: int = settings.MAX_REQUEST_BYTES
    if upload is not None:
        if upload.size is not None and upload.size > limit:
            raise ImportTooLarge(
                f"The file is {upload.size:,} bytes; the limit is {limit:,} bytes. "
                "Nothing was imported."
            )
        raw = upload.read(limit + 1)
        if len(raw) > limit:
            raise ImportTooLarge(
                f"The file is over the {limit:,} byte limit. Nothing was imported."
            )
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise ImportError_(
                "The file is not UTF-8 text; export a policy document as JSON and try again."
            ) from None
        source = f"The file {upload.name!r}"
    elif pasted.strip():
        text = pasted
        source = "The pasted text"
    else:
        raise ImportError_("Choose a JSON file or paste a policy document.")
    try:
        return json_guard.loads(text)
    except json_guard.JsonRefused as refused:
        raise ImportError_(
            f"{source} is refused: {refused.message} Nothing was imported."
        ) from None
    except json.JSONDecodeError as exc:
        raise ImportError_(
            f"{source} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno} "
            f"(character {exc.pos + 1}). Nothing was imported."
        ) from None
