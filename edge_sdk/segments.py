"""Device attributes and segments: what kind of device this is, and the named rules over it.

A device reports its attributes at enrolment and in `hello` (docs/PROTOCOL.md, "Device
attributes"); an attribute it did not send is unknown, never guessed. A segment is a rule over
them (docs/segments.md): `equals`, `in` and `range` (numbers, or semantic versions for a version
attribute) on one attribute, combined by `all_of` and `any_of`. An unknown attribute never
satisfies a rule on it, so a device that did not say it has an NPU is in no NPU segment.

This module is the one declaration of the attributes and their bounds, and the one evaluation
of a rule (`rule_matches`): pure, standard library only. The control plane imports it
(routing_policies.segments.rules) to validate what devices send and what operators write, and
to count the devices a rule matches; the SDK uses it on the device.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final, Literal

__all__ = [
    "ATTRIBUTES",
    "MAX_IN_VALUES",
    "MAX_RULE_BYTES",
    "MAX_RULE_CHILDREN",
    "MAX_RULE_DEPTH",
    "MAX_RULE_NODES",
    "REPORTED_ATTRIBUTES",
    "VERSION_PATTERN",
    "Attribute",
    "AttributeProblem",
    "RuleProblem",
    "attributes_parse",
    "device_attributes",
    "rule_attributes",
    "rule_check",
    "rule_matches",
    "segments_of",
    "version_key",
]

Kind = Literal["text", "choice", "version", "number"]
Value = str | int | float


@dataclass(frozen=True, slots=True, kw_only=True)
class Attribute:
    """One device attribute: its kind and bounds, and what it means."""

    name: str
    kind: Kind
    meaning: str
    example: Value
    max_length: int = 0  # text, version
    pattern: re.Pattern[str] | None = None  # text: what a value must look like, if anything
    choices: tuple[str, ...] = ()  # choice
    minimum: float = 0.0  # number
    maximum: float = 0.0  # number


# A lower-case identifier: a model id (`qwen2.5-1.5b`), a quantisation (`int4`), a region.
_IDENTIFIER: Final = re.compile(r"\A[a-z0-9][a-z0-9._-]*\Z")
# A semantic version, or a shorter one as OS versions are written (`14`, `17.4.1`): 1 to 4
# numbers, then an optional pre-release (`-beta.2`) and build (`+20261201`, ignored in order).
# ASCII digits only (Python's \d also takes other scripts' digits); the same text is the
# OpenAPI schema's pattern (VERSION_PATTERN), which JSON Schema reads as ECMA-262 alike.
VERSION_PATTERN: Final = (
    r"^([0-9]{1,9}(?:\.[0-9]{1,9}){0,3})"
    r"(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
    r"(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$"
)
_VERSION: Final = re.compile(VERSION_PATTERN.removesuffix("$") + r"\Z")
_CONTROL: Final = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _text(
    name: str,
    *,
    max_length: int,
    meaning: str,
    example: str,
    pattern: re.Pattern[str] | None = None,
) -> Attribute:
    """A text attribute of at most `max_length` characters (that `pattern` matches, if any)."""
    return Attribute(
        name=name,
        kind="text",
        max_length=max_length,
        pattern=pattern,
        meaning=meaning,
        example=example,
    )


def _identifier(name: str, *, max_length: int, meaning: str, example: str) -> Attribute:
    """A text attribute that holds a lower-case identifier (`_IDENTIFIER`)."""
    return _text(name, max_length=max_length, meaning=meaning, example=example, pattern=_IDENTIFIER)


def _version(name: str, *, meaning: str, example: str) -> Attribute:
    """A version attribute (VERSION_PATTERN), ordered as semantic versions are."""
    return Attribute(name=name, kind="version", max_length=32, meaning=meaning, example=example)


ATTRIBUTES: Final[Mapping[str, Attribute]] = {
    a.name: a
    for a in (
        # `platform` and `model` are hello's own fields (PROTOCOL v1), read as attributes.
        _text("platform", max_length=64, meaning="operating system family", example="android"),
        _version("os_version", meaning="operating system version", example="14"),
        _version("app_version", meaning="the app's version", example="4.12.0"),
        _text("model", max_length=128, meaning="the device's hardware model", example="Pixel 8"),
        Attribute(
            name="accelerator",
            kind="choice",
            choices=("npu", "gpu", "cpu"),
            meaning="what runs the on-device model",
            example="npu",
        ),
        Attribute(
            name="memory_gb",
            kind="number",
            minimum=0.0,
            maximum=1024.0,
            meaning="memory class: the device's RAM in GB",
            example=8,
        ),
        _identifier(
            "local_model", max_length=64, meaning="the on-device model's id", example="qwen2.5-1.5b"
        ),
        _identifier(
            "quantisation",
            max_length=16,
            meaning="the on-device model's quantisation",
            example="int4",
        ),
        _identifier(
            "region",
            max_length=32,
            meaning="where the device is (the app's own region code)",
            example="eu-west",
        ),
    )
}
# What the `attributes` object of enrolment, `hello` and the MQTT birth holds: the rest are
# hello's own fields already.
REPORTED_ATTRIBUTES: Final = tuple(n for n in ATTRIBUTES if n not in ("platform", "model"))

# Bounds of a rule: nesting of all_of / any_of, its nodes in all, an `in`'s values, a
# combinator's children.
MAX_RULE_DEPTH: Final = 4
MAX_RULE_NODES: Final = 64
MAX_IN_VALUES: Final = 64
MAX_RULE_CHILDREN: Final = 32
MAX_RULE_BYTES: Final = 16_384  # the rule as compact JSON
_BOUNDS: Final = ("gt", "gte", "lt", "lte")


class AttributeProblem(ValueError):
    """A reported attribute refused: `field` names it (`memory_gb`), `message` says why."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.message = message


class RuleProblem(AttributeProblem):
    """A segment rule refused: `field` is the path inside the rule (`any_of[1].in[0]`)."""


# --- values ------------------------------------------------------------------------------------


@lru_cache(maxsize=4096)
def version_key(text: str) -> tuple[Any, ...] | None:
    """The order of a version (None when `text` is not one): numbers compared as numbers,
    missing ones as 0 (`14` = `14.0.0`), a pre-release before its release, build ignored; the
    identifiers of pre-releases compared as semver says (numbers before words)."""
    match = _VERSION.match(text)
    if match is None:
        return None
    core = [int(part) for part in match[1].split(".")]
    core += [0] * (4 - len(core))
    if match[2] is None:
        return (*core, 1, ())
    pre = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in match[2].split("."))
    return (*core, 0, pre)


def _value_problem(attribute: Attribute, value: object) -> str | None:
    """Why `value` is not a value of `attribute`, or None."""
    if attribute.kind == "number":
        if isinstance(value, bool) or not isinstance(value, int | float):
            return "must be a number"
        # A whole number is compared as it is (math.isfinite would overflow on 10**400).
        finite = isinstance(value, int) or math.isfinite(value)
        if not finite or not attribute.minimum <= value <= attribute.maximum:
            return f"must be from {attribute.minimum:g} to {attribute.maximum:g}"
        return None
    if not isinstance(value, str):
        return "must be a string"
    if attribute.kind == "choice":
        return (
            None if value in attribute.choices else f"must be one of {', '.join(attribute.choices)}"
        )
    if not value or len(value) > attribute.max_length:
        return f"must be 1 to {attribute.max_length} characters"
    if value != value.strip() or _CONTROL.search(value):
        return "must not hold control characters or start or end with whitespace"
    if attribute.kind == "version" and version_key(value) is None:
        return "must be a version: 1 to 4 numbers joined by dots (14, 4.12.0, 2.0.0-beta.1)"
    if attribute.pattern is not None and not attribute.pattern.match(value):
        return "must be lower-case letters, digits and . _ - (starting with a letter or digit)"
    return None


def _ordered(attribute: Attribute, value: Value) -> Any:
    """The value as it compares: a version by its order, a number as a number, text as is."""
    if attribute.kind == "version":
        return version_key(value) if isinstance(value, str) else None
    return value


# --- what a device reports -----------------------------------------------------------------------


def attributes_parse(raw: object) -> dict[str, Value]:
    """The `attributes` object a device sent, checked: a known name each, a value within its
    bounds. `null` is unknown, as is a name left out; `AttributeProblem` names the first bad
    one."""
    if not isinstance(raw, Mapping):
        raise AttributeProblem("", "must be an object")
    parsed: dict[str, Value] = {}
    for name, value in raw.items():
        if name not in REPORTED_ATTRIBUTES:
            known = ", ".join(REPORTED_ATTRIBUTES)
            raise AttributeProblem(str(name)[:40], f"unknown attribute (known: {known})")
        if value is None:
            continue
        problem = _value_problem(ATTRIBUTES[name], value)
        if problem is not None:
            raise AttributeProblem(name, problem)
        parsed[name] = value
    return parsed


def device_attributes(
    *, platform: str = "", model: str = "", reported: Mapping[str, Value] | None = None
) -> dict[str, Value]:
    """A device's attributes as rules read them: hello's `platform` and `model` (when not
    blank) with its reported `attributes`; a name missing here is unknown."""
    attributes: dict[str, Value] = {}
    if platform:
        attributes["platform"] = platform
    if model:
        attributes["model"] = model
    for name, value in (reported or {}).items():
        if name in REPORTED_ATTRIBUTES and value is not None:
            attributes[name] = value
    return attributes


# --- rules ---------------------------------------------------------------------------------------


def rule_check(rule: object) -> None:
    """Refuse a rule that is not one (`RuleProblem` naming where): unknown keys or attributes,
    values outside an attribute's bounds, an empty or inverted range, too deep or too large."""
    nodes = _check(rule, "", 0)
    if nodes > MAX_RULE_NODES:
        raise RuleProblem(
            "", f"at most {MAX_RULE_NODES} conditions and groups in all (got {nodes})"
        )
    size = len(json.dumps(rule, separators=(",", ":"), ensure_ascii=False).encode())
    if size > MAX_RULE_BYTES:
        raise RuleProblem("", f"at most {MAX_RULE_BYTES} bytes as JSON (got {size})")


def _at(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _check(rule: object, path: str, depth: int) -> int:
    """Check one node; the number of nodes it holds (itself included)."""
    if not isinstance(rule, Mapping):
        raise RuleProblem(path, "must be an object")
    for combinator in ("all_of", "any_of"):
        if combinator in rule:
            return _check_group(rule, combinator, path, depth)
    extra = sorted(str(k)[:40] for k in rule if k not in ("attribute", "equals", "in", "range"))
    if extra:
        raise RuleProblem(
            _at(path, extra[0]), "unknown key (all_of, any_of, attribute, equals, in, range)"
        )
    name = rule.get("attribute")
    if not isinstance(name, str) or name not in ATTRIBUTES:
        raise RuleProblem(
            _at(path, "attribute"), f"unknown attribute (known: {', '.join(ATTRIBUTES)})"
        )
    attribute = ATTRIBUTES[name]
    operators = [op for op in ("equals", "in", "range") if op in rule]
    if len(operators) != 1:
        raise RuleProblem(path, "needs exactly one of equals, in, range")
    operator = operators[0]
    if operator == "equals":
        _check_value(attribute, rule["equals"], _at(path, "equals"))
    elif operator == "in":
        _check_in(attribute, rule["in"], _at(path, "in"))
    else:
        _check_range(attribute, rule["range"], _at(path, "range"))
    return 1


def _check_group(rule: Mapping[str, Any], combinator: str, path: str, depth: int) -> int:
    if len(rule) != 1:
        other = sorted(str(k)[:40] for k in rule if k != combinator)[0]
        raise RuleProblem(_at(path, other), f"a group holds only {combinator}")
    if depth >= MAX_RULE_DEPTH:
        raise RuleProblem(_at(path, combinator), f"groups nest at most {MAX_RULE_DEPTH} deep")
    children = rule[combinator]
    if not isinstance(children, list) or not 1 <= len(children) <= MAX_RULE_CHILDREN:
        raise RuleProblem(
            _at(path, combinator), f"must be a list of 1 to {MAX_RULE_CHILDREN} rules"
        )
    nodes = 1
    for index, child in enumerate(children):
        nodes += _check(child, f"{_at(path, combinator)}[{index}]", depth + 1)
        if nodes > MAX_RULE_NODES:
            raise RuleProblem(path, f"at most {MAX_RULE_NODES} conditions and groups in all")
    return nodes


def _check_value(attribute: Attribute, value: object, path: str) -> None:
    problem = _value_problem(attribute, value)
    if problem is not None:
        raise RuleProblem(path, f"{attribute.name} {problem}")


def _check_in(attribute: Attribute, values: object, path: str) -> None:
    if not isinstance(values, list) or not 1 <= len(values) <= MAX_IN_VALUES:
        raise RuleProblem(path, f"must be a list of 1 to {MAX_IN_VALUES} values")
    seen: set[Any] = set()
    for index, value in enumerate(values):
        _check_value(attribute, value, f"{path}[{index}]")
        if _ordered(attribute, value) in seen:
            raise RuleProblem(f"{path}[{index}]", "listed twice")
        seen.add(_ordered(attribute, value))


def _check_range(attribute: Attribute, bounds: object, path: str) -> None:
    if attribute.kind not in ("number", "version"):
        raise RuleProblem(path, f"{attribute.name} is not a number or a version: use equals or in")
    if not isinstance(bounds, Mapping) or not bounds:
        raise RuleProblem(path, "must be an object of gt, gte, lt, lte")
    for key in bounds:
        if key not in _BOUNDS:
            raise RuleProblem(_at(path, str(key)[:40]), "unknown bound (gt, gte, lt, lte)")
        _check_value(attribute, bounds[key], _at(path, key))
    if ("gt" in bounds and "gte" in bounds) or ("lt" in bounds and "lte" in bounds):
        raise RuleProblem(path, "at most one lower bound (gt, gte) and one upper (lt, lte)")
    low_key = "gt" if "gt" in bounds else "gte"
    high_key = "lt" if "lt" in bounds else "lte"
    if low_key in bounds and high_key in bounds:
        low, high = _ordered(attribute, bounds[low_key]), _ordered(attribute, bounds[high_key])
        if low > high or (low == high and (low_key == "gt" or high_key == "lt")):
            raise RuleProblem(path, "is empty: the lower bound is not below the upper")


def rule_attributes(rule: Mapping[str, Any]) -> Iterator[str]:
    """The attributes a (checked) rule reads, each time it reads one."""
    for combinator in ("all_of", "any_of"):
        if combinator in rule:
            for child in rule[combinator]:
                yield from rule_attributes(child)
            return
    yield rule["attribute"]


def rule_matches(rule: Mapping[str, Any], attributes: Mapping[str, object]) -> bool:
    """Whether a device with these attributes is in a (checked) rule's segment: the one
    evaluation, on the server and the device. An unknown attribute (missing, None, or a value
    not of its kind) satisfies no condition on it."""
    if "all_of" in rule:
        return all(rule_matches(child, attributes) for child in rule["all_of"])
    if "any_of" in rule:
        return any(rule_matches(child, attributes) for child in rule["any_of"])
    attribute = ATTRIBUTES[rule["attribute"]]
    value = attributes.get(attribute.name)
    if value is None or _value_problem(attribute, value) is not None:
        return False
    have = _ordered(attribute, value)  # type: ignore[arg-type]  # checked just above
    if "equals" in rule:
        return bool(have == _ordered(attribute, rule["equals"]))
    if "in" in rule:
        return any(have == _ordered(attribute, option) for option in rule["in"])
    bounds = rule["range"]
    return all(_within(have, key, _ordered(attribute, bound)) for key, bound in bounds.items())


def _within(have: Any, key: str, bound: Any) -> bool:
    if key == "gt":
        return bool(have > bound)
    if key == "gte":
        return bool(have >= bound)
    if key == "lt":
        return bool(have < bound)
    return bool(have <= bound)


def segments_of(
    segments: Mapping[str, Mapping[str, Any]], attributes: Mapping[str, object]
) -> list[str]:
    """The names of the segments (name -> checked rule) a device with these attributes is in,
    in the mapping's order."""
    return [name for name, rule in segments.items() if rule_matches(rule, attributes)]
