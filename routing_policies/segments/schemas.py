"""The segment API's bodies: the input serializers (the API and the segment page validate with
them) and the answers, for the OpenAPI schema."""

import json
import re
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlplane.api import JsonIntegerField, JsonRegexField, TidyJsonStringField
from controlplane.openapi import ApiSerializer, closed_body, non_empty_body

from . import rules
from .models import MAX_SEGMENT_DESCRIPTION, MAX_SEGMENT_NAME

SEGMENT_NAME_RE = re.compile(rf"\A[a-z0-9][a-z0-9_-]{{0,{MAX_SEGMENT_NAME - 1}}}\Z")
# Path words beside a segment's name under /segments/: not names.
RESERVED_NAMES = frozenset({"preview"})
MAX_REVISION = 2**31 - 1

RULE_HELP = (
    "A condition on one attribute, `{attribute, equals | in | range}`, or a group, "
    f"`{{all_of: [...]}}` / `{{any_of: [...]}}` (1-{rules.MAX_RULE_CHILDREN} rules, nested at "
    f"most {rules.MAX_RULE_DEPTH} deep, {rules.MAX_RULE_NODES} conditions and groups and "
    f"{rules.MAX_RULE_BYTES} bytes in all; `in` 1-{rules.MAX_IN_VALUES} values). `range` takes "
    "`gt`/`gte`/`lt`/`lte`: numbers, or versions for a version attribute (compared as semantic "
    "versions). A device that did not report an attribute matches no condition on it. "
    "Attributes: " + ", ".join(f"{a.name} ({a.kind})" for a in rules.ATTRIBUTES.values()) + "."
)


@extend_schema_field(
    {
        "type": "object",
        "description": RULE_HELP,
        "example": {
            "all_of": [
                {"attribute": "accelerator", "equals": "npu"},
                {"attribute": "os_version", "range": {"gte": "14"}},
            ]
        },
    }
)
class RuleField(serializers.JSONField):
    """A segment rule, checked by `edge_sdk.segments.rule_check` (a refusal names the place
    inside the rule, `rule.all_of[1].range.gte`). A page posts it as JSON text."""

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        return rules.rule_checked(data, field=self.field_name or "rule")

    def form_value(self, text: str) -> Any:
        try:
            return json.loads(text)
        except ValueError:
            return text  # refused as "must be an object"


def _name_field(**kwargs: Any) -> JsonRegexField:
    return JsonRegexField(
        SEGMENT_NAME_RE,
        max_length=MAX_SEGMENT_NAME,
        error_messages={
            "invalid": f"1 to {MAX_SEGMENT_NAME} lower-case letters, digits, _ and -, starting "
            "with a letter or digit."
        },
        help_text="unique in the fleet",
        **kwargs,
    )


def _description_field() -> TidyJsonStringField:
    return TidyJsonStringField(
        max_length=MAX_SEGMENT_DESCRIPTION, required=False, allow_blank=True, default=""
    )


class _NameChecks(ApiSerializer):
    def validate_name(self, value: str) -> str:
        if value in RESERVED_NAMES:
            raise serializers.ValidationError(f"{value!r} is reserved.")
        return value


@closed_body
class SegmentInputSerializer(_NameChecks):
    component_name = "SegmentInput"

    name = _name_field()
    description = _description_field()
    rule = RuleField()


@closed_body
@non_empty_body
class SegmentUpdateSerializer(_NameChecks):
    component_name = "SegmentUpdateInput"

    revision = JsonIntegerField(
        min_value=1, max_value=MAX_REVISION, help_text="the revision you read (409 when stale)"
    )
    name = _name_field(required=False)
    description = TidyJsonStringField(
        max_length=MAX_SEGMENT_DESCRIPTION, required=False, allow_blank=True
    )
    rule = RuleField(required=False)


def update_arguments(data: dict[str, Any]) -> dict[str, Any]:
    """A checked `SegmentUpdateSerializer` body as `services.segment_update`'s keywords (a
    field left out: unchanged)."""
    return {
        "revision": data["revision"],
        "new_name": data.get("name"),
        "description": data.get("description"),
        "rule": data.get("rule"),
    }


@closed_body
class RulePreviewInputSerializer(ApiSerializer):
    component_name = "SegmentPreviewInput"

    rule = RuleField()


class PreviewWarningSerializer(ApiSerializer):
    component_name = "SegmentPreviewWarning"

    code = serializers.ChoiceField(
        choices=["no_devices", "matches_none", "matches_all", "attribute_unreported"]
    )
    message = serializers.CharField()


class PreviewSerializer(ApiSerializer):
    component_name = "SegmentPreview"

    matching = serializers.IntegerField(help_text="enrolled devices the rule matches")
    devices = serializers.IntegerField(help_text="enrolled devices of the fleet (not revoked)")
    warnings = PreviewWarningSerializer(many=True)


class SegmentSerializer(ApiSerializer):
    name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    rule = RuleField()
    revision = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    preview = PreviewSerializer(required=False)


class SegmentListSerializer(ApiSerializer):
    devices = serializers.IntegerField(help_text="enrolled devices of the fleet (not revoked)")
    segments = SegmentSerializer(many=True)
