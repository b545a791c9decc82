"""Negotiating the encoding of a device's bodies and documents (docs/PROTOCOL.md, "Binary frames
and compression"): JSON unless the device asks for protobuf, identity unless it asks for a
content coding. Only the boundary changes: a protobuf or compressed body is turned into the
JSON bytes it stands for, and then read by the JSON path, with its validation and its answers.

Also the per-process count of refused binary input (bodies, frames, MQTT payloads), exposed on
`/metrics` as `controlplane_wire_refused_total{channel, reason}`.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import msgspec
from django.http import HttpRequest, HttpResponse
from django.utils.cache import patch_vary_headers
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request

from edge_sdk.wire import PROTOBUF_MEDIA_TYPE, codec, compression

from .exceptions import error_body

JSON_MEDIA_TYPE: Final = "application/json"
# Also read: the media type some protobuf clients send.
_PROTOBUF_TYPES: Final = frozenset({PROTOBUF_MEDIA_TYPE, "application/protobuf"})

# (status, JSON body, headers): the shape of an answer the device batch endpoints give.
Outcome = tuple[int, dict[str, Any], dict[str, str]]


# --- the refusal counter ------------------------------------------------------------------------

_refused: Counter[tuple[str, str]] = Counter()
_refused_lock = threading.Lock()


def count_refused(channel: str, reason: str) -> None:
    """Count one refused binary or compressed input (`channel`: http, websocket, mqtt)."""
    with _refused_lock:
        _refused[(channel, reason)] += 1


def refused_metrics() -> str:
    """The counter in the Prometheus text format (this process's counts since it started)."""
    lines = [
        "# HELP controlplane_wire_refused_total Protobuf or compressed input refused "
        "(this process), by channel and reason.",
        "# TYPE controlplane_wire_refused_total counter",
    ]
    with _refused_lock:
        counts = sorted(_refused.items())
    lines.extend(
        f'controlplane_wire_refused_total{{channel="{channel}",reason="{reason}"}} {count}'
        for (channel, reason), count in counts
    )
    return "\n".join(lines) + "\n"


# --- request bodies -----------------------------------------------------------------------------


def _media_type(content_type: str) -> str:
    return content_type.partition(";")[0].strip().lower()


def is_protobuf(content_type: str) -> bool:
    """True when a `Content-Type` (or an MQTT 5 content type) names protobuf."""
    return _media_type(content_type) in _PROTOBUF_TYPES


class BodyRefused(Exception):
    """A body refused at the boundary, with the answer to give (413, 415 or 400)."""

    def __init__(self, outcome: Outcome, reason: str) -> None:
        super().__init__(reason)
        self.outcome = outcome
        self.reason = reason


@dataclass(frozen=True, slots=True)
class BodyFormat:
    """How a body was sent: protobuf or JSON, and its content coding ("" for none)."""

    protobuf: bool
    coding: str

    @classmethod
    def of(cls, content_type: str, content_encoding: str) -> BodyFormat | None:
        """The format of a body with these headers; None for plain JSON (the default)."""
        protobuf = is_protobuf(content_type)
        coding = content_encoding.strip().lower()
        if coding == "identity":
            coding = ""
        if not protobuf and not coding:
            return None
        return cls(protobuf=protobuf, coding=coding)

    def json_body(
        self,
        body: bytes,
        *,
        limit: int,
        to_json: Callable[[bytes], Mapping[str, Any] | bytes],
    ) -> bytes:
        """The JSON bytes `body` stands for: inflated (never past `limit`), then, for protobuf,
        decoded by `to_json` (to the JSON value, or straight to its text) and written as JSON.
        BodyRefused with the answer otherwise."""
        try:
            raw = compression.inflate(body, self.coding, limit=limit)
        except compression.TooLarge:
            raise BodyRefused(
                (
                    413,
                    error_body("payload_too_large", f"The body inflates past {limit} bytes."),
                    {},
                ),
                "too_large",
            ) from None
        except compression.UnsupportedCoding as exc:
            accepted = ", ".join(compression.CODINGS)
            message = f"{exc}; send {accepted} or none."
            raise BodyRefused(
                (415, error_body("unsupported_encoding", message), {}), "unsupported_encoding"
            ) from None
        except ValueError as exc:
            raise BodyRefused(
                (400, error_body("malformed_body", f"Content-Encoding {self.coding}: {exc}"), {}),
                "malformed_encoding",
            ) from None
        if not self.protobuf:
            return raw
        try:
            value = to_json(raw)
        except codec.WireError as exc:
            raise BodyRefused(
                (400, error_body("malformed_protobuf", f"The body is not protobuf: {exc}"), {}),
                "malformed_protobuf",
            ) from None
        # (`to_json` writes a non-finite double as a string: refused there, naming the field.)
        return value if isinstance(value, bytes) else _ENCODER.encode(value)


_JSON: Final = JSONRenderer()
_ENCODER: Final = msgspec.json.Encoder()


# --- documents ----------------------------------------------------------------------------------


def _quality(params: str) -> float:
    for param in params.split(";"):
        key, _, value = param.strip().partition("=")
        if key.lower() == "q":
            try:
                return float(value)
            except ValueError:
                return 0.0
    return 1.0


def accepts_protobuf(accept: str) -> bool:
    """True when an `Accept` header prefers protobuf: it names it with a q above 0 and at least
    the q of JSON (`application/json`, `application/*` or `*/*`)."""
    protobuf = json = 0.0
    for item in accept.split(","):
        media, _, params = item.partition(";")
        media = media.strip().lower()
        q = _quality(params)
        if media in _PROTOBUF_TYPES:
            protobuf = max(protobuf, q)
        elif media in (JSON_MEDIA_TYPE, "application/*", "*/*"):
            json = max(json, q)
    return protobuf > 0 and protobuf >= json


def _negotiated(request: HttpRequest) -> tuple[bool, str]:
    """(protobuf, coding) a document's answer takes for this request."""
    protobuf = accepts_protobuf(request.headers.get("Accept", ""))
    return protobuf, compression.preferred_coding(request.headers.get("Accept-Encoding", ""))


def document_response(request: HttpRequest, document: Mapping[str, Any]) -> HttpResponse | None:
    """The document as the request negotiated it (protobuf on `Accept`, compressed on
    `Accept-Encoding`), or None when the request asked for neither: plain JSON, as always."""
    protobuf, coding = _negotiated(request)
    if not protobuf and not coding:
        return None
    if protobuf:
        content, media = codec.document_to_protobuf(document), PROTOBUF_MEDIA_TYPE
    else:
        content, media = _JSON.render(document), JSON_MEDIA_TYPE
    response = HttpResponse(compression.compress(content, coding), content_type=media)
    if coding:
        response["Content-Encoding"] = coding
    return response


def delta_response(request: HttpRequest, delta_text: str, *, status: int = 200) -> HttpResponse:
    """A policy delta (its JSON text) as the request negotiated it, as `document_response`
    negotiates a document: a `PolicyDelta` on `Accept` preferring protobuf, compressed on
    `Accept-Encoding`; else the JSON text as it is. The caller finishes it with
    `negotiated_document` (ETag, Vary)."""
    protobuf, coding = _negotiated(request)
    if protobuf:
        content, media = codec.delta_to_protobuf(json.loads(delta_text)), PROTOBUF_MEDIA_TYPE
    else:
        content, media = delta_text.encode(), JSON_MEDIA_TYPE
    response = HttpResponse(
        compression.compress(content, coding), status=status, content_type=media
    )
    if coding:
        response["Content-Encoding"] = coding
    return response


def negotiated_document(request: HttpRequest, response: HttpResponse, *, etag: str) -> HttpResponse:
    """Finish a document's answer (200 or 304): its ETag, and `Vary: Accept, Accept-Encoding`
    (shared caches, CDNs). The ETag is the version's strong tag for JSON, compressed or not
    (most HTTP clients ask for gzip by default: their tag stays the one the document names), and
    its weak form (`W/`) for protobuf, another representation of the same document; If-None-Match
    is compared weakly, so either form answers 304."""
    protobuf, _ = _negotiated(request)
    response["ETag"] = f"W/{etag}" if protobuf and etag.startswith('"') else etag
    patch_vary_headers(response, ("Accept", "Accept-Encoding"))
    return response


class JsonWhateverAccepted(BaseContentNegotiation):
    """DRF's negotiation for the document endpoints: their JSON renderer whatever `Accept` says
    (the view answers protobuf itself, `document_response`); never a 406."""

    def select_parser(self, request: Request, parsers: Any) -> Any:
        return parsers[0] if parsers else None

    def select_renderer(self, request: Request, renderers: Any, format_suffix: Any = None) -> Any:
        return renderers[0], renderers[0].media_type
