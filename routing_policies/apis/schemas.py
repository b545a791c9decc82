"""Serializers that describe the policy and rollout APIs' bodies in the OpenAPI schema.

The views shape their answers with the `*_out` functions and the selectors (the same dicts the
pages and the push use); these output serializers are their contract, so a generated client
knows every field, and the schemathesis test checks each answer against them. Input bodies the
services check by hand (documents, cell edits, cloud pressure) are declared here with the same
limits, from the same constants.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from controlplane.openapi import closed_body
from controlplane.validators import TidyTextValidator

from ..cell_schema import CELL_FIELDS, DIMENSIONS, FieldSpec
from ..models import Rollout
from ..services.rollout import MAX_CLOUD_PRESSURE_TTL_S
from ..validation import DIMENSION_VALUE_RE, MAX_CELLS, MAX_DIMENSION_VALUES

# --- JSON-typed fields: the input serializers the views validate with take JSON as it is typed.
# DRF's fields coerce (`123` becomes "123", "5" becomes 5, "yes" becomes True); the schema says
# string, integer, boolean, and the server must refuse what the schema refuses.


class _JsonStringMixin:
    """A JSON string only: DRF's CharField would quietly turn `123` or `1.5` into `"123"`.

    Kept as sent, never trimmed: DRF's default `trim_whitespace` would turn `"\\x1e"` (Python
    counts the information separators as whitespace) into a blank the schema never refused.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(*args, **kwargs)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")  # type: ignore[attr-defined]
        return super().to_internal_value(data)  # type: ignore[misc,no-any-return]


class JsonStringField(_JsonStringMixin, serializers.CharField):
    """`CharField` that refuses numbers, booleans and objects."""


class TidyJsonStringField(JsonStringField):
    """`JsonStringField` kept as sent, never trimmed: leading / trailing whitespace and control
    characters are refused (controlplane.validators.text_problem, declared in the schema as a
    pattern), so `"abc\\n"` is not stored as `"abc"`."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs["validators"] = [*kwargs.get("validators", ()), TidyTextValidator()]
        super().__init__(**kwargs)


class JsonRegexField(_JsonStringMixin, serializers.RegexField):
    """`RegexField` that refuses numbers, booleans and objects, and is never trimmed (an id
    with a trailing newline is refused, not matched as the id without it)."""


class JsonSlugField(JsonRegexField):
    """A slug that refuses numbers, booleans and objects. Anchored with `\\Z`: DRF's
    SlugField pattern ends in `$`, which also matches before a trailing newline."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(r"\A[-a-zA-Z0-9_]+\Z", **kwargs)


class JsonIntegerField(serializers.IntegerField):
    """A JSON number that is whole: not `"5"`, not `true`."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("invalid")
        return super().to_internal_value(data)


class JsonChoiceField(serializers.ChoiceField):
    """A choice of the JSON type of its choices: `5` for a stage, never `"5"` or `true`."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, bool) or not any(type(data) is type(c) for c in self.choices):
            self.fail("invalid_choice", input=data)
        return super().to_internal_value(data)


def DRAFT_REVISION() -> JsonIntegerField:  # reads as a field
    """The draft revision a change applies to (an `If-Match: "r<n>"` header says it too; the
    schema asks for the field, which every client can send)."""
    return JsonIntegerField(
        min_value=1, help_text='the draft revision (or If-Match: "r<revision>")'
    )


def _cell_field(spec: FieldSpec, *, partial: bool) -> serializers.Field[Any, Any, Any, Any]:
    """The serializer field of one policy-cell field, with its range or choices."""
    options: dict[str, Any] = {"help_text": spec.help or spec.label, "required": not partial}
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
        attrs.update(
            {
                dimension: serializers.RegexField(DIMENSION_VALUE_RE, max_length=32)
                for dimension in DIMENSIONS
            }
        )
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
PolicyCellValuesSerializer = _cell_serializer("PolicyCellValues", partial=True, with_key=False)


def _dimension_values() -> serializers.ListField:
    return serializers.ListField(
        child=serializers.RegexField(DIMENSION_VALUE_RE, max_length=32),
        min_length=1,
        max_length=MAX_DIMENSION_VALUES,
    )


class DimensionsSerializer(serializers.Serializer[Any]):
    task_type = _dimension_values()
    latency_budget = _dimension_values()
    privacy_tier = _dimension_values()

    class Meta:
        ref_name = "PolicyDimensions"


class PolicyDocumentSerializer(serializers.Serializer[Any]):
    """The policy document of PROTOCOL.md (what a device runs, and the export format)."""

    fleet = serializers.SlugField()
    version = serializers.IntegerField(allow_null=True, help_text="null for a draft")
    etag = serializers.CharField(allow_blank=True)
    published_at = serializers.DateTimeField(allow_null=True)
    dimensions = DimensionsSerializer()
    cells = PolicyCellSerializer(many=True)

    class Meta:
        ref_name = "PolicyDocument"


class PolicyDocumentImportSerializer(serializers.Serializer[Any]):
    """A policy document to replace the draft's table with: every cell of the dimensions."""

    dimensions = DimensionsSerializer()
    cells = serializers.ListField(child=PolicyCellSerializer(), max_length=MAX_CELLS)
    fleet = serializers.SlugField(required=False, help_text="ignored: the path names the fleet")
    version = serializers.IntegerField(required=False, allow_null=True, help_text="ignored")
    etag = serializers.CharField(required=False, allow_blank=True, help_text="ignored")
    published_at = serializers.DateTimeField(required=False, allow_null=True, help_text="ignored")
    revision = DRAFT_REVISION()

    class Meta:
        ref_name = "PolicyDocumentImport"


class FleetSerializer(serializers.Serializer[Any]):
    slug = serializers.SlugField()
    name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    created_at = serializers.DateTimeField()
    latest_version = serializers.IntegerField(allow_null=True)
    draft_revision = serializers.IntegerField(allow_null=True, help_text="null: no draft")

    class Meta:
        ref_name = "Fleet"


class FleetListSerializer(serializers.Serializer[Any]):
    results = FleetSerializer(many=True)

    class Meta:
        ref_name = "FleetList"


class VersionSerializer(serializers.Serializer[Any]):
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

    class Meta:
        ref_name = "Version"


class VersionListSerializer(serializers.Serializer[Any]):
    results = VersionSerializer(many=True)

    class Meta:
        ref_name = "VersionList"


class VersionWithDocumentSerializer(VersionSerializer):
    """A version's metadata and its document (a draft, or any version by reference)."""

    document = PolicyDocumentSerializer()

    class Meta:
        ref_name = "VersionWithDocument"


@closed_body
class DraftCellEditSerializer(serializers.Serializer[Any]):
    """One cell's new values: flat (`"weights.length": 0.4`) or nested as in the document."""

    task_type = serializers.RegexField(DIMENSION_VALUE_RE, max_length=32)
    latency_budget = serializers.RegexField(DIMENSION_VALUE_RE, max_length=32)
    privacy_tier = serializers.RegexField(DIMENSION_VALUE_RE, max_length=32)
    values = PolicyCellValuesSerializer()

    class Meta:
        ref_name = "DraftCellEdit"


class DraftCellsEditSerializer(serializers.Serializer[Any]):
    cells = DraftCellEditSerializer(many=True, allow_empty=False)
    revision = DRAFT_REVISION()

    class Meta:
        ref_name = "DraftCellsEdit"


class DiffFieldSerializer(serializers.Serializer[Any]):
    field = serializers.CharField()
    before = serializers.JSONField(allow_null=True)
    after = serializers.JSONField(allow_null=True)

    class Meta:
        ref_name = "DiffField"


class DiffCellSerializer(serializers.Serializer[Any]):
    cell = serializers.CharField(help_text="task_type/latency_budget/privacy_tier")
    status = serializers.ChoiceField(choices=["changed", "added", "removed"])
    fields = DiffFieldSerializer(many=True)  # type: ignore[assignment]  # a declared field

    class Meta:
        ref_name = "DiffCell"


class DimensionChangeSerializer(serializers.Serializer[Any]):
    added = serializers.ListField(child=serializers.CharField())
    removed = serializers.ListField(child=serializers.CharField())

    class Meta:
        ref_name = "DimensionChange"


class DiffSerializer(serializers.Serializer[Any]):
    fleet = serializers.SlugField()
    a = serializers.CharField(help_text="the label of version a, e.g. v2 or draft")
    b = serializers.CharField()
    dimensions = serializers.DictField(
        child=DimensionChangeSerializer(), help_text="per dimension name, only those that changed"
    )
    cells = DiffCellSerializer(many=True)
    changed_cells = serializers.IntegerField(min_value=0)

    class Meta:
        ref_name = "Diff"


class AuditEntrySerializer(serializers.Serializer[Any]):
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

    class Meta:
        ref_name = "AuditEntry"


class AuditListSerializer(serializers.Serializer[Any]):
    results = AuditEntrySerializer(many=True)

    class Meta:
        ref_name = "AuditList"


# --- devices and rollouts ---------------------------------------------------------------------


class EnrollmentSerializer(serializers.Serializer[Any]):
    device_token = serializers.CharField(help_text="shown once; send as Authorization: Bearer")
    device_id = serializers.CharField()
    fleet = serializers.SlugField()

    class Meta:
        ref_name = "Enrollment"


class RolloutSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    candidate = serializers.IntegerField()
    stable = serializers.IntegerField()
    stage = serializers.ChoiceField(choices=list(Rollout.STAGES))
    state = serializers.ChoiceField(choices=Rollout.State.values)
    open = serializers.BooleanField()
    started_at = serializers.DateTimeField()
    stage_changed_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    reason = serializers.CharField(allow_blank=True)
    next = serializers.CharField(allow_null=True, help_text="resume, advance to N%, complete")
    next_stage = serializers.IntegerField(allow_null=True)

    class Meta:
        ref_name = "Rollout"


class CloudPressureStateSerializer(serializers.Serializer[Any]):
    theta_offset = serializers.FloatField()
    until = serializers.DateTimeField()

    class Meta:
        ref_name = "CloudPressureState"


class ConvergenceVersionSerializer(serializers.Serializer[Any]):
    version = serializers.IntegerField()
    role = serializers.ChoiceField(choices=["stable", "candidate", "other"])
    assigned = serializers.IntegerField(min_value=0)
    acked = serializers.IntegerField(min_value=0)
    acked_online = serializers.IntegerField(min_value=0)

    class Meta:
        ref_name = "ConvergenceVersion"


class PropagationSerializer(serializers.Serializer[Any]):
    p50_ms = serializers.FloatField(allow_null=True)
    p95_ms = serializers.FloatField(allow_null=True)
    count = serializers.IntegerField(min_value=0)

    class Meta:
        ref_name = "Propagation"


class ConvergenceSerializer(serializers.Serializer[Any]):
    devices = serializers.IntegerField(min_value=0)
    online = serializers.IntegerField(min_value=0)
    versions = ConvergenceVersionSerializer(many=True)
    last_change_at = serializers.DateTimeField(allow_null=True)
    propagation = PropagationSerializer()

    class Meta:
        ref_name = "Convergence"


class RolloutStatusSerializer(serializers.Serializer[Any]):
    fleet = serializers.SlugField()
    stable_version = serializers.IntegerField(allow_null=True)
    rollout = RolloutSerializer(allow_null=True, help_text="the open rollout, else the last one")
    cloud_pressure = CloudPressureStateSerializer(allow_null=True)
    convergence = ConvergenceSerializer()

    class Meta:
        ref_name = "RolloutStatus"


class CloudPressureInputSerializer(serializers.Serializer[Any]):
    theta_offset = serializers.FloatField(
        min_value=-1.0, max_value=1.0, help_text="added to every cell's θ while it lasts"
    )
    ttl_s = serializers.IntegerField(min_value=1, max_value=MAX_CLOUD_PRESSURE_TTL_S)

    class Meta:
        ref_name = "CloudPressureInput"


class EnrollmentKeySerializer(serializers.Serializer[Any]):
    fleet_key = serializers.CharField(help_text="shown once")

    class Meta:
        ref_name = "EnrollmentKey"


class DeviceRevokedSerializer(serializers.Serializer[Any]):
    device_id = serializers.CharField()
    revoked_at = serializers.DateTimeField()

    class Meta:
        ref_name = "DeviceRevoked"
