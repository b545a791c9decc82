"""The policy API's bodies: the input serializers the views (and the pages, through
`controlplane.pages.form_input`) validate with, and the output serializers of the answers.

The views shape their answers with the `*_out` functions and the selectors (the same dicts the
pages and the push use); the output serializers are their contract, so a generated client
knows every field, and the schemathesis test checks each answer against them. The cells of a
document or an edit are read by serializers generated from `cell_schema.CELL_FIELDS` (each
field with `validation.clean_value`, closed to unknown keys); `draft_cells_input` and
`document_input` run them and name each problem by its cell and field, and the services check
what needs several fields, the stored cells or the whole table.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, cast

from django.core.validators import RegexValidator
from rest_framework import serializers

from controlplane.api import (
    JsonChoiceField,
    JsonFloatField,
    JsonIntegerField,
    JsonRegexField,
    JsonSlugField,
    JsonStringField,
    TidyJsonStringField,
)
from controlplane.exceptions import ValidationFailed, drf_error_details
from controlplane.openapi import ApiSerializer, closed_body, non_empty_body
from controlplane.validators import SOME_TEXT_PATTERN

from ..cell_schema import (
    CELL_FIELDS,
    DIMENSIONS,
    FIELD_PATHS,
    CellKey,
    FieldSpec,
    cell_key_label,
    document_cell,
    flatten,
)
from ..pricing import MAX_PRICE_PER_1K_TOKENS, MAX_PRICE_PER_CALL
from ..validation import (
    DIMENSION_VALUE_RE,
    MAX_CELLS,
    MAX_DIMENSION_VALUE_LENGTH,
    MAX_DIMENSION_VALUES,
    MAX_OVERRIDES,
    MAX_VERSION,
    Problem,
    clean_value,
    table_problems,
)
from .models import MAX_NOTE_LENGTH

CELL_UNKNOWN_FIELD = "is not a field of a policy cell"


def DRAFT_REVISION() -> JsonIntegerField:  # reads as a field
    """The draft revision a change applies to (an `If-Match: "r<n>"` header says it too; the
    schema asks for the field, which every client can send)."""
    return JsonIntegerField(
        min_value=1,
        max_value=MAX_VERSION,
        label="the draft revision",
        help_text='the draft revision (or If-Match: "r<revision>")',
    )


def DIMENSION_VALUE(**options: Any) -> JsonRegexField:  # reads as a field
    """A value of a dimension (`code`, `on-device`), as validation.DIMENSION_VALUE_RE says."""
    return JsonRegexField(
        DIMENSION_VALUE_RE,
        max_length=MAX_DIMENSION_VALUE_LENGTH,
        error_messages={
            "invalid": "This is not a valid value: lowercase letters, digits, '-' or '_', "
            f"starting with a letter, at most {MAX_DIMENSION_VALUE_LENGTH} characters."
        },
        **options,
    )


class _CellValue:
    """A policy-cell field as the API takes it: `validation.clean_value` reads the value (no
    coercion, no clamping), so the request, the stored cells and the schema share one rule."""

    def __init__(self, *, spec: FieldSpec, **options: Any) -> None:
        self.spec = spec
        super().__init__(**options)

    def validate_empty_values(self, data: Any) -> tuple[bool, Any]:
        if data is None:
            return False, data  # refused by clean_value, which shows the value
        return super().validate_empty_values(data)  # type: ignore[misc,no-any-return]

    def to_internal_value(self, data: Any) -> Any:
        value, error = clean_value(self.spec, data)
        if error is not None:
            raise serializers.ValidationError(error)
        return value

    def run_validators(self, value: Any) -> None:
        """None to run: `clean_value` checked the range that `min_value` / `max_value` show."""


class _CellChoiceField(_CellValue, serializers.ChoiceField):
    pass


class _CellBooleanField(_CellValue, serializers.BooleanField):
    pass


class _CellIntegerField(_CellValue, serializers.IntegerField):
    pass


class _CellFloatField(_CellValue, serializers.FloatField):
    pass


def _cell_field(spec: FieldSpec, *, partial: bool) -> serializers.Field[Any, Any, Any, Any]:
    """The serializer field of one policy-cell field, with its range or choices."""
    options: dict[str, Any] = {
        "spec": spec,
        "help_text": spec.help or spec.label,
        "required": not partial and not spec.optional,
        "error_messages": {"required": "is required"},
    }
    if spec.optional:
        options["help_text"] += f"; optional, {spec.default!r} when left out"
    if spec.unit:
        options["help_text"] += f" ({spec.unit})"
    field: _CellValue
    if spec.kind == "choice":
        field = _CellChoiceField(choices=list(spec.choices), **options)
    elif spec.kind == "bool":
        field = _CellBooleanField(**options)
    else:
        options["min_value"] = spec.minimum
        options["max_value"] = spec.maximum
        kind = _CellIntegerField if spec.kind == "int" else _CellFloatField
        field = kind(**options)
    return field


# An input serializer that refuses the keys it does not declare (its request component says
# `additionalProperties: false`, `closed_body`), and with `non_empty`, an empty object. (No
# docstring: drf-spectacular would show it as the description of every serializer below it.)
class ClosedSerializer(serializers.Serializer[Any]):
    unknown_message = "is not a field"
    non_empty = ""

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return super().to_internal_value(data)
        if self.non_empty and not data:
            raise serializers.ValidationError(self.non_empty)
        unknown = {key: [self.unknown_message] for key in data if key not in self.fields}
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if not unknown:
                raise
            raise serializers.ValidationError({**unknown, **exc.detail}) from None  # type: ignore[dict-item]
        if unknown:
            raise serializers.ValidationError(unknown)
        return value


def _cell_serializer(
    name: str, *, partial: bool, with_key: bool, non_empty: str = ""
) -> type[serializers.Serializer[Any]]:
    """A serializer of a policy cell as the document nests it (`weights.length` → weights)."""
    groups: dict[str, dict[str, Any]] = {}
    top: dict[str, Any] = {}
    for spec in CELL_FIELDS:
        head, _, tail = spec.path.partition(".")
        if tail:
            groups.setdefault(head, {})[tail] = _cell_field(spec, partial=partial)
        else:
            top[head] = _cell_field(spec, partial=partial)
    attrs: dict[str, Any] = {"unknown_message": CELL_UNKNOWN_FIELD, "non_empty": non_empty}
    if with_key:
        attrs.update({dimension: DIMENSION_VALUE() for dimension in DIMENSIONS})
    for head, fields in groups.items():
        group = type(
            f"{name}{head.title()}Serializer",
            (ClosedSerializer,),
            {
                **fields,
                "unknown_message": CELL_UNKNOWN_FIELD,
                "Meta": type("Meta", (), {"ref_name": f"{name}{head.title()}"}),
            },
        )
        attrs[head] = closed_body(group)(
            required=not partial, error_messages={"required": "is required"}
        )
    attrs.update(top)
    attrs["Meta"] = type("Meta", (), {"ref_name": name})
    return closed_body(type(f"{name}Serializer", (ClosedSerializer,), attrs))


PolicyCellSerializer = _cell_serializer("PolicyCell", partial=False, with_key=True)
# A cell edit names one field at least.
PolicyCellValuesSerializer = non_empty_body(
    _cell_serializer(
        "PolicyCellValues", partial=True, with_key=False, non_empty="names no field to change"
    )
)


def _dimension_values() -> serializers.ListField:
    return serializers.ListField(
        child=DIMENSION_VALUE(),
        min_length=1,
        max_length=MAX_DIMENSION_VALUES,
    )


@closed_body
class DimensionsSerializer(ClosedSerializer, ApiSerializer):
    component_name = "PolicyDimensions"
    unknown_message = "is not a dimension"

    task_type = _dimension_values()
    latency_budget = _dimension_values()
    privacy_tier = _dimension_values()


class PolicyOverrideSerializer(ApiSerializer):
    """One segment's overrides in a policy document (PROTOCOL.md, extensions)."""

    segment = serializers.CharField(help_text="the segment's name")
    rule = serializers.JSONField(
        allow_null=True, help_text="the segment's rule, inlined (null: a draft's lost segment)"
    )
    cells = serializers.ListField(
        child=serializers.DictField(),
        help_text="each a cell's key and the fields it changes, nested as a cell nests them",
    )


class PolicyDocumentSerializer(ApiSerializer):
    """The policy document of PROTOCOL.md (what a device runs, and the export format)."""

    fleet = serializers.SlugField()
    version = serializers.IntegerField(allow_null=True, help_text="null for a draft")
    etag = serializers.CharField(allow_blank=True)
    published_at = serializers.DateTimeField(allow_null=True)
    dimensions = DimensionsSerializer()
    cells = PolicyCellSerializer(many=True)
    overrides = PolicyOverrideSerializer(
        many=True,
        required=False,
        help_text="overrides by segment in precedence order (only when the version has some)",
    )


class PolicyDocumentImportSerializer(ApiSerializer):
    """A policy document to replace the draft's table with: every cell of the dimensions."""

    dimensions = DimensionsSerializer()
    cells = serializers.ListField(child=PolicyCellSerializer(), min_length=1, max_length=MAX_CELLS)
    overrides = serializers.ListField(
        child=serializers.DictField(),
        required=False,
        max_length=MAX_OVERRIDES,
        help_text="overrides by segment (each segment one of the fleet's; its rule is not read)",
    )
    fleet = serializers.SlugField(required=False, help_text="ignored: the path names the fleet")
    version = serializers.IntegerField(required=False, allow_null=True, help_text="ignored")
    etag = serializers.CharField(required=False, allow_blank=True, help_text="ignored")
    published_at = serializers.DateTimeField(required=False, allow_null=True, help_text="ignored")
    revision = DRAFT_REVISION()


class FleetSerializer(ApiSerializer):
    slug = serializers.SlugField()
    name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    created_at = serializers.DateTimeField()
    latest_version = serializers.IntegerField(allow_null=True)
    draft_revision = serializers.IntegerField(allow_null=True, help_text="null: no draft")
    cloud_price_per_1k_tokens = serializers.FloatField(
        help_text="currency units per 1,000 tokens sent to the cloud"
    )
    cloud_price_per_call = serializers.FloatField(help_text="currency units per cloud call")
    currency = serializers.CharField()


@closed_body
class FleetCloudPriceInputSerializer(ApiSerializer):
    """The fleet's cloud price (PATCH): either part, or both."""

    cloud_price_per_1k_tokens = JsonFloatField(
        min_value=0,
        max_value=MAX_PRICE_PER_1K_TOKENS,
        required=False,
        help_text="currency units per 1,000 tokens sent to the cloud (cloud and draft_refine)",
    )
    cloud_price_per_call = JsonFloatField(
        min_value=0,
        max_value=MAX_PRICE_PER_CALL,
        required=False,
        help_text="currency units per cloud call (route cloud or draft_refine)",
    )


def results_of(
    item: type[serializers.Serializer[Any]], *, ref_name: str
) -> type[serializers.Serializer[Any]]:
    """The answer of a list endpoint: `{"results": [item, ...]}`."""
    meta = type("Meta", (), {"ref_name": ref_name})
    return type(
        f"{ref_name}Serializer",
        (serializers.Serializer,),
        {"results": item(many=True), "Meta": meta},
    )


# --- the inputs of the policy editor: the API validates with these, and so do the pages ------


class RevisionQuerySerializer(ApiSerializer):
    """`?revision=`: the draft revision a DELETE applies to (a page posts it as a field)."""

    component_name = "DraftRevisionQuery"

    revision = serializers.IntegerField(
        min_value=1,
        max_value=999_999_999,
        label="the draft revision",
        help_text='The draft revision you read (or an If-Match: "r<revision>" header).',
    )


class FleetCreateInputSerializer(ApiSerializer):
    """A new fleet: it starts with a draft of default cells over the seed dimensions."""

    component_name = "FleetCreate"  # OpenAPI component names must be unique

    slug = JsonSlugField(
        max_length=64,
        help_text="Lowercase, digits and dashes, e.g. voice-assistant-ios. Devices use it.",
    )
    name = TidyJsonStringField(max_length=200)
    description = JsonStringField(max_length=2000, required=False, allow_blank=True)


class DraftCreateInputSerializer(ApiSerializer):
    """Start the draft from a published version (left out or null: the latest)."""

    component_name = "DraftCreate"

    from_version = JsonIntegerField(
        min_value=1, max_value=999_999_999, required=False, allow_null=True, label="the version"
    )


class DimensionValueAddInputSerializer(ApiSerializer):
    """Add a value to a dimension; its cells start as copies of an existing value's cells."""

    component_name = "DimensionValueAdd"

    dimension = JsonChoiceField(choices=DIMENSIONS)
    value = DIMENSION_VALUE(label="the new value")
    copy_from = DIMENSION_VALUE(
        required=False,
        allow_null=True,
        help_text="an existing value of the dimension whose cells the new ones copy",
    )
    revision = DRAFT_REVISION()


class PublishInputSerializer(ApiSerializer):
    """Publish the draft: the release note says what changed and why."""

    component_name = "Publish"

    note = JsonStringField(
        max_length=MAX_NOTE_LENGTH,
        label="the release note",
        # A version runs on devices for weeks; the note is how people later tell why it exists.
        validators=[RegexValidator(SOME_TEXT_PATTERN, "must not be empty")],
        error_messages={"blank": "must not be empty", "required": "must not be empty"},
        help_text="The release note: what changed and why.",
    )
    revision = DRAFT_REVISION()


FleetListSerializer = results_of(FleetSerializer, ref_name="FleetList")


@closed_body
class OverrideCellInputSerializer(ClosedSerializer):
    """One cell of a segment's override: its key and the fields it changes (flat,
    `"weights.length": 0.4`, or nested as the document nests them)."""

    task_type = DIMENSION_VALUE()
    latency_budget = DIMENSION_VALUE()
    privacy_tier = DIMENSION_VALUE()
    values = serializers.DictField(allow_empty=False, help_text="the fields this cell changes")

    unknown_message = "is not a field of an override's cell"

    class Meta:
        ref_name = "OverrideCellInput"


@closed_body
class DraftOverrideInputSerializer(ClosedSerializer, ApiSerializer):
    """Set a segment's override in the draft: its cells replace the segment's previous ones."""

    component_name = "DraftOverride"

    cells = serializers.ListField(
        child=OverrideCellInputSerializer(), min_length=1, max_length=MAX_CELLS
    )
    position = JsonIntegerField(
        min_value=1,
        max_value=MAX_OVERRIDES,
        required=False,
        help_text="its place in the precedence, from 1 (the first matching segment wins a "
        "cell); left out, an override keeps its place and a new one goes last",
    )
    revision = DRAFT_REVISION()


class OverrideFieldPageSerializer(ApiSerializer):
    """The policy page's override form: one field of one cell for a segment (set), or a
    field, a cell or the whole override taken out (remove); the value as typed."""

    component_name = "OverrideFieldPage"

    action = JsonChoiceField(choices=["set", "remove"])
    segment = JsonStringField(max_length=64, label="the segment")
    cell = JsonStringField(max_length=100, required=False, allow_blank=True, label="the cell")
    field = JsonChoiceField(choices=FIELD_PATHS, required=False, allow_blank=True)
    value = JsonStringField(max_length=100, required=False, allow_blank=True, label="the value")
    position = JsonIntegerField(min_value=1, max_value=MAX_OVERRIDES, required=False)
    revision = DRAFT_REVISION()


def draft_override_input(data: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The cells of a checked DraftOverrideInputSerializer body as the service takes them:
    label -> fields by document path; a cell named twice is refused, naming it."""
    cells: dict[str, dict[str, Any]] = {}
    for cell in data["cells"]:
        label = cell_key_label(tuple(cell[name] for name in DIMENSIONS))
        if label in cells:
            problem = Problem("cell", "is named twice in one override", label)
            raise _refused(EDIT_REFUSED, [problem])
        cells[label] = flatten(dict(cell["values"]))
    return cells


class VersionSerializer(ApiSerializer):
    version = serializers.IntegerField(allow_null=True, help_text="null for the draft")
    status = serializers.ChoiceField(choices=["draft", "published"])
    revision = serializers.IntegerField(allow_null=True, help_text="the draft's revision")
    etag = serializers.CharField(allow_null=True)
    note = serializers.CharField(allow_blank=True)
    based_on = serializers.IntegerField(allow_null=True)
    created_by = serializers.CharField(allow_null=True)
    created_at = serializers.DateTimeField()
    published_by = serializers.CharField(allow_null=True)
    published_at = serializers.DateTimeField(allow_null=True)
    cell_count = serializers.IntegerField(min_value=0)


VersionListSerializer = results_of(VersionSerializer, ref_name="VersionList")


class VersionWithDocumentSerializer(VersionSerializer):
    """A version's metadata and its document (a draft, or any version by reference)."""

    document = PolicyDocumentSerializer()


@closed_body
class DraftCellEditSerializer(ClosedSerializer):
    """One cell's new values: flat (`"weights.length": 0.4`) or nested as in the document."""

    task_type = DIMENSION_VALUE()
    latency_budget = DIMENSION_VALUE()
    privacy_tier = DIMENSION_VALUE()
    values = PolicyCellValuesSerializer()

    unknown_message = "is not a field of a cell edit"

    class Meta:
        ref_name = "DraftCellEdit"


class DraftCellsEditSerializer(ApiSerializer):
    # A ListField, not many=True: its min_length is what the schema shows as minItems.
    cells = serializers.ListField(child=DraftCellEditSerializer(), min_length=1)
    revision = DRAFT_REVISION()


# --- the draft's table as sent: each problem named by its cell and field ----------------------
# What the serializers above refuse in one cell is named by the cell's label and the field's
# document path (`text/interactive/normal`, `weights.length`), as the services name what a
# whole cell or table breaks (the weights' sum, the privacy rules, the coverage), so one 400
# lists every problem of an edit or an import at once.

EDIT_REFUSED = "The edit is invalid; nothing was saved."
IMPORT_REFUSED = "The imported document is invalid; nothing was imported."


def _key_of(raw: Any, errors: Any) -> CellKey | None:
    """The cell an item of `cells` names, when its three parts pass."""
    if not isinstance(raw, Mapping):
        return None
    if isinstance(errors, Mapping) and any(name in errors for name in DIMENSIONS):
        return None
    key = tuple(raw.get(name) for name in DIMENSIONS)
    return cast(CellKey, key) if all(isinstance(part, str) for part in key) else None


def _item_problems(index: int, raw: Any, errors: Any, *, within: str = "") -> list[Problem]:
    """The problems of `cells[index]`: a field of a well-named cell by the cell's label and the
    field's document path (`within` the item, e.g. `values`), anything else by its place."""
    key = _key_of(raw, errors)
    place = f"cells[{index}]"
    problems: list[Problem] = []
    for detail in drf_error_details(errors, place):
        # A part that is not an object is refused as a whole (DRF: `non_field_errors`).
        relative = detail["field"].removeprefix(place).removesuffix("non_field_errors")
        relative = relative.strip(".")
        if not relative:
            problems.append(Problem(place, detail["message"]))
        elif key is None:
            problems.append(Problem(detail["field"], detail["message"]))
        else:
            field = relative.removeprefix(f"{within}.") if within else relative
            problems.append(Problem(field, detail["message"], cell_key_label(key)))
    return problems


def _refused(message: str, problems: list[Problem]) -> ValidationFailed:
    return ValidationFailed(message, details=[problem.as_dict() for problem in problems])


def _body_problems(
    errors: Mapping[str, Any], message: str
) -> tuple[list[Problem], Mapping[int, Any]]:
    """A refused body's problems outside `cells` (a dimension's values named by the dimension),
    and the errors of its cells by index; an error of the list itself refuses it at once."""
    others = {name: error for name, error in errors.items() if name != "cells"}
    problems = [
        Problem(re.sub(r"\[\d+\]$", "", detail["field"]), detail["message"])
        for detail in drf_error_details(others)
    ]
    cell_errors = errors.get("cells", {})
    if not isinstance(cell_errors, Mapping):
        problems.extend(Problem("cells", str(error)) for error in cell_errors)
        raise _refused(message, problems)
    return problems, cell_errors


def _edit_sent(edit: Any) -> Any:
    """A cell edit's `values` as the document nests them; a field's flat path
    (`"weights.length"`) is taken too, into its group. Anything else stays as sent for the
    serializer to name: a key no field has, a group that is not an object, a field sent both
    ways."""
    if not (isinstance(edit, Mapping) and isinstance(edit.get("values"), Mapping)):
        return edit
    values = dict(edit["values"])
    for path in [key for key in values if key in FIELD_PATHS and "." in key]:
        group, _, name = path.partition(".")
        nested = values.get(group, {})
        if isinstance(nested, Mapping) and name not in nested:
            values[group] = {**nested, name: values.pop(path)}
    return {**edit, "values": values}


def _edit_values(edit: Mapping[str, Any]) -> dict[str, Any]:
    """A validated cell edit as the draft-edit service takes it (values by document path)."""
    return {**{name: edit[name] for name in DIMENSIONS}, "values": flatten(edit["values"])}


def draft_cells_input(data: Mapping[str, Any]) -> tuple[int, list[dict[str, Any]], list[Problem]]:
    """A PATCH of the draft's cells checked by DraftCellsEditSerializer: the revision, the edits
    whose values pass and the problems of the others' values, named by cell and field (the
    service checks the edited cells as a whole and refuses the edit with all of them). Anything
    else wrong refuses the whole body here."""
    cells = data.get("cells")
    sent = (
        {**data, "cells": [_edit_sent(edit) for edit in cells]} if isinstance(cells, list) else data
    )
    serializer = DraftCellsEditSerializer(data=sent)
    if serializer.is_valid():
        valid = serializer.validated_data
        return valid["revision"], [_edit_values(edit) for edit in valid["cells"]], []
    problems, cell_errors = _body_problems(serializer.errors, EDIT_REFUSED)
    edits: list[dict[str, Any]] = []
    refused: list[Problem] = []
    for index, edit in enumerate(sent["cells"]):
        if index in cell_errors:
            refused.extend(_item_problems(index, edit, cell_errors[index], within="values"))
            continue
        one = DraftCellEditSerializer(data=edit)
        one.is_valid(raise_exception=True)
        edits.append(_edit_values(one.validated_data))
    if problems or any(problem.cell is None for problem in refused):
        raise _refused(EDIT_REFUSED, [*problems, *refused])
    revision = serializer.fields["revision"].run_validation(data["revision"])
    return revision, edits, refused


def document_input(document: Any, *, with_revision: bool) -> dict[str, Any]:
    """A policy document to import, checked by PolicyDocumentImportSerializer (the `revision`
    only `with_revision`: without a draft, none is needed). Refused, one ValidationFailed names
    every problem: each bad field by its cell and path and, among the cells that pass, what
    the whole table breaks (validation.table_problems, which the import service asks too)."""
    if not isinstance(document, Mapping):
        problem = Problem("body", "must be a JSON object (a policy document)")
        raise _refused(IMPORT_REFUSED, [problem])
    data = (
        dict(document) if with_revision else {k: v for k, v in document.items() if k != "revision"}
    )
    serializer = PolicyDocumentImportSerializer(data=data)
    serializer.fields["revision"].required = with_revision
    if serializer.is_valid():
        return dict(serializer.validated_data)
    problems, cell_errors = _body_problems(serializer.errors, IMPORT_REFUSED)
    cells: list[tuple[CellKey, dict[str, Any] | None]] = []
    for index, raw in enumerate(data["cells"]):
        if index in cell_errors:
            problems.extend(_item_problems(index, raw, cell_errors[index]))
            key = _key_of(raw, cell_errors[index])
            if key is not None:
                cells.append((key, None))
            continue
        one = PolicyCellSerializer(data=raw)
        one.is_valid(raise_exception=True)
        cells.append(document_cell(one.validated_data))
    if "dimensions" not in serializer.errors:
        dimensions = DimensionsSerializer(data=data["dimensions"])
        dimensions.is_valid(raise_exception=True)
        problems.extend(table_problems(dict(dimensions.validated_data), cells))
    raise _refused(IMPORT_REFUSED, problems)


class DiffFieldSerializer(ApiSerializer):
    field = serializers.CharField()
    before = serializers.JSONField(allow_null=True)
    after = serializers.JSONField(allow_null=True)


class DiffCellSerializer(ApiSerializer):
    cell = serializers.CharField(help_text="task_type/latency_budget/privacy_tier")
    status = serializers.ChoiceField(choices=["changed", "added", "removed"])
    fields = DiffFieldSerializer(many=True)  # type: ignore[assignment]  # a declared field


class DimensionChangeSerializer(ApiSerializer):
    added = serializers.ListField(child=serializers.CharField())
    removed = serializers.ListField(child=serializers.CharField())


class DiffOverrideSerializer(ApiSerializer):
    segment = serializers.CharField()
    status = serializers.ChoiceField(choices=["changed", "added", "removed"])
    fields = DiffFieldSerializer(  # type: ignore[assignment]  # a declared field
        many=True, help_text="`position` (precedence, from 1), `rule`, or `cell.field`"
    )


class DiffSerializer(ApiSerializer):
    fleet = serializers.SlugField()
    a = serializers.CharField(help_text="the label of version a, e.g. v2 or draft")
    b = serializers.CharField()
    dimensions = serializers.DictField(
        child=DimensionChangeSerializer(), help_text="per dimension name, only those that changed"
    )
    cells = DiffCellSerializer(many=True)
    changed_cells = serializers.IntegerField(min_value=0)
    overrides = DiffOverrideSerializer(many=True, help_text="overrides by segment that changed")


class AuditEntrySerializer(ApiSerializer):
    id = serializers.IntegerField()
    at = serializers.DateTimeField()
    actor = serializers.CharField(allow_blank=True)
    action = serializers.CharField()
    fleet = serializers.SlugField(allow_null=True)
    target = serializers.CharField()
    summary = serializers.CharField(allow_blank=True)
    before = serializers.JSONField(allow_null=True)
    after = serializers.JSONField(allow_null=True)
    diff = serializers.JSONField()


AuditListSerializer = results_of(AuditEntrySerializer, ref_name="AuditList")
