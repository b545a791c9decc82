"""Device attributes and segment rules: declared and evaluated once, in `edge_sdk.segments`,
which devices run too (the server and the SDK call the same function); and the table a device
runs, a version's overrides by segment resolved with its attributes (`edge_sdk.overrides`)."""

from typing import Any

from controlplane.exceptions import ValidationFailed
from edge_sdk import segments
from edge_sdk.overrides import cell_winners as cell_winners
from edge_sdk.overrides import matching_overrides as matching_overrides
from edge_sdk.overrides import merge_cell as merge_cell
from edge_sdk.overrides import resolve_cells as resolve_cells
from edge_sdk.segments import *  # noqa: F403  (the SDK's one declaration, re-exported whole)

__all__ = [
    *segments.__all__,
    "RULE_EXAMPLES",
    "attributes_checked",
    "attributes_schema",
    "cell_winners",
    "matching_overrides",
    "merge_cell",
    "resolve_cells",
    "rule_checked",
]


# Rules a person starts from (the segment page offers them), each a valid rule.
RULE_EXAMPLES: list[tuple[str, dict[str, Any]]] = [
    (
        "NPU phones on Android 14+",
        {
            "all_of": [
                {"attribute": "accelerator", "equals": "npu"},
                {"attribute": "os_version", "range": {"gte": "14"}},
            ]
        },
    ),
    (
        "Small models (INT4 or 8 GB and less)",
        {
            "any_of": [
                {"attribute": "quantisation", "equals": "int4"},
                {"attribute": "memory_gb", "range": {"lte": 8}},
            ]
        },
    ),
    ("App 4.12 and later", {"attribute": "app_version", "range": {"gte": "4.12.0"}}),
    ("Cars", {"attribute": "platform", "in": ["android-automotive"]}),
]


def attributes_checked(raw: object, *, field: str = "attributes") -> dict[str, Any]:
    """A device's reported `attributes`, checked (`attributes_parse`), else a refusal naming
    the attribute at fault (`attributes.memory_gb`)."""
    try:
        return segments.attributes_parse(raw)
    except segments.AttributeProblem as problem:
        at = f"{field}.{problem.field}" if problem.field else field
        raise ValidationFailed(
            f"{at}: {problem.message}.", details=[{"field": at, "message": problem.message}]
        ) from None


def attributes_schema() -> dict[str, Any]:
    """The OpenAPI schema of the reported `attributes` object, from their one declaration."""
    properties: dict[str, Any] = {}
    for name in segments.REPORTED_ATTRIBUTES:
        attribute = segments.ATTRIBUTES[name]
        schema: dict[str, Any] = {"description": attribute.meaning, "example": attribute.example}
        if attribute.kind == "number":
            schema |= {
                "type": "number",
                "minimum": attribute.minimum,
                "maximum": attribute.maximum,
            }
        elif attribute.kind == "choice":
            schema |= {"type": "string", "enum": list(attribute.choices)}
        else:
            schema |= {"type": "string", "minLength": 1, "maxLength": attribute.max_length}
            if attribute.kind == "version":
                schema["pattern"] = segments.VERSION_PATTERN
            elif attribute.pattern is not None:
                schema["pattern"] = attribute.pattern.pattern.replace("\\A", "^").replace(
                    "\\Z", "$"
                )
        properties[name] = {**schema, "nullable": True}
    return {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
        "description": "What the device is (docs/PROTOCOL.md, Device attributes); an attribute "
        "left out or null is unknown.",
    }


def rule_checked(rule: object, *, field: str = "rule") -> dict[str, Any]:
    """`rule` when it is a valid rule, else a refusal naming where in `field` it is not
    (`rule.any_of[1].in[0]`): for the API, the pages and the services alike."""
    try:
        segments.rule_check(rule)
    except segments.RuleProblem as problem:
        at = f"{field}.{problem.field}" if problem.field else field
        raise ValidationFailed(
            f"{at}: {problem.message}.", details=[{"field": at, "message": problem.message}]
        ) from None
    assert isinstance(rule, dict)
    return rule
