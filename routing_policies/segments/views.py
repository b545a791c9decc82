"""The segment page of a fleet: its segments with how many enrolled devices each matches, and
an editor (add, change, delete) whose count follows the rule as it is typed
(static/js/segments.js asks the preview API)."""

import json
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from controlplane.pages import form_input, posted_change
from controlplane.roles import Role

from ..policies.models import Fleet
from ..policies.pages import fleet_action, fleet_page
from . import schemas, selectors, services
from .rules import ATTRIBUTES, RULE_EXAMPLES

_SIGNS = {"gt": ">", "gte": "≥", "lt": "<", "lte": "≤"}


def rule_text(rule: dict[str, Any]) -> str:
    """A (checked) rule as a person reads it: `accelerator = npu and os_version ≥ 14`."""
    for combinator, word in (("all_of", " and "), ("any_of", " or ")):
        if combinator in rule:
            parts = [rule_text(child) for child in rule[combinator]]
            text = word.join(parts)
            return f"({text})" if len(parts) > 1 else text
    name = rule["attribute"]
    if "equals" in rule:
        return f"{name} = {rule['equals']}"
    if "in" in rule:
        return f"{name} in {', '.join(str(v) for v in rule['in'])}"
    return " and ".join(f"{name} {_SIGNS[k]} {v}" for k, v in rule["range"].items())


_KEY_ORDER = {"attribute": 0, "equals": 1, "in": 1, "range": 1, "all_of": 2, "any_of": 2}


def rule_shown(rule: Any) -> Any:
    """A rule with its keys in the order a person writes them (`attribute` first): the
    database's JSON keeps its own order."""
    if isinstance(rule, dict):
        ordered = sorted(rule.items(), key=lambda item: (_KEY_ORDER.get(item[0], 3), item[0]))
        return {key: rule_shown(value) for key, value in ordered}
    if isinstance(rule, list):
        return [rule_shown(item) for item in rule]
    return rule


def _page(
    request: HttpRequest,
    fleet: Fleet,
    *,
    status: int = 200,
    posted: dict[str, Any] | None = None,
    **extra: Any,
) -> HttpResponse:
    overview = selectors.segments_overview(fleet=fleet)
    segments = overview["segments"]
    for segment in segments:
        segment["text"] = rule_text(segment["rule"]).removeprefix("(").removesuffix(")")
        segment["rule_json"] = json.dumps(rule_shown(segment["rule"]), indent=2, ensure_ascii=False)
    editing = next((s for s in segments if s["name"] == request.GET.get("edit")), None)
    form = posted or (
        {
            "name": editing["name"],
            "description": editing["description"],
            "rule": editing["rule_json"],
            "revision": editing["revision"],
            "editing": editing["name"],
        }
        if editing
        else {"rule": json.dumps(RULE_EXAMPLES[0][1], indent=2)}
    )
    context = {
        "fleet": fleet,
        "segments": segments,
        "form": form,
        "attributes": list(ATTRIBUTES.values()),
        "examples": [(label, json.dumps(rule)) for label, rule in RULE_EXAMPLES],
        "devices": overview["devices"],
        **extra,
    }
    return render(request, "routing_policies/segments.html", context, status=status)


segment_page = fleet_page(_page, "The fleet's segments, each with the devices it matches.")


def _refused_page(request: HttpRequest, fleet: Fleet, editing: str = "") -> Any:
    def draw(**page: Any) -> HttpResponse:
        posted = {**page.pop("posted", {}), "editing": editing}
        return _page(request, fleet, posted=posted, **page)

    return draw


@fleet_action(Role.EDITOR)
def segment_create(request: HttpRequest, fleet: Fleet) -> HttpResponse:
    """Add a segment."""

    def change() -> tuple[str, str]:
        data = form_input(schemas.SegmentInputSerializer, request.POST)
        segment = services.segment_create(actor=request.user, fleet=fleet, **data)
        return f"Segment {segment.name} added.", reverse("fleet-segments", args=[fleet.slug])

    return posted_change(request, _refused_page(request, fleet), change)


@fleet_action(Role.EDITOR)
def segment_update(request: HttpRequest, fleet: Fleet, name: str) -> HttpResponse:
    """Change a segment (as of the revision the form was drawn with)."""

    def change() -> tuple[str, str]:
        data = form_input(schemas.SegmentUpdateSerializer, request.POST)
        # The form always shows the description: a blank one posted clears it.
        changes = {**schemas.update_arguments(data), "description": data.get("description", "")}
        segment = services.segment_update(actor=request.user, fleet=fleet, name=name, **changes)
        return f"Segment {segment.name} saved.", reverse("fleet-segments", args=[fleet.slug])

    return posted_change(request, _refused_page(request, fleet, name), change)


@fleet_action(Role.EDITOR)
def segment_delete(request: HttpRequest, fleet: Fleet, name: str) -> HttpResponse:
    """Delete a segment."""

    def change() -> tuple[str, str]:
        services.segment_delete(actor=request.user, fleet=fleet, name=name)
        return f"Segment {name} deleted.", reverse("fleet-segments", args=[fleet.slug])

    return posted_change(request, _refused_page(request, fleet), change)
