"""One guard for every JSON body and WebSocket frame, applied before and right after parsing.

- Depth: a body nested deeper than MAX_DEPTH is refused before any parser sees it. Python's
  `json` (and every recursive parser) recurses once per level, so ~1,000 levels in a 2 KB
  body would raise RecursionError (a 500); the check is a scan of the bytes (C-speed string
  operations, no recursion): about a millisecond for a 500 KB batch of 1,000 events.
- Strings: NUL (`\\u0000`) and lone UTF-16 surrogates (`\\ud800`) are refused in every key and
  string value: PostgreSQL cannot store the first, UTF-8 cannot encode the second, and either
  would otherwise surface as a psycopg DataError or a UnicodeEncodeError, a 500.
- Numbers: `NaN`, `Infinity`, `-Infinity` and numbers beyond the float range (`1e999`, read
  as infinity) are refused, naming the field, instead of a parse error with no details.

Each refusal is a `JsonRefused` (a ValidationFailed, so the API answers 400 in the shape of
controlplane.exceptions) naming the path of the offending value: `cells[0].values.threshold`.
Used by the DRF parser (controlplane.parsers), the telemetry ingest (both paths), the device
and dashboard sockets, and the policy import page.
"""

from __future__ import annotations

import json
import math
import re
from itertools import accumulate
from typing import Any, Final, NamedTuple

from .exceptions import ValidationFailed

# The deepest body of the API, a cell edit with nested weights, is 5 levels deep; 32 leaves
# room for extension fields a newer client may add, and is far below Python's recursion limit.
MAX_DEPTH: Final = 32

_STEP: Final = [0] * 256
for _opener in b"[{":
    _STEP[_opener] = 1
for _closer in b"]}":
    _STEP[_closer] = -1
# Everything but brackets and quotes, deleted by bytes.translate.
_NOT_STRUCTURE: Final = bytes(b for b in range(256) if b not in b'[]{}"')
_TOKEN: Final = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{},]', re.DOTALL)
# An escape that may decode to NUL or to a surrogate (a pair is fine; the walk tells).
_SUSPECT_ESCAPE: Final = re.compile(rb"\\u(?:0000|[dD][89a-fA-F][0-9a-fA-F]{2})")
_BAD_CHARACTER: Final = re.compile("[\x00\ud800-\udfff]")
_PATH_PART_MAX: Final = 64
_PATH_SCAN_MAX_BYTES: Final = 64 * 1024


class JsonProblem(NamedTuple):
    """Where a body breaks a rule (`events[3].task_type`, `` for the whole body) and how."""

    field: str
    message: str


class JsonRefused(ValidationFailed):
    """A body or frame refused by this guard; `problem` names the field."""

    def __init__(self, problem: JsonProblem) -> None:
        super().__init__(
            f"{problem.field or 'The body'}: {problem.message}",
            details=[{"field": problem.field or "body", "message": problem.message}],
        )
        self.problem = problem


def unstorable_character(text: str) -> bool:
    """True when `text` holds a NUL or a lone surrogate: PostgreSQL cannot store either, and a
    lone surrogate cannot even be encoded as UTF-8."""
    return _BAD_CHARACTER.search(text) is not None


def printable(text: str) -> str:
    """`text` with NUL and lone surrogates spelled as escapes, safe in any answer or log."""
    return _BAD_CHARACTER.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _join(parts: list[str | int]) -> str:
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            name = printable(part[:_PATH_PART_MAX])
            out += f".{name}" if out else name
    return out


# --- depth ------------------------------------------------------------------------------------


def depth_problem(raw: bytes, limit: int = MAX_DEPTH) -> JsonProblem | None:
    """Why `raw` (UTF-8 JSON) is nested too deep, or None; never recurses.

    Exact for valid JSON: escaped backslashes and quotes are removed first, then strings, so
    only the brackets outside strings count. For malformed input it may count too much (the
    body is refused either way), never too little for the valid prefix a parser would read.
    The path is named for bodies up to 64 KiB.
    """
    if len(raw) <= limit:
        return None
    unescaped = raw.replace(b"\\\\", b"").replace(b'\\"', b"") if b"\\" in raw else raw
    # Between the quotes that remain, every other piece is a string's content (an unterminated
    # string's content is dropped too: no parser recurses into a string). Adjacent quotes go
    # first, cheaply: removing two neighbours keeps every other quote's parity.
    quoted = unescaped.translate(None, _NOT_STRUCTURE).replace(b'""', b"")
    structure = b"".join(quoted.split(b'"')[::2]) if b'"' in quoted else quoted
    if max(accumulate(map(_STEP.__getitem__, structure)), default=0) <= limit:
        return None
    # Naming the path costs a Python step per token: only for bodies of a reasonable size.
    field = _path_of_excess(raw, limit) if len(raw) <= _PATH_SCAN_MAX_BYTES else ""
    return JsonProblem(field, f"Nested more than {limit} levels deep; refused unread.")


def _path_of_excess(raw: bytes, limit: int) -> str:
    """The path of the first value that opens level `limit + 1` (only for a refused body)."""
    # Each frame: [is_object, key or index, expecting a key]
    stack: list[list[Any]] = []
    for match in _TOKEN.finditer(raw):
        token = match.group()
        first = token[0]
        if first == 0x22:  # a string: a key when the object expects one
            if stack and stack[-1][0] and stack[-1][2]:
                try:
                    stack[-1][1] = json.loads(token)
                except ValueError:
                    stack[-1][1] = token[1:-1].decode("utf-8", "replace")
                stack[-1][2] = False
        elif first in b"[{":
            if len(stack) >= limit:
                break
            is_object = first == 0x7B
            stack.append([is_object, "" if is_object else 0, is_object])
        elif first in b"]}":
            if stack:
                stack.pop()
        elif stack:  # a comma
            if stack[-1][0]:
                stack[-1][2] = True
            else:
                stack[-1][1] += 1
    return _join([frame[1] for frame in stack])


# --- values -----------------------------------------------------------------------------------


def _string_problem(text: str, subject: str = "Must") -> str | None:
    found = _BAD_CHARACTER.search(text)
    if found is None:
        return None
    if found.group() == "\x00":
        return f"{subject} not contain the NUL character (\\u0000)."
    return f"{subject} not contain a lone UTF-16 surrogate (e.g. \\ud800); send valid Unicode."


def value_problem(value: Any, *, numbers: bool = True) -> JsonProblem | None:
    """The first bad string (NUL, lone surrogate) or, with `numbers`, non-finite number in a
    parsed value (its depth already bounded), with its path; None when all is well."""
    stack: list[tuple[list[str | int], Any]] = [([], value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            message = _string_problem(item)
            if message is not None:
                return JsonProblem(_join(path), message)
        elif isinstance(item, float):
            if numbers and not math.isfinite(item):
                return JsonProblem(
                    _join(path),
                    "Must be a finite number: NaN, Infinity and numbers beyond ±1.8e308 are "
                    "not accepted.",
                )
        elif isinstance(item, dict):
            children: list[tuple[list[str | int], Any]] = []
            for key, child in item.items():
                message = _string_problem(key, "The name must")
                if message is not None:
                    return JsonProblem(_join([*path, key]), message)
                children.append(([*path, key], child))
            stack.extend(reversed(children))
        elif isinstance(item, list):
            indexed = [([*path, index], child) for index, child in enumerate(item)]
            stack.extend(reversed(indexed))
    return None


# --- the entry points -------------------------------------------------------------------------


def _utf8(raw: bytes | str) -> bytes:
    return raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw


def loads(raw: bytes | str, *, limit: int = MAX_DEPTH) -> Any:
    """Parse a JSON body or frame: JsonRefused for depth, bad strings and non-finite numbers;
    ValueError (UnicodeDecodeError, JSONDecodeError) when it is not UTF-8 JSON at all."""
    data = _utf8(raw)
    problem = depth_problem(data, limit)
    if problem is not None:
        raise JsonRefused(problem)
    text = raw if isinstance(raw, str) else raw.decode("utf-8")
    value = json.loads(text)  # NaN and Infinity parse; the walk names where they are
    problem = value_problem(value)
    if problem is not None:
        raise JsonRefused(problem)
    return value


def check_raw(raw: bytes, *, limit: int = MAX_DEPTH) -> None:
    """For bodies another parser decodes (telemetry's msgspec): JsonRefused for depth and bad
    strings, at the cost of a scan; parsed here only when the bytes hold an escape that may be
    a NUL or a surrogate. (That parser refuses NaN and Infinity itself: they are not JSON.)"""
    problem = depth_problem(raw, limit)
    if problem is None and _SUSPECT_ESCAPE.search(raw):
        try:
            value = json.loads(raw.decode("utf-8"))
        except ValueError:
            return  # malformed: the caller's parser says where
        problem = value_problem(value)
    if problem is not None:
        raise JsonRefused(problem)
