"""Which rollup rows a segment filter reads: a fleet's named segment, by name, as its id.

The rollups keep the segment as a dimension bounded by the fleet's named segments (schema:
`segment`, 0 for the all-devices rows). The dashboard, the metrics API and alert rules name a
segment by its name; it is read here, once, as the id its rows are keyed by (a renamed segment
keeps its rows). A name the fleet has no segment of (another fleet's segment too) is refused,
naming the field, never read as the all-devices rows.
"""

from __future__ import annotations

import re
from typing import Any, Final

from controlplane.exceptions import ValidationFailed
from routing_policies.models import Segment

from .schema import ALL_DEVICES

# A segment's name as the segments part admits it (routing_policies segments.schemas): a
# lower-case letter or digit, then a-z, 0-9, _ or -, at most 64 characters.
SEGMENT_NAME_PATTERN: Final = r"\A[a-z0-9][a-z0-9_-]{0,63}\Z"
SEGMENT_NAME_RE: Final = re.compile(SEGMENT_NAME_PATTERN)
SEGMENT_NAME_MESSAGE: Final = (
    "`{field}` must be a segment name (a lower-case letter or digit, then a-z, 0-9, _ or -; ≤ 64)."
)


def segment_named(fleet_id: int, name: str | None, *, field: str = "segment") -> int:
    """The id of the fleet's segment called `name` (ALL_DEVICES for None: no filter); a
    ValidationFailed naming `field` when the name is not one of the fleet's segments."""
    return segment_and_rule(fleet_id, name, field=field)[0]


def segment_and_rule(
    fleet_id: int, name: str | None, *, field: str = "segment"
) -> tuple[int, dict[str, Any] | None]:
    """`segment_named`, with the segment's rule as it is now (None for no filter), in the
    same one query: what a figure of its devices now (not of its rows) is counted with."""
    if name is None:
        return ALL_DEVICES, None
    if not isinstance(name, str) or not SEGMENT_NAME_RE.match(name):
        raise ValidationFailed(
            SEGMENT_NAME_MESSAGE.format(field=field),
            details=[{"field": field, "message": "not a segment name"}],
        )
    found = Segment.objects.filter(fleet_id=fleet_id, name=name).values_list("pk", "rule").first()
    if found is None:
        raise ValidationFailed(
            f"`{field}`: this fleet has no segment {name!r}.",
            details=[{"field": field, "message": "unknown segment"}],
        )
    return int(found[0]), found[1]


def segment_names(fleet_id: int) -> list[str]:
    """The fleet's segments' names, by name (the filter's choices on a page)."""
    return list(
        Segment.objects.filter(fleet_id=fleet_id).order_by("name").values_list("name", flat=True)
    )
