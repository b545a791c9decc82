"""Policy deltas (docs/PROTOCOL.md, "Policy deltas"): a device that runs version N and is
assigned version M receives only what differs, with the hash of the whole of M.

Pure functions, shared by the control plane (`routing_policies.delta`, which makes deltas) and
the SDK (which applies them), as `edge_sdk.assignment` is.

The format is an RFC 7386 JSON merge patch, not over the document itself (its `cells` are an
array, which a merge patch can only replace whole) but over its *keyed form*: the document with
`cells` turned into an object keyed by the cell's key `task_type/latency_budget/privacy_tier`.
A one-cell change is then `{"cells": {"text/interactive/normal": {"threshold": 0.55}}, …}`.
`order` lists the target's cell keys only when its cells are not the base's, in the base's
order; `hash` is `sha256:` and the hex SHA-256 of the target's canonical encoding (RFC 8785,
the JSON Canonicalization Scheme), which the device checks after applying.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Final

__all__ = [
    "DELTA_FIELDS",
    "HASH_PREFIX",
    "DeltaError",
    "apply_delta",
    "canonical_bytes",
    "canonical_hash",
    "make_delta",
]

HASH_PREFIX: Final = "sha256:"
KEY_FIELDS: Final = ("task_type", "latency_budget", "privacy_tier")
DELTA_FIELDS: Final = ("fleet", "base", "version", "hash", "patch", "order")
_KEY_SEPARATOR: Final = "/"


class DeltaError(ValueError):
    """A delta that cannot be applied to this base (the device asks for the whole document)."""


# --- canonical encoding (RFC 8785) ----------------------------------------------------------------


def _number(value: int | float) -> str:
    """A number as ECMAScript prints the IEEE double nearest to it (RFC 8785, 3.2.2.3)."""
    number = float(value)
    if not math.isfinite(number):
        raise ValueError("NaN and Infinity have no canonical encoding")
    if number == 0:
        return "0"
    sign = "-" if number < 0 else ""
    # repr gives the shortest digits that read back as the same double, as ECMAScript does.
    _, digit_tuple, exponent = Decimal(repr(abs(number))).as_tuple()
    digits = "".join(map(str, digit_tuple)).rstrip("0") or "0"
    assert isinstance(exponent, int)
    exponent += len(digit_tuple) - len(digits)
    k, n = len(digits), exponent + len(digits)  # digits × 10^(n-k)
    if k <= n <= 21:
        text = digits + "0" * (n - k)
    elif 0 < n <= 21:
        text = f"{digits[:n]}.{digits[n:]}"
    elif -6 < n <= 0:
        text = "0." + "0" * -n + digits
    else:
        mantissa = digits if k == 1 else f"{digits[0]}.{digits[1:]}"
        text = f"{mantissa}e{'+' if n - 1 >= 0 else '-'}{abs(n - 1)}"
    return sign + text


def _utf16_order(key: str) -> list[int]:
    return list(key.encode("utf-16-be"))


def _encode(value: Any, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(json.dumps(value, ensure_ascii=False))
    elif isinstance(value, int | float):
        out.append(_number(value))
    elif isinstance(value, Mapping):
        out.append("{")
        for index, key in enumerate(sorted(value, key=_utf16_order)):
            if not isinstance(key, str):
                raise TypeError("object keys must be strings")
            if index:
                out.append(",")
            out.append(json.dumps(key, ensure_ascii=False))
            out.append(":")
            _encode(value[key], out)
        out.append("}")
    elif isinstance(value, list | tuple):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _encode(item, out)
        out.append("]")
    else:
        raise TypeError(f"{type(value).__name__} is not JSON")


class _NotPlain(Exception):
    """A value the standard library's encoder would not print as RFC 8785 does."""


_EXACT_INT: Final = 2**53


def _plain(value: Any) -> Any:
    """`value` made ready for `json.dumps(sort_keys=True)` to print it as RFC 8785 does: floats
    with a whole value become ints; _NotPlain where the two differ (a non-ASCII key, whose
    UTF-16 order may differ; a number Python prints in another form than ECMAScript)."""
    if isinstance(value, Mapping):
        plain = {}
        for key, item in value.items():
            if not isinstance(key, str) or not key.isascii():
                raise _NotPlain
            plain[key] = _plain(item)
        return plain
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, float):
        magnitude = abs(value)
        if value.is_integer():  # Python prints `.0`; ECMAScript the digits (exact below 2**53)
            if magnitude < _EXACT_INT:
                return int(value)
            raise _NotPlain
        if not 1e-4 <= magnitude < 1e16:  # Python's repr switches to exponents here
            raise _NotPlain
        return value
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= _EXACT_INT:
        raise _NotPlain
    return value


def canonical_bytes(document: Any) -> bytes:
    """The RFC 8785 (JCS) encoding: members sorted by UTF-16 code units, no whitespace, numbers
    as ECMAScript prints them, strings with the minimal escapes, UTF-8. ValueError for NaN,
    Infinity or a lone surrogate.

    Most documents take the standard library's C encoder (`_plain` says when its output is
    RFC 8785's); the rest are encoded here, value by value."""
    try:
        text = json.dumps(
            _plain(document),
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
            allow_nan=False,
        )
    except _NotPlain:
        out: list[str] = []
        _encode(document, out)
        text = "".join(out)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError("a lone surrogate has no canonical encoding") from error


def canonical_hash(document: Any) -> str:
    """`sha256:<hex>` of the document's canonical encoding."""
    return HASH_PREFIX + hashlib.sha256(canonical_bytes(document)).hexdigest()


# --- the keyed form and merge patches ---------------------------------------------------------


def _cell_label(cell: Any) -> str:
    if not isinstance(cell, Mapping):
        raise DeltaError("a cell is not an object")
    parts = [cell.get(name) for name in KEY_FIELDS]
    if not all(isinstance(part, str) and part and _KEY_SEPARATOR not in part for part in parts):
        raise DeltaError(f"a cell has no usable key ({', '.join(KEY_FIELDS)})")
    return _KEY_SEPARATOR.join(parts)  # type: ignore[arg-type]


def _keyed(document: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The document with its cells keyed by label, and the labels in the document's order."""
    cells = document.get("cells")
    if not isinstance(cells, list):
        raise DeltaError("the document has no list of cells")
    keyed_cells: dict[str, Any] = {}
    for cell in cells:
        label = _cell_label(cell)
        if label in keyed_cells:
            raise DeltaError(f"cell {label} appears twice")
        keyed_cells[label] = cell
    return {**document, "cells": keyed_cells}, list(keyed_cells)


_ABSENT: Final = object()


def _same(a: Any, b: Any) -> bool:
    """Equal as the canonical encoding sees it (True is not 1; 400 is 400.0)."""
    if type(a) is type(b) and isinstance(a, str | int | float):
        return bool(a == b)
    return canonical_bytes(a) == canonical_bytes(b)


def _has_null_member(value: Any) -> bool:
    if isinstance(value, Mapping):
        return any(item is None or _has_null_member(item) for item in value.values())
    if isinstance(value, list):
        return any(_has_null_member(item) for item in value)
    return False


class _Inexpressible(Exception):
    """A merge patch cannot say this (a member whose value is null)."""


def _merge_diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """The RFC 7386 merge patch that turns `before` into `after`."""
    patch: dict[str, Any] = {}
    for key in before:
        if key not in after:
            patch[key] = None
    for key, new in after.items():
        if new is None:
            raise _Inexpressible(key)
        old = before.get(key, _ABSENT)
        if isinstance(old, Mapping) and isinstance(new, Mapping):
            inner = _merge_diff(old, new)
            if inner:
                patch[key] = inner
        elif old is _ABSENT or not _same(old, new):
            if _has_null_member(new):
                raise _Inexpressible(key)
            patch[key] = new
    return patch


def _merge_apply(target: Any, patch: Any) -> Any:
    """RFC 7386 MergePatch(target, patch)."""
    if not isinstance(patch, Mapping):
        return patch
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge_apply(result.get(key), value)
    return result


# --- deltas -----------------------------------------------------------------------------------


def make_delta(base: Mapping[str, Any], target: Mapping[str, Any]) -> dict[str, Any] | None:
    """The delta from `base` to `target` (both policy documents), or None when the format
    cannot express it (a cell without a usable key, a member whose value is null)."""
    try:
        keyed_base, base_order = _keyed(base)
        keyed_target, target_order = _keyed(target)
        patch = _merge_diff(keyed_base, keyed_target)
        target_hash = canonical_hash(target)
    except (DeltaError, _Inexpressible, ValueError, TypeError):
        return None
    delta: dict[str, Any] = {
        "fleet": target.get("fleet"),
        "base": base.get("version"),
        "version": target.get("version"),
        "hash": target_hash,
        "patch": patch,
    }
    if target_order != base_order:
        delta["order"] = target_order
    return delta


def apply_delta(base: Mapping[str, Any], delta: Any) -> dict[str, Any]:
    """The document `delta` makes of `base`, checked against the delta's hash; DeltaError when
    the delta is malformed, is for another base or fleet, or the result does not hash right."""
    if not isinstance(delta, Mapping):
        raise DeltaError("a delta is an object")
    patch, expected, order = delta.get("patch"), delta.get("hash"), delta.get("order")
    if not isinstance(patch, Mapping):
        raise DeltaError("delta field 'patch' must be an object")
    if not isinstance(expected, str) or not expected.startswith(HASH_PREFIX):
        raise DeltaError(f"delta field 'hash' must be a string starting {HASH_PREFIX!r}")
    if order is not None and not (
        isinstance(order, list) and all(isinstance(label, str) for label in order)
    ):
        raise DeltaError("delta field 'order' must be a list of cell keys")
    if "base" in delta and delta["base"] != base.get("version"):
        raise DeltaError(f"the delta is from version {delta['base']!r}, not this one")
    if delta.get("fleet") is not None and delta.get("fleet") != base.get("fleet"):
        raise DeltaError("the delta is for another fleet")
    keyed_base, base_order = _keyed(base)
    try:
        result: dict[str, Any] = _merge_apply(keyed_base, patch)
    except RecursionError:
        raise DeltaError("the delta is nested too deeply") from None
    cells = result.get("cells")
    if not isinstance(cells, dict):
        raise DeltaError("the delta leaves no cells")
    if order is None:
        order = [label for label in base_order if label in cells]
    if len(order) != len(cells) or set(order) != set(cells):
        raise DeltaError("delta field 'order' does not name exactly the resulting cells")
    result["cells"] = [cells[label] for label in order]
    try:
        actual = canonical_hash(result)
    except (ValueError, TypeError) as error:
        raise DeltaError(f"the result has no canonical encoding: {error}") from None
    if actual != expected:
        raise DeltaError("the result does not match the delta's hash")
    return result
