"""The fleet's navigation (base.html): every page of a fleet one click away, the current one
marked, on every page that shows a fleet."""

from typing import Any

from django import template
from django.urls import reverse

register = template.Library()

# (label, the page's route name, the other routes whose pages it marks as current too). Grouped
# as a person works: the policy and its history, shipping it, watching it, trying changes out.
FLEET_PAGES: tuple[tuple[str, tuple[tuple[str, ...], ...]], ...] = (
    (
        "Policy",
        (
            ("Matrix", "fleet-detail", "draft-import"),
            ("Versions", "version-list"),
            ("Diff", "version-diff"),
            ("Audit log", "fleet-audit"),
        ),
    ),
    (
        "Release",
        (
            ("Rollout", "fleet-rollout"),
            ("Change requests", "fleet-reviews", "change-request"),
            ("Schedules", "fleet-schedules"),
            ("Devices", "device-list"),
            ("Segments", "fleet-segments"),
        ),
    ),
    ("Watch", (("Dashboard", "fleet-dashboard"), ("Alerts", "fleet-alerts", "alert-rule-edit"))),
    (
        "Experiment",
        (
            ("Lab", "fleet-lab"),
            ("Calibrate θ", "lab-calibrate"),
            ("Backtests", "fleet-backtests"),
            ("Autopilot", "fleet-autopilot"),
        ),
    ),
)


@register.inclusion_tag("controlplane/_fleet_nav.html", takes_context=True)
def fleet_nav(context: template.Context, fleet: Any) -> dict[str, Any]:
    """The fleet's pages in groups, each with its URL and whether it is the page shown."""
    request = context.get("request")
    match = getattr(request, "resolver_match", None)
    current = match.url_name if match is not None else ""
    groups = [
        {
            "label": group,
            "pages": [
                {
                    "label": label,
                    "url": reverse(route, args=[fleet.slug]),
                    "current": current in (route, *also),
                }
                for label, route, *also in pages
            ],
        }
        for group, pages in FLEET_PAGES
    ]
    return {"fleet": fleet, "groups": groups}
