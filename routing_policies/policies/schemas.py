"""The policy API's bodies: the input serializers the views (and the pages, through
`controlplane.pages.form_input`) validate with, and the output serializers of the answers.

The views shape their answers with the `*_out` functions and the selectors (the same dicts the
pages and the push use); the output serializers are their contract, so a generated client
knows every field, and the schemathesis test checks each answer against them. The cells of a
document or an edit are checked as a whole table by `validation` (naming each cell, with the
rules between fields); their fields here are built from the same `cell_schema.CELL_FIELDS`.
"""

from __future__ import annotations

from typing import Any

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
from controlplane.openapi import closed_body, non_empty_body
from controlplane.validators import SOME_TEXT_PATTERN

from ..cell_schema import CELL_FIELDS, DIMENSIONS, FieldSpec
from ..components import ApiSerializer
from ..pricing import MAX_PRICE_PER_1K_TOKENS, MAX_PRICE_PER_CALL
from ..validation import (
    DIMENSION_VALUE_RE,
    MAX_CELLS,
    MAX_DIMENSION_VALUE_LENGTH,
    MAX_DIMENSION_VALUES,
    MAX_VERSION,
)
from .models import MAX_NOTE_LENGTH


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


def _cell_field(spec: FieldSpec, *, partial: bool) -> serializers.Field[Any, Any, Any, Any]:
    """The serializer field of one policy-cell field, with its range or choices."""
    options: dict[str, Any] = {
        "help_text": spec.help or spec.label,
        "required": not partial and not spec.optional,
    }
    if spec.optional:
        options["help_text"] += f"; optional, {spec.default!r} when left out"
    if spec.unit:
        options["help_text"] += f" ({spec.unit})"
    if spec.kind == "choice":
        return serializers.ChoiceField(choices=list(spec.choices), **options)
    if spec.kind == "bool":
        return serializers.BooleanField(**options)
    if spec.minimum is not None:
        options["min_value"] = spec.minimum
    if spec.maximum is not None:
        options["max_value"] = spec.maximum
    if spec.kind == "int":
        return serializers.IntegerField(**options)
    return serializers.FloatField(**options)


def _cell_serializer(
    name: str, *, partial: bool, with_key: bool
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
    attrs: dict[str, Any] = {}
    if with_key:
        attrs.update({dimension: DIMENSION_VALUE() for dimension in DIMENSIONS})
    for head, fields in groups.items():
        group = type(
            f"{name}{head.title()}Serializer",
            (serializers.Serializer,),
            {**fields, "Meta": type("Meta", (), {"ref_name": f"{name}{head.title()}"})},
        )
        attrs[head] = closed_body(group)(required=not partial)
    attrs.update(top)
    attrs["Meta"] = type("Meta", (), {"ref_name": name})
    return closed_body(type(f"{name}Serializer", (serializers.Serializer,), attrs))


PolicyCellSerializer = _cell_serializer("PolicyCell", partial=False, with_key=True)
# A cell edit names one field at least (services._parse_edits: "names no field to change").
PolicyCellValuesSerializer = non_empty_body(
    _cell_serializer("PolicyCellValues", partial=True, with_key=False)
)


def _dimension_values() -> serializers.ListField:
    return serializers.ListField(
        child=DIMENSION_VALUE(),
        min_length=1,
        max_length=MAX_DIMENSION_VALUES,
    )


# Closed as a request body: validation.validate_dimensions refuses any other dimension name.
@closed_body
class DimensionsSerializer(ApiSerializer):
    component_name = "PolicyDimensions"

    task_type = _dimension_values()
    latency_budget = _dimension_values()
    privacy_tier = _dimension_values()


class PolicyDocumentSerializer(ApiSerializer):
    """The policy document of PROTOCOL.md (what a device runs, and the export format)."""

    fleet = serializers.SlugField()
    version = serializers.IntegerField(allow_null=True, help_text="null for a draft")
    etag = serializers.CharField(allow_blank=True)
    published_at = serializers.DateTimeField(allow_null=True)
    dimensions = DimensionsSerializer()
    cells = PolicyCellSerializer(many=True)


class PolicyDocumentImportSerializer(serializers.Serializer[Any]):
    """A policy document to replace the draft's table with: every cell of the dimensions."""

    dimensions = DimensionsSerializer()
    cells = serializers.ListField(child=PolicyCellSerializer(), min_length=1, max_length=MAX_CELLS)
    fleet = serializers.SlugField(required=False, help_text="ignored: the path names the fleet")
    version = serializers.IntegerField(required=False, allow_null=True, help_text="ignored")
    etag = serializers.CharField(required=False, allow_blank=True, help_text="ignored")
    published_at = serializers.DateTimeField(required=False, allow_null=True, help_text="ignored")
    revision = DRAFT_REVISION()

    class Meta:
        ref_name = "PolicyDocumentImport"


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
class DraftCellEditSerializer(serializers.Serializer[Any]):
    """One cell's new values: flat (`"weights.length": 0.4`) or nested as in the document."""

    task_type = DIMENSION_VALUE()
    latency_budget = DIMENSION_VALUE()
    privacy_tier = DIMENSION_VALUE()
    values = PolicyCellValuesSerializer()

    class Meta:
        ref_name = "DraftCellEdit"


class DraftCellsEditSerializer(serializers.Serializer[Any]):
    # A ListField, not many=True: its min_length is what the schema shows as minItems (the
    # service refuses an empty list, services._parse_edits).
    cells = serializers.ListField(child=DraftCellEditSerializer(), min_length=1)
    revision = DRAFT_REVISION()

    class Meta:
        ref_name = "DraftCellsEdit"


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


class DiffSerializer(ApiSerializer):
    fleet = serializers.SlugField()
    a = serializers.CharField(help_text="the label of version a, e.g. v2 or draft")
    b = serializers.CharField()
    dimensions = serializers.DictField(
        child=DimensionChangeSerializer(), help_text="per dimension name, only those that changed"
    )
    cells = DiffCellSerializer(many=True)
    changed_cells = serializers.IntegerField(min_value=0)


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
