"""The freeze banner every page of a frozen fleet shows (base.html), with the release form."""

from typing import Any

from django import template

from routing_policies.reviews.gate import fleet_freeze_open

register = template.Library()


@register.inclusion_tag("routing_policies/_freeze_banner.html", takes_context=True)
def freeze_banner(context: template.Context, fleet: Any) -> dict[str, Any]:
    """The fleet's open freeze (one query), or nothing for a page without a fleet."""
    freeze = fleet_freeze_open(fleet_id=fleet.pk) if getattr(fleet, "pk", None) else None
    request = context.get("request")
    return {
        "freeze": freeze,
        "fleet": fleet,
        "can_publish": context.get("can_publish", False),
        "next": request.get_full_path() if request is not None else "",
        "csrf_token": context.get("csrf_token"),
    }
