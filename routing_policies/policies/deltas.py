"""Deltas between published versions (docs/PROTOCOL.md, "Policy deltas"): which pairs the
control plane makes one for, and the delta itself as JSON text, kept per process.

Both versions never change, so a delta made once is right for ever; it is kept under the pair's
ETags and publication times (a version number alone could name other content after a database
was restored).
"""

import json
from collections import OrderedDict
from typing import Any, Final

from django.conf import settings

from ..delta import make_delta
from ..validation import MAX_VERSION
from .models import PolicyVersion
from .selectors import published_version_get, version_document

__all__ = ["delta_json", "delta_kept", "published_delta_json"]

_COMPACT: Final = (",", ":")
_NO_DELTA: Final = ""
_CACHE_SIZE: Final = 1024
_made: OrderedDict[tuple[Any, ...], str] = OrderedDict()


def delta_kept(*, base: int, target: int) -> bool:
    """Whether the control plane makes a delta from `base` to `target`: both published numbers
    at most POLICY_DELTA_WINDOW apart (a device further behind gets the whole document)."""
    return 1 <= base <= MAX_VERSION and abs(target - base) <= settings.POLICY_DELTA_WINDOW


def delta_json(base: dict[str, Any], target: dict[str, Any], *, full_size: int) -> str | None:
    """The delta from one document to the other as compact JSON, or None when the format cannot
    say it or it is not smaller than the whole document (`full_size` bytes)."""
    delta = make_delta(base, target)
    if delta is None:
        return None
    text = json.dumps(delta, separators=_COMPACT, ensure_ascii=False)
    return text if len(text.encode()) < full_size else None


def published_delta_json(
    *, fleet_id: int, base: int, target: int, base_etag: str | None = None
) -> str | None:
    """The delta from published version `base` to `target` of the fleet, as JSON text; None
    when the pair is not kept, either version does not exist (or `base` is not tagged
    `base_etag`, when given), or a delta would not help."""
    if not delta_kept(base=base, target=target):
        return None
    # What names each version's document: its ETag (the table) and when it was published.
    rows = {
        number: (etag, published_at)
        for number, etag, published_at in PolicyVersion.objects.filter(
            fleet_id=fleet_id, number__in=(base, target), published_at__isnull=False
        ).values_list("number", "etag", "published_at")
    }
    if len(rows) != len({base, target}) or base_etag not in (None, rows[base][0]):
        return None
    key = (fleet_id, base, *rows[base], target, *rows[target])
    made = _made.get(key)
    if made is None:
        documents = []
        for number in (base, target):
            version = published_version_get(fleet_id=fleet_id, number=number)
            assert version is not None
            documents.append(version_document(version=version))
        full_size = len(json.dumps(documents[1], separators=_COMPACT).encode())
        made = delta_json(documents[0], documents[1], full_size=full_size) or _NO_DELTA
        _made[key] = made
        while len(_made) > _CACHE_SIZE:
            _made.popitem(last=False)
    _made.move_to_end(key)
    return made or None
