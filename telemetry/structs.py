"""The device hot path's one declaration of its input: a msgspec struct (ingest, feedback).

msgspec decodes a good body in C. When it refuses one it names only the first problem, so each
item of the body is then checked against the same struct field by field (`field_problems`),
and a 400 names every bad item and field. `request_body` puts the struct's own JSON Schema into
the OpenAPI document (the drf-spectacular hook `postprocess_struct_bodies` adds it), so a
generated client refuses what the server refuses: there is no second declaration to keep in
step.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Final, Generic, TypeVar

import msgspec
import msgspec.inspect

from controlplane import json_guard
from controlplane.exceptions import ValidationFailed

Batch = TypeVar("Batch")
ItemProblems = Callable[[int, Any], list[dict[str, Any]]]

REQUIRED: Final = "This field is required."
_MISSING: Final = object()
# Request components are named as drf-spectacular names a serializer's (COMPONENT_SPLIT_REQUEST).
_REF_TEMPLATE: Final = "#/components/schemas/{name}Request"
_COMPONENTS: dict[str, dict[str, Any]] = {}
_REFS: set[str] = set()


def field_problems(struct_type: type[msgspec.Struct], raw: Mapping[str, Any]) -> dict[str, str]:
    """{field: why} for each field of `raw` (one item of a body, as `json.loads` read it) that
    `struct_type` refuses, in the struct's field order."""
    problems: dict[str, str] = {}
    for info in msgspec.structs.fields(struct_type):
        value = raw.get(info.encode_name, _MISSING)
        if value is _MISSING or (value is None and info.required):
            if info.required:
                problems[info.name] = REQUIRED
            continue
        try:
            msgspec.convert(value, info.type)
        except msgspec.ValidationError as exc:
            problems[info.name] = str(exc)
    return problems


def batch_items(
    body: bytes,
    key: str,
    *,
    most: int,
    too_large: Callable[[str], Exception],
    refuse: Callable[[list[dict[str, str]]], ValidationFailed],
) -> tuple[dict[str, Any], list[Any]]:
    """The body and its items under `key` as the standard library reads them, for a complete
    check of a body msgspec refused. Raises ValidationFailed (`malformed_json`) when it is not
    JSON, `refuse(details)` when it is not `{key: [...]}` or the list is empty, and
    `too_large(message)` over `most` items."""
    try:
        # UTF-8 only, as msgspec reads it (json.loads would guess UTF-16 or UTF-32 too).
        document = json.loads(body.decode("utf-8"))
    except ValueError as exc:
        raise ValidationFailed(
            f"The body is not valid JSON: {exc}", code="malformed_json"
        ) from None
    if not isinstance(document, dict) or not isinstance(document.get(key), list):
        raise refuse([{"field": key, "message": f'The body must be {{"{key}": [...]}}.'}])
    items: list[Any] = document[key]
    noun = "events" if key == "events" else "items"
    if len(items) > most:
        raise too_large(f"{len(items)} {noun}; at most {most} per batch.")
    if not items:
        empty = f"A batch holds 1 to {most} {noun}; this one is empty (send nothing instead)."
        raise refuse([{"field": key, "message": empty}])
    return document, items


def unnamed_problem(
    document: Any, body: bytes, decoder: msgspec.json.Decoder[Any]
) -> json_guard.JsonProblem | None:
    """What the fast pass refused when no item's field is at fault: NaN or Infinity in a field
    the protocol does not know (Python's json reads them), else msgspec's own words."""
    unread = json_guard.value_problem(document)
    if unread is not None:
        return unread
    try:
        decoder.decode(body)
    except msgspec.MsgspecError as exc:
        return json_guard.JsonProblem("", str(exc))
    return None


class BatchBody(Generic[Batch]):
    """A device's batch body as its struct declares it: one field, `{key: [item, …]}`, of 1 to
    `most` items (the list's `msgspec.Meta`). How a refusal says so: `refuse(details)` (400),
    `too_large(message)` (413), `guard_detail` a json_guard problem as one of the details."""

    def __init__(
        self,
        struct_type: type[Batch],
        *,
        too_large: type[Exception],
        refuse: Callable[[list[dict[str, Any]]], ValidationFailed],
        guard_detail: Callable[[json_guard.JsonProblem], dict[str, Any]],
    ) -> None:
        info = msgspec.inspect.type_info(struct_type)
        fields = info.fields if isinstance(info, msgspec.inspect.StructType) else ()
        items = fields[0] if len(fields) == 1 else None
        if (
            items is None
            or not isinstance(items.type, msgspec.inspect.ListType)
            or items.type.max_length is None
        ):
            raise TypeError(f"{struct_type!r} is not one list field with a max_length")
        self.key: Final = items.encode_name
        self.most: Final = items.type.max_length
        self.decoder: Final = msgspec.json.Decoder(struct_type)
        self.too_large: Final = too_large
        self.refuse: Final = refuse
        self.guard_detail: Final = guard_detail

    def decode(self, body: bytes, item_problems: ItemProblems) -> Batch:
        """The body, decoded in C; refused naming every bad item and field: `item_problems(index,
        item)` names an item's (an item as the standard library reads it) when msgspec refuses."""
        try:
            # Before any parser: depth (a recursive parser would overflow the stack), NUL and
            # lone surrogates (never storable); both name the item and field.
            json_guard.check_raw(body)
        except json_guard.JsonRefused as refused:
            raise self.refuse([self.guard_detail(refused.problem)]) from None
        try:
            return self.decoder.decode(body)
        except msgspec.MsgspecError:
            raise self._complete_check(body, item_problems) from None

    def _complete_check(self, body: bytes, item_problems: ItemProblems) -> Exception:
        """Check the whole body by the struct and name every problem (the fast pass stopped at
        one)."""
        try:
            document, items = batch_items(
                body, self.key, most=self.most, too_large=self.too_large, refuse=self.refuse
            )
        except (ValidationFailed, self.too_large) as exc:
            return exc
        details = [
            detail for index, raw in enumerate(items) for detail in item_problems(index, raw)
        ]
        if not details and (unnamed := unnamed_problem(document, body, self.decoder)) is not None:
            details.append(self.guard_detail(unnamed))
        return self.refuse(details)


def request_body(struct_type: type[msgspec.Struct]) -> dict[str, Any]:
    """The schema to name in `extend_schema(request={"application/json": ...})`: a reference to
    the struct's JSON Schema, which `postprocess_struct_bodies` adds to the components."""
    (reference,), components = msgspec.json.schema_components(
        [struct_type], ref_template=_REF_TEMPLATE
    )
    for name, schema in components.items():
        _COMPONENTS[f"{name}Request"] = _openapi_schema(schema)
    _REFS.add(reference["$ref"])
    return reference


def _openapi_schema(schema: Any) -> Any:
    """msgspec's JSON Schema (2020-12) as OpenAPI 3.0 says it: `X | None` is `nullable`, an
    enum of strings has its type, titles (the class names) are dropped. An optional boolean
    (`bool | None = None`) is documented as what it is to a device, true or false or left out:
    the server reads a null as left out (older devices), but the contract never offered it."""
    if isinstance(schema, list):
        return [_openapi_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: _openapi_schema(value) for key, value in schema.items() if key != "title"}
    options = out.get("anyOf")
    if options is not None and {"type": "null"} in options:
        rest = [option for option in options if option != {"type": "null"}]
        if len(rest) == 1:
            del out["anyOf"]
            nullable = {} if rest[0] == {"type": "boolean"} else {"nullable": True}
            out = {**rest[0], **out, **nullable}
    enum = out.get("enum")
    if enum is not None and "type" not in out and all(isinstance(v, str) for v in enum):
        out = {"type": "string", **out}
    return out


def postprocess_struct_bodies(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """drf-spectacular postprocessing hook: the structs' components, and their bodies required
    (a raw schema's body is optional to drf-spectacular)."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas.update(_COMPONENTS)
    result["components"]["schemas"] = dict(sorted(schemas.items()))
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            body = operation.get("requestBody") if isinstance(operation, dict) else None
            if not isinstance(body, dict):
                continue
            media_types = body.get("content", {}).values()
            if any(media.get("schema", {}).get("$ref") in _REFS for media in media_types):
                body["required"] = True
    return result
