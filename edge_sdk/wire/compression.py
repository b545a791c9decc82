"""Content codings of bodies (`Content-Encoding` / `Accept-Encoding`): gzip, and zstd when the
`zstandard` package is installed. Inflating is bounded: it stops as soon as the inflated size
passes the limit (`TooLarge`), so a small body that inflates to gigabytes (a decompression
bomb) costs at most `limit` bytes of memory and is refused, never inflated whole."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterable
from typing import Any, Final

__all__ = [
    "CODINGS",
    "TooLarge",
    "UnsupportedCoding",
    "compress",
    "inflate",
    "preferred_coding",
]

_ZSTD: Any
try:  # an optional dependency: without it, zstd is neither offered nor accepted
    import zstandard as _ZSTD
except ImportError:  # pragma: no cover  # installed with the project
    _ZSTD = None
# The codings this side reads and writes, the preferred first.
CODINGS: Final = ("zstd", "gzip") if _ZSTD is not None else ("gzip",)
_ALIASES: Final = {"x-gzip": "gzip"}
_CHUNK: Final = 64 * 1024


class TooLarge(ValueError):
    """The body inflates past the limit."""


class UnsupportedCoding(ValueError):
    """A content coding this side does not read."""


def _coding(name: str) -> str:
    coding = name.strip().lower()
    return _ALIASES.get(coding, coding)


def inflate(body: bytes, coding: str, *, limit: int) -> bytes:
    """`body` decoded from `coding` ("", "identity", "gzip", "zstd"), at most `limit` bytes:
    TooLarge past it (stopping there), ValueError when the body is not of that coding,
    UnsupportedCoding for another coding (or several stacked)."""
    name = _coding(coding)
    if name in ("", "identity"):
        if len(body) > limit:
            raise TooLarge(f"the body is over {limit} bytes")
        return body
    if name == "gzip":
        return _gunzip(body, limit)
    if name == "zstd" and _ZSTD is not None:
        return _unzstd(body, limit)
    raise UnsupportedCoding(f"content coding {coding.strip()[:40]!r} is not supported")


def _gunzip(body: bytes, limit: int) -> bytes:
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as error:
        raise ValueError(f"not gzip: {error}") from None
    if len(out) > limit:
        raise TooLarge(f"the body inflates to more than {limit} bytes")
    if not inflater.eof or inflater.unused_data:
        raise ValueError("not gzip: truncated, or more than one member")
    return out


def _unzstd(body: bytes, limit: int) -> bytes:
    parts: list[bytes] = []
    size = 0
    try:
        with _ZSTD.ZstdDecompressor().stream_reader(body, read_across_frames=True) as reader:
            while True:
                chunk = reader.read(min(_CHUNK, limit + 1 - size))
                if not chunk:
                    break
                parts.append(chunk)
                size += len(chunk)
                if size > limit:
                    raise TooLarge(f"the body inflates to more than {limit} bytes")
    except _ZSTD.ZstdError as error:
        raise ValueError(f"not zstd: {error}") from None
    return b"".join(parts)


def compress(body: bytes, coding: str) -> bytes:
    """`body` in `coding` ("gzip" or "zstd"; "" or "identity": as it is)."""
    name = _coding(coding)
    if name in ("", "identity"):
        return body
    if name == "gzip":
        return gzip.compress(body, compresslevel=6, mtime=0)
    if name == "zstd" and _ZSTD is not None:
        compressed: bytes = _ZSTD.ZstdCompressor(level=3).compress(body)
        return compressed
    raise UnsupportedCoding(f"content coding {coding!r} is not supported")


def preferred_coding(accept_encoding: str, offered: Iterable[str] = CODINGS) -> str:
    """The coding to answer with for an `Accept-Encoding` header ("" for none): the first of
    `offered` the header accepts with a q above 0 (RFC 9110; `*` accepts any)."""
    accepted: dict[str, float] = {}
    for item in accept_encoding.split(","):
        name, _, params = item.partition(";")
        q = 1.0
        for param in params.split(";"):
            key, _, value = param.strip().partition("=")
            if key.lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if name.strip():
            accepted[_coding(name)] = q
    for coding in offered:
        q = accepted.get(coding, accepted.get("*", 0.0))
        if q > 0:
            return coding
    return ""
