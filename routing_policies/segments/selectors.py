"""Reads of segments: a fleet's segments, one by name, and how many enrolled devices a rule
matches (the preview), counted from the fleet's attribute census with the one evaluation."""

from typing import Any

from ..policies.models import Fleet
from .hooks import attribute_census
from .models import Segment
from .rules import rule_attributes, rule_matches

Census = list[tuple[dict[str, Any], int]]


def segment_list(*, fleet: Fleet) -> list[Segment]:
    """The fleet's segments, by name."""
    return list(Segment.objects.filter(fleet=fleet).order_by("name"))


def segment_get(*, fleet: Fleet, name: str) -> Segment | None:
    """The fleet's segment of that name, or None."""
    return Segment.objects.filter(fleet=fleet, name=name).first()


def segment_rules(*, fleet: Fleet) -> dict[str, dict[str, Any]]:
    """The fleet's segments as name -> rule, by name (what `segments_of` reads)."""
    return dict(Segment.objects.filter(fleet=fleet).order_by("name").values_list("name", "rule"))


def rule_preview(
    *, fleet: Fleet, rule: dict[str, Any], census: Census | None = None
) -> dict[str, Any]:
    """How many of the fleet's enrolled devices a (checked) rule matches, of how many, and
    warnings: it matches none or all of them, or reads an attribute no device reports.
    Counted per distinct set of attributes (one GROUP BY), each evaluated once."""
    census = attribute_census(fleet) if census is None else census
    devices = sum(count for _, count in census)
    matching = sum(count for attributes, count in census if rule_matches(rule, attributes))
    warnings: list[dict[str, str]] = []
    if devices == 0:
        warnings.append(
            {"code": "no_devices", "message": "No device has enrolled in this fleet yet."}
        )
    elif matching == 0:
        warnings.append(
            {"code": "matches_none", "message": "No enrolled device matches this rule."}
        )
    elif matching == devices:
        warnings.append(
            {
                "code": "matches_all",
                "message": "Every enrolled device matches this rule: it sets nothing apart.",
            }
        )
    reported = {name for attributes, _ in census for name in attributes}
    for name in dict.fromkeys(rule_attributes(rule)):
        if devices and name not in reported:
            warnings.append(
                {
                    "code": "attribute_unreported",
                    "message": f"No enrolled device reports {name}; a device that does not "
                    "send an attribute matches no condition on it.",
                }
            )
    return {"matching": matching, "devices": devices, "warnings": warnings}


def segment_out(segment: Segment, preview: dict[str, Any] | None = None) -> dict[str, Any]:
    """A segment as the API answers it (with its preview when given)."""
    out: dict[str, Any] = {
        "name": segment.name,
        "description": segment.description,
        "rule": segment.rule,
        "revision": segment.revision,
        "created_at": segment.created_at,
        "updated_at": segment.updated_at,
    }
    if preview is not None:
        out["preview"] = preview
    return out


def segments_overview(*, fleet: Fleet) -> dict[str, Any]:
    """The fleet's enrolled devices and its segments, each with its preview (one census for
    all)."""
    census = attribute_census(fleet)
    return {
        "devices": sum(count for _, count in census),
        "segments": [
            segment_out(segment, rule_preview(fleet=fleet, rule=segment.rule, census=census))
            for segment in segment_list(fleet=fleet)
        ],
    }
